"""Benchmark the agent as it runs on a node: 250 pods x 3 containers on the real v1 hierarchy, some burning CPU.

1. The full collection pass in-process (node, tiers, pods, containers, network, windows): median and p99 of
   the CPU time it takes (wall time on a 2-core machine with burners mostly measures waiting for a core).
2. `colo-agent` as a real process for 60 s at a 1 s interval with one /metrics scrape per 15 s: its total
   CPU (utime+stime from /proc) as a share of one core, and its resident memory. It runs with the glibc malloc
   settings the DaemonSet gives it (`MALLOC_*` of deploy/daemonset/agent-daemonset.yaml; `--no-malloc-env`
   leaves them out).

Run as root: `.venv/bin/python -m bench.agent_overhead [--pods 250] [--seconds 60]`.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

from agent.sense.collectors.containers import CONTAINER_EVERY
from agent.sense.sampler import CgroupPodSource, Sampler
from agent.windows.store import WindowStore
from cgroup import CgroupWriter
from testsupport.cgtree import V1Tree

DAEMONSET = Path(__file__).resolve().parents[1] / "deploy" / "daemonset" / "agent-daemonset.yaml"


def deployed_malloc_env() -> dict[str, str]:
    """The `MALLOC_*` variables the DaemonSet sets for the agent: the benchmark measures it as deployed."""
    ds = yaml.safe_load(DAEMONSET.read_text(encoding="utf-8"))
    (agent,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "agent"]
    return {e["name"]: e["value"] for e in agent.get("env", []) if e["name"].startswith("MALLOC_")}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def build(pods: int, burners: int) -> V1Tree:
    tree = V1Tree("cgroupfs")
    writer = CgroupWriter(tree.layout)
    tiers = ("guaranteed", "burstable", "besteffort")
    for i in range(pods):
        _, _, containers = tree.pod(tiers[i % 3], containers=3)  # type: ignore[arg-type]
        if i < burners:
            writer.set_cpu_quota(containers[0], 5_000)  # 5% of a core each: visible, not hogging
            tree.start(containers[0])
    return tree


def pass_timing(tree: V1Tree, passes: int) -> dict[str, float]:
    """Back-to-back passes (wall time, caches warm: comparable with bench.cgroup_read_pass) and passes
    20 ms apart (CPU time, caches cold as in the running agent)."""
    source = CgroupPodSource(tree.layout, tree.model, 1e9)
    # as the agent builds it on cgroup v1 (agent/main.py): containers on their turn, no pod memory limits
    sampler = Sampler(tree.layout, tree.model, source, WindowStore(), container_stat_every=5,
                      container_every=CONTAINER_EVERY, pod_memory_limits=False)  # fmt: skip
    warm: list[float] = []
    cold: list[float] = []
    for i in range(2 * passes + 6):
        start_wall, start_cpu = time.perf_counter(), time.thread_time()
        sampler.sample()
        if i >= 3 and i < passes + 3:
            warm.append(time.perf_counter() - start_wall)
        elif i >= passes + 6:
            cold.append(time.thread_time() - start_cpu)
        if i >= passes + 3:
            time.sleep(0.02)
    sampler.close()
    return {
        "warm_median": statistics.median(warm) * 1e3,
        "warm_p99": percentile(warm, 0.99) * 1e3,
        "cold_cpu_median": statistics.median(cold) * 1e3,
        "cold_cpu_p99": percentile(cold, 0.99) * 1e3,
    }


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(base: str, timeout: float) -> None:
    """Until the agent at `base` answers /readyz with 200 (or `timeout` seconds passed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(base + "/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)


def agent_process(tree: V1Tree, seconds: float, scrape_every: float, env: dict[str, str]) -> dict[str, float]:
    port = free_port()
    exe = os.path.join(os.path.dirname(sys.executable), "colo-agent")
    cmd = [exe, "--standalone", "--listen", f"127.0.0.1:{port}", "--interval", "1", "--cgroup-root",
           tree.cgroup_root, "--cgroup-driver", "cgroupfs", "--state-file", "", "--log-level", "warning"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env={**os.environ, **env})
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, 30)
        time.sleep(3)  # windows warm, first renders done
        c0, t0 = cpu_seconds(proc.pid), time.monotonic()
        scrapes: list[float] = []
        series = 0
        while time.monotonic() - t0 < seconds:
            s0 = time.perf_counter()
            with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
                body = r.read()
            scrapes.append(time.perf_counter() - s0)
            series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
            time.sleep(max(0.0, scrape_every - (time.perf_counter() - s0)))
        c1, t1 = cpu_seconds(proc.pid), time.monotonic()
        return {
            "cpu_share_of_one_core": (c1 - c0) / (t1 - t0),
            "rss_mib": rss_mib(proc.pid),
            "scrapes": float(len(scrapes)),
            "scrape_median_ms": statistics.median(scrapes) * 1e3,
            "scrape_max_ms": max(scrapes) * 1e3,
            "series": float(series),
        }
    finally:
        proc.terminate()
        proc.wait(15)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=250)
    ap.add_argument("--burners", type=int, default=20)
    ap.add_argument("--passes", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--scrape-every", type=float, default=15.0)
    ap.add_argument("--no-malloc-env", action="store_true", help="run the agent without the DaemonSet's MALLOC_*")
    args = ap.parse_args()
    env = {} if args.no_malloc_env else deployed_malloc_env()
    tree = build(args.pods, args.burners)
    try:
        t = pass_timing(tree, args.passes)
        where = f"{args.pods} pods x 3 containers, {args.burners} burning"
        print(f"collection pass ({where}):")
        print(f"  back to back (wall): median {t['warm_median']:.2f} ms, p99 {t['warm_p99']:.2f} ms")
        print(f"  20 ms apart (CPU time): median {t['cold_cpu_median']:.2f} ms, p99 {t['cold_cpu_p99']:.2f} ms")
        r = agent_process(tree, args.seconds, args.scrape_every, env)
        print(
            f"colo-agent over {args.seconds:.0f} s at 1 s, one scrape per {args.scrape_every:.0f} s"
            f" ({' '.join(f'{k}={v}' for k, v in env.items()) or 'no MALLOC_* settings'}):"
        )
        print(f"  CPU {100 * r['cpu_share_of_one_core']:.2f}% of one core, RSS {r['rss_mib']:.1f} MiB")
        print(
            f"  {r['series']:.0f} series, scrape median {r['scrape_median_ms']:.2f} ms, max {r['scrape_max_ms']:.2f} ms"
        )
    finally:
        tree.cleanup()


if __name__ == "__main__":
    main()
