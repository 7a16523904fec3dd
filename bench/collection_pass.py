"""Benchmark: the collection pass's cost by node size — 50, 100, 250 and 500 pods x 3 containers on the real v1
hierarchy, every third pod offline (as `bench.agent_cluster` registers them), the sampler built with the
agent's defaults (online pods on their turn every `agent.sense.collectors.pods.ONLINE_POD_EVERY` passes, offline
pods and the kubepods root every pass, containers on their turn every `CONTAINER_EVERY` passes, memory.stat
every `container_memory_detail_every`); `--online-every 1` reads every pod every pass, as with quota burst.

For each size: the CPU time of a pass (thread time; passes 20 ms apart so caches are as cold as in the running
agent), median and spread (p10-p90, p99), that median as a share of one core at a 1 s interval, and a
least-squares line over the sizes: the fixed cost and the cost per pod (with its 3 containers).

Run as root: `.venv/bin/python -m bench.collection_pass [--sizes 50,100,250,500] [--passes 150] [--online-every N]`.
"""

from __future__ import annotations

import argparse
import statistics
import time

from agent.config import AgentConfig
from agent.sense.collectors.containers import CONTAINER_EVERY
from agent.sense.collectors.pods import ONLINE_POD_EVERY
from agent.sense.sampler import Sampler
from agent.windows.store import WindowStore
from bench.agent_overhead import build, percentile
from testsupport.classed_pods import ClassedPodSource


def pass_cpu_ms(pods: int, passes: int, burners: int, online_every: int = ONLINE_POD_EVERY) -> list[float]:
    tree = build(pods, burners)
    try:
        source = ClassedPodSource(tree.layout, tree.model, lambda i, _: "offline" if i % 3 == 2 else "online")
        detail = AgentConfig().container_memory_detail_every
        sampler = Sampler(tree.layout, tree.model, source, WindowStore(), container_every=CONTAINER_EVERY,
                          container_stat_every=detail, pod_memory_limits=False,
                          online_every=online_every)  # fmt: skip
        try:
            for _ in range(2 * CONTAINER_EVERY):
                sampler.sample()  # descriptors opened, every container seen
            timings: list[float] = []
            for _ in range(passes):
                time.sleep(0.02)
                start = time.thread_time()
                sampler.sample()
                timings.append((time.thread_time() - start) * 1e3)
            return timings
        finally:
            sampler.close()
    finally:
        tree.cleanup()


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares y = a + b x: (a, b)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="50,100,250,500")
    ap.add_argument("--passes", type=int, default=150)
    ap.add_argument("--burners", type=int, default=0, help="pods with a container burning 5%% of a core")
    ap.add_argument("--online-every", type=int, default=ONLINE_POD_EVERY, help="passes between online pods' readings")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    medians: list[float] = []
    print(f"collection pass, pods x 3 containers, a third offline, online pods every {args.online_every} passes,"
          f" CPU time per pass ({args.passes} passes 20 ms apart):")  # fmt: skip
    for n in sizes:
        t = pass_cpu_ms(n, args.passes, min(args.burners, n), args.online_every)
        med = statistics.median(t)
        medians.append(med)
        print(f"  {n:4d} pods: median {med:6.2f} ms (p10 {percentile(t, 0.1):.2f}, p90 {percentile(t, 0.9):.2f},"
              f" p99 {percentile(t, 0.99):.2f}) = {med / 10:.2f}% of a core at 1 s")  # fmt: skip
    if len(sizes) >= 2:
        fixed, per_pod = fit([float(n) for n in sizes], medians)
        print(f"  linear fit of the medians: {fixed:.2f} ms + {per_pod * 1e3:.1f} µs per pod (with its containers)")


if __name__ == "__main__":
    main()
