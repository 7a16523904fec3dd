"""Benchmark: one full cgroup read pass over 250 pods x 3 containers on the real v1 hierarchy.

Run as root: `.venv/bin/python -m bench.cgroup_read_pass [--pods 250] [--passes 300]`.
A pass reads and parses CPU usage, throttling and memory (usage, working set, anon, file) of every pod and
container cgroup through `cgroup.CgroupReader`, with descriptors kept open between passes.
"""

from __future__ import annotations

import argparse
import statistics
import time

from cgroup import CgroupReader, discover_pods
from testsupport.cgtree import V1Tree


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=250)
    ap.add_argument("--containers", type=int, default=3)
    ap.add_argument("--passes", type=int, default=300)
    args = ap.parse_args()
    tree = V1Tree("systemd")
    try:
        t0 = time.perf_counter()
        tiers = ("guaranteed", "burstable", "besteffort")
        for i in range(args.pods):
            tree.pod(tiers[i % 3], containers=args.containers)  # type: ignore[arg-type]
        print(f"created {args.pods} pods x {args.containers} containers in {time.perf_counter() - t0:.1f} s")
        pods = discover_pods(tree.layout, tree.model)
        cgroups = [p.path for p in pods] + [c.path for p in pods for c in p.containers]
        reader = CgroupReader(tree.layout)
        timings: list[float] = []
        for _ in range(args.passes + 5):
            start = time.perf_counter()
            for cg in cgroups:
                reader.cpu(cg)
                reader.memory(cg)
            timings.append(time.perf_counter() - start)
        timings = timings[5:]  # the first passes open the descriptors
        med, p99 = statistics.median(timings) * 1e3, percentile(timings, 0.99) * 1e3
        print(f"cgroups per pass: {len(cgroups)} ({len(reader.files)} open descriptors)")
        print(f"read pass: median {med:.2f} ms, p99 {p99:.2f} ms, min {min(timings) * 1e3:.2f} ms")
    finally:
        tree.cleanup()


if __name__ == "__main__":
    main()
