"""Where `colo-agent`'s resident memory goes: its imports by group, then the running agent in cluster mode.

1. Imports, each run in a fresh interpreter, cumulative in the order the agent's main loads them: the
   interpreter alone, the configuration (pydantic, prometheus-client, psutil, the collectors), the web stack
   (uvicorn, Starlette, the exporter), the Kubernetes client with its kubeconfig loader; then, on top, what
   `serving.api_docs` adds (FastAPI). RSS after each group and the modules loaded: median and spread.
2. The agent as `bench.agent_cluster` runs it (250 pods x 3 containers on the real v1 hierarchy, each pod an
   API object on the fake API server, 1 s interval, one scrape per 15 s, the DaemonSet's `MALLOC_*`): RSS
   once ready and after `--seconds`, split into anonymous memory (objects) and file-backed pages (the
   interpreter's and extensions' code), from /proc/PID/smaps_rollup.

Run as root: `.venv/bin/python -m bench.agent_rss [--runs 5] [--seconds 45]` (`--seconds 0`: imports only).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""

#: (label, code run after the previous groups'), in the order the agent's main imports them.
GROUPS = (
    ("interpreter", ""),
    ("configuration", "import agent.config, agent.main"),
    ("web stack", "from serving import uvicorn_package; uvicorn_package.install(); import colo_agent.serve"),
    ("kubernetes client", "import kube; from kube.lean import kube_config; kube_config(); kube.Kube.connect(KC)"),
    ("+ FastAPI (api_docs)", "import fastapi"),
)

_PROBE = """
import sys
def rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
KC = sys.argv[1]
{code}
print(rss(), len(sys.modules))
"""


def import_rss(upto: int, kubeconfig: str) -> tuple[float, int]:
    """RSS (MiB) and module count of a fresh interpreter that ran the first `upto` + 1 groups."""
    code = "\n".join(c for _, c in GROUPS[: upto + 1])
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.format(code=code), kubeconfig], capture_output=True, text=True, check=True
    )
    rss, modules = out.stdout.split()
    return float(rss), int(modules)


def smaps_rollup(pid: int) -> dict[str, float]:
    """Rss, Anonymous and file-backed (Rss - Anonymous) of a process, in MiB."""
    fields: dict[str, float] = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1]) / 1024
    return {"rss": fields["Rss"], "anon": fields["Anonymous"], "file": fields["Rss"] - fields["Anonymous"]}


def running_agent(pods: int, seconds: float, scrape_every: float) -> tuple[dict[str, float], dict[str, float]]:
    """The agent in cluster mode (as bench.agent_cluster starts it): its memory once ready and at the end."""
    from bench.agent_cluster import register_pods, scrape_for, started_agent
    from bench.agent_overhead import build, deployed_malloc_env
    from testsupport.k8sobjects import node
    from testsupport.kubeapi.server import FakeKubeAPI

    tree = build(pods, 20)
    api = FakeKubeAPI().start()
    try:
        api.put("nodes", node())
        register_pods(api, tree)
        with started_agent(tree, api, deployed_malloc_env()) as (pid, base):
            ready = smaps_rollup(pid)
            scrape_for(base, seconds, scrape_every)
            return ready, smaps_rollup(pid)
    finally:
        api.stop()
        tree.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--pods", type=int, default=250)
    ap.add_argument("--seconds", type=float, default=45.0)
    ap.add_argument("--scrape-every", type=float, default=15.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = os.path.join(tmp, "kubeconfig")
        with open(kubeconfig, "w", encoding="utf-8") as f:
            f.write(KUBECONFIG)
        print(f"colo-agent's imports, cumulative (RSS MiB, median [min-max] of {args.runs} fresh interpreters):")
        previous = 0.0
        for i, (label, _) in enumerate(GROUPS):
            runs = [import_rss(i, kubeconfig) for _ in range(args.runs)]
            rss = [r for r, _ in runs]
            med = statistics.median(rss)
            step = "" if i == 0 else f"  (+{med - previous:.1f})"
            print(f"  {label:22s} {med:5.1f} [{min(rss):.1f}-{max(rss):.1f}]{step}, {runs[0][1]} modules")
            if not label.startswith("+"):
                previous = med
    if args.seconds > 0:
        ready, end = running_agent(args.pods, args.seconds, args.scrape_every)
        print(f"colo-agent in a cluster ({args.pods} pods x 3 containers), RSS MiB (anonymous + file-backed):")
        for label, m in (("once ready", ready), (f"after {args.seconds:.0f} s", end)):
            print(f"  {label:14s} {m['rss']:5.1f} ({m['anon']:.1f} + {m['file']:.1f})")


if __name__ == "__main__":
    main()
