"""Benchmark `colo-agent` in cluster mode: 250 pods x 3 containers on the real v1 hierarchy, each pod also an
API object on the tests' fake API server (a third of them offline, so enforcement works too), the agent
started with a kubeconfig like on a node.

Reports the agent's CPU (utime+stime as a share of one core) over `--seconds` at a 1 s interval with one
/metrics scrape per 15 s (asked for as Prometheus asks: OpenMetrics, gzip), after `--warmup` seconds whose CPU
is reported on its own (start-up records and writes every original, renders the first bodies and computes the
first minute's long windows: a one-off, not what the agent costs on a node from then on), and its resident
memory at the end. The 5-minute raw windows fill during the first 5 minutes, so RSS is the steady state's only
from `--warmup` + `--seconds` >= 360 (about 4 MiB more than at one minute). The figure to compare with the
standalone one of `bench.agent_overhead` (the official client and its pod informer are what cluster mode
adds). Like it, the agent runs with the DaemonSet's `MALLOC_*` settings (`--no-malloc-env` leaves them out).

`--realistic-pods` registers whole Pods as a real API server lists them (testsupport/realistic_pod.py, about
18 KB of JSON each) instead of the small test objects (under 1 KB): what the pod informer holds then.

Run as root: `.venv/bin/python -m bench.agent_cluster [--pods 250] [--warmup 60] [--seconds 60] [--realistic-pods]`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

from bench.agent_overhead import build, cpu_seconds, deployed_malloc_env, free_port, rss_mib, wait_ready
from bench.bench_exporter import PROMETHEUS_ACCEPT
from testsupport.cgtree import V1Tree
from testsupport.k8sobjects import NODE, container_id_of, node, pod
from testsupport.kubeapi.server import FakeKubeAPI
from testsupport.realistic_pod import realistic_pod


def _realistic(name: str, uid: str, qos: str, ids: list[str], offline: bool) -> dict[str, Any]:
    """A Pod as an API server lists it (about 18 KB of JSON: testsupport/realistic_pod.py) whose app
    containers run under the tree's container IDs."""
    obj = realistic_pod(name, uid, namespace="default", qos=qos, priority=-10 if offline else 0)
    statuses = obj["status"]["containerStatuses"]
    for status, cid in zip(statuses, ids, strict=False):
        status["containerID"] = f"containerd://{cid}"
    obj["status"]["containerStatuses"] = statuses[: len(ids)]
    return obj


def register_pods(api: FakeKubeAPI, tree: V1Tree, realistic: bool = False) -> int:
    """One API object per pod cgroup of the tree, matched through the containers' IDs; every third offline.
    `realistic`: each a whole Pod as a real API server lists it instead of the small test object."""
    from cgroup import discover_pods

    qos_names = {"guaranteed": "Guaranteed", "burstable": "Burstable", "besteffort": "BestEffort"}
    found = discover_pods(tree.layout, tree.model)
    for i, p in enumerate(found):
        ids = [container_id_of(c.path) for c in p.containers]
        offline = i % 3 == 2
        if realistic:
            api.put("pods", _realistic(f"bench-{i}", p.uid, qos_names[p.qos], ids, offline))
            continue
        api.put(
            "pods",
            pod(f"bench-{i}", p.uid, qos=qos_names[p.qos], container_ids=ids,
                cpu_request=None if p.qos == "besteffort" else "100m",
                memory_request=None if p.qos == "besteffort" else "64Mi",
                priority=-10 if offline else 0),
        )  # fmt: skip
    return len(found)


@contextlib.contextmanager
def started_agent(tree: V1Tree, api: FakeKubeAPI, malloc_env: dict[str, str]) -> Iterator[tuple[int, str]]:
    """`colo-agent` as on a node (a kubeconfig, the node's name, 1 s), ready: (its pid, its base URL)."""
    port = free_port()
    exe = os.path.join(os.path.dirname(sys.executable), "colo-agent")
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = api.kubeconfig(os.path.join(tmp, "kubeconfig"))
        cmd = [exe, "--kubeconfig", kubeconfig, "--node-name", NODE, "--listen", f"127.0.0.1:{port}",
               "--interval", "1", "--cgroup-root", tree.cgroup_root, "--cgroup-driver", "cgroupfs",
               "--state-file", "", "--log-level", "warning"]  # fmt: skip
        env = {**os.environ, **malloc_env, "COLO_ENFORCEMENT__LEDGER_FILE": os.path.join(tmp, "ledger.json")}
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_ready(base, 60)
            yield proc.pid, base
        finally:
            proc.terminate()
            proc.wait(30)


def scrape_for(base: str, seconds: float, scrape_every: float, each: Callable[[], None] = lambda: None) -> None:
    """One /metrics scrape per `scrape_every` seconds for `seconds`, calling `each` after every scrape. Each
    asks as Prometheus does (its Accept header, gzip): the agent keeps the body of the variant asked for."""
    t0 = time.monotonic()
    headers = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}
    request = urllib.request.Request(base + "/metrics", headers=headers)
    while time.monotonic() - t0 < seconds:
        s0 = time.monotonic()
        with urllib.request.urlopen(request, timeout=10) as r:
            r.read()
        each()
        time.sleep(max(0.0, scrape_every - (time.monotonic() - s0)))


def cluster_agent(
    tree: V1Tree, api: FakeKubeAPI, seconds: float, scrape_every: float, malloc_env: dict[str, str],
    warmup: float = 0.0,
) -> dict[str, float]:  # fmt: skip
    """CPU share over the first `warmup` seconds after ready and over the `seconds` after them; RSS at the end
    and the largest seen at a scrape."""
    with started_agent(tree, api, malloc_env) as (pid, base):
        peak = [0.0]

        def seen() -> None:
            peak[0] = max(peak[0], rss_mib(pid))

        c0, t0 = cpu_seconds(pid), time.monotonic()
        if warmup > 0:
            scrape_for(base, warmup, scrape_every, seen)
        c1, t1 = cpu_seconds(pid), time.monotonic()
        scrape_for(base, seconds, scrape_every, seen)
        c2, t2 = cpu_seconds(pid), time.monotonic()
        return {
            "warmup_cpu_share": (c1 - c0) / (t1 - t0) if warmup > 0 else float("nan"),
            "cpu_share_of_one_core": (c2 - c1) / (t2 - t1),
            "rss_mib": rss_mib(pid),
            "rss_peak": peak[0],
        }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=250)
    ap.add_argument("--burners", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=60.0, help="the measured span, after the warm-up")
    ap.add_argument("--warmup", type=float, default=60.0,
                    help="seconds after ready left out of the CPU figure (start-up: every original recorded "
                         "and written, the first renders, the first minute's long windows); shown apart")  # fmt: skip
    ap.add_argument("--scrape-every", type=float, default=15.0)
    ap.add_argument(
        "--realistic-pods",
        action="store_true",
        help="whole Pods as an API server lists them (about 18 KB of JSON each), not small test objects",
    )
    ap.add_argument("--no-malloc-env", action="store_true", help="run the agent without the DaemonSet's MALLOC_*")
    args = ap.parse_args()
    malloc_env = {} if args.no_malloc_env else deployed_malloc_env()
    tree = build(args.pods, args.burners)
    api = FakeKubeAPI().start()
    try:
        api.put("nodes", node())
        n = register_pods(api, tree, args.realistic_pods)
        r = cluster_agent(tree, api, args.seconds, args.scrape_every, malloc_env, args.warmup)
        settings = " ".join(f"{k}={v}" for k, v in malloc_env.items()) or "no MALLOC_* settings"
        print(
            f"colo-agent in a cluster ({n} {'realistic ' if args.realistic_pods else ''}pods x 3 containers on the"
            f" API server), {args.seconds:.0f} s at 1 s after {args.warmup:.0f} s of warm-up ({settings}):"
        )
        if args.warmup > 0:
            print(f"  warm-up: CPU {100 * r['warmup_cpu_share']:.2f}% of one core")
        print(f"  CPU {100 * r['cpu_share_of_one_core']:.2f}% of one core, RSS {r['rss_mib']:.1f} MiB "
              f"(peak seen {r['rss_peak']:.1f} MiB)")  # fmt: skip
    finally:
        api.stop()
        tree.cleanup()


if __name__ == "__main__":
    main()
