"""Benchmark: throttling of a spiky online container with and without CFS burst, on the real v1 kernel.

Run as root: `.venv/bin/python -m bench.bench_cpu_burst [--rounds 10] [--spikes 5] [--burst-percent 100]`.
Two identical containers limited to 0.5 CPU (50 ms per 100 ms) run 150 ms CPU spikes every 600 ms at the
same moments; one has a burst of 100% of its quota (the default `burst_percent`). Rounds alternate which
one, so CPU placement and machine noise fall on both. Reported per spike: throttled time and throttled
periods from cpu.stat, median and spread (min–max) over the rounds.
"""

from __future__ import annotations

import argparse
import statistics

from cgroup import CgroupReader, CgroupWriter
from tests.cgtree import V1Tree
from tests.spiky import QUOTA_US, Throttling, make_spiky_pair, run_spikes


def _summary(name: str, rounds: list[Throttling], spikes: int) -> str:
    ms = [t.throttled_ms / spikes for t in rounds]
    nr = [t.nr_throttled / spikes for t in rounds]
    return (
        f"{name:>13}: throttled {statistics.median(ms):6.1f} ms/spike (min {min(ms):.1f}, max {max(ms):.1f}); "
        f"{statistics.median(nr):4.2f} throttled periods/spike (min {min(nr):.2f}, max {max(nr):.2f})"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--spikes", type=int, default=5)
    ap.add_argument("--burst-percent", type=int, default=100, help="burst as a percent of the quota (1-100)")
    args = ap.parse_args()
    tree = V1Tree("cgroupfs")
    try:
        a, b = make_spiky_pair(tree)
        writer = CgroupWriter(tree.layout)
        if not CgroupReader(tree.layout).supports_cpu_burst(a):
            print("   skipped: this kernel has no CFS burst")
            return
        with_burst: list[Throttling] = []
        without: list[Throttling] = []
        for rnd in range(args.rounds):
            burst, plain = (a, b) if rnd % 2 == 0 else (b, a)
            writer.set_cpu_burst(burst, QUOTA_US * args.burst_percent // 100)
            writer.set_cpu_burst(plain, 0)
            got = run_spikes(tree, (burst, plain), count=args.spikes)
            with_burst.append(got[burst])
            without.append(got[plain])
        print(f"0.5 CPU, 150 ms spikes every 600 ms, {args.spikes} spikes x {args.rounds} rounds")
        print(_summary("without burst", without, args.spikes))
        print(_summary(f"burst {args.burst_percent}%", with_burst, args.spikes))
    finally:
        tree.cleanup()


if __name__ == "__main__":
    main()
