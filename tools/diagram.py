"""Draw docs/architecture.png, the picture of the system in the README, with Graphviz (`dot`, Debian's
`graphviz` package): the node agent on every node, the controller, and what each reads and writes.

    python -m tools.diagram            # writes docs/architecture.png (and docs/architecture.dot beside it)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOT = ROOT / "docs" / "architecture.dot"
PNG = ROOT / "docs" / "architecture.png"

GRAPH = r"""
digraph colo {
  graph [rankdir=LR, fontname="Helvetica", fontsize=11, nodesep=0.35, ranksep=0.6, pad=0.2, bgcolor="white"];
  node  [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10, fillcolor="#f5f5f5", color="#888888"];
  edge  [fontname="Helvetica", fontsize=9, color="#555555"];

  subgraph cluster_node {
    label="every node (DaemonSet)";
    style="rounded,dashed"; color="#999999"; fontcolor="#444444";
    online  [label="online pods\n(latency-sensitive)", fillcolor="#dbeafe"];
    offline [label="offline pods\n(batch: Spark, Flink, CI)", fillcolor="#fef3c7"];
    cgroups [label="cgroups v1/v2, /proc", shape=cylinder, fillcolor="#ffffff"];
    agent   [label="colo-agent\nmeasures every pod each second\n"
             + "rolling windows, batch capacity\nsuppresses / evicts offline pods",
             fillcolor="#dcfce7"];
    online -> cgroups [style=dotted, arrowhead=none];
    offline -> cgroups [style=dotted, arrowhead=none];
    cgroups -> agent [label="usage"];
    agent -> cgroups [label="quotas, weights,\nmemory.high, burst", style=dashed];
  }

  api [label="Kubernetes API server\nNode annotations and status,\npods, Events, Leases",
       shape=component, fillcolor="#ede9fe"];

  subgraph cluster_ctl {
    label="colo-system (Deployment, 2 replicas)"; labelloc="b";
    style="rounded,dashed"; color="#999999"; fontcolor="#444444";
    controller [label="colo-controller\npolls every agent, scores nodes\n"
                + "scheduler extender, rebalancing\nadmission webhook (profiles)",
                fillcolor="#dcfce7"];
  }

  sched   [label="kube-scheduler\n(+ Colo's extender)", fillcolor="#ffffff"];
  volcano [label="Volcano\nreads volcano.sh/* capacity", fillcolor="#ffffff"];
  crane   [label="crane-scheduler\nreads load annotations", fillcolor="#ffffff"];
  prom    [label="Prometheus / Grafana", fillcolor="#ffffff"];

  agent -> api [label="volcano.sh/oversubscription-*\nkubernetes.io/batch-* allocatable\nevictions, Events"];
  controller -> agent [label="GET /api/v1/node\n(every cycle)"];
  controller -> api [label="crane load annotations\ncolo.io/load-score"];
  sched -> controller [label="/filter, /prioritize"];
  api -> sched [style=dotted, arrowhead=none];
  api -> volcano [style=dotted];
  api -> crane [style=dotted];
  prom -> agent [label="/metrics", style=dashed];
  prom -> controller [label="/metrics", style=dashed];
}
"""


def main() -> int:
    dot = shutil.which("dot")
    if dot is None:
        print("tools.diagram: Graphviz's `dot` is missing (Debian: apt-get install graphviz)", file=sys.stderr)
        return 2
    DOT.write_text(GRAPH.lstrip(), encoding="utf-8")
    subprocess.run([dot, "-Tpng", "-Gdpi=110", str(DOT), "-o", str(PNG)], check=True)
    print(f"wrote {PNG.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
