"""Benchmark: suppression flaps per hour on a seeded noisy trace, one-pass decision (before issue 22) against
two passes in a row (`cpu_release_confirm_passes`, the default now), and the reaction to real rises.

Run: `.venv/bin/python -m bench.bench_release_flaps [--seeds 5] [--hours 1]`. The trace is
testsupport/noisy_load.py's (a quiet 22% baseline with AR(1) noise, 33 one-second and 6 two-second spikes to
41–49% per hour, 4 real rises to 60% for 60 s per hour); the decisions are cpu_quota.budget_and_release's,
one per simulated second. A flap is a cut of released offline pods to quota lasting at most 5 s. Prints
flaps per hour (median, range over the seeds), the worst reaction to a rise, and the decision's cost per pass.
"""

from __future__ import annotations

import argparse
import statistics
import time

from agent.config_sections.enforcement import EnforcementConfig
from testsupport.noisy_load import decisions, flaps, noisy_trace, reactions


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--hours", type=float, default=1.0)
    args = parser.parse_args()
    seconds = int(args.hours * 3600)
    for label, confirm in (("one pass (before)", 1), ("two passes in a row (after)", 2)):
        config = EnforcementConfig(cpu_release_confirm_passes=confirm)
        per_hour, worst, cost = [], 0, []
        for seed in range(args.seeds):
            trace = noisy_trace(seed + 22, seconds)
            t0 = time.perf_counter()
            released = decisions(trace.loads, config)
            cost.append((time.perf_counter() - t0) / seconds)
            per_hour.append(flaps(released) / args.hours)
            answered = reactions(trace, released)
            worst = max(worst, *(60 if r is None else r for r in answered))
        print(f"{label}: flaps per hour median {statistics.median(per_hour):.0f} (min {min(per_hour):.0f}, "
              f"max {max(per_hour):.0f}, {args.seeds} seeds); rises answered by pass {worst} of the rise at the "
              f"latest (0: its first); decision {statistics.median(cost) * 1e6:.1f} µs per pass")  # fmt: skip


if __name__ == "__main__":
    main()
