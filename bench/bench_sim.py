"""Benchmark: colo-sim on the shared Bitbrains trace, and the capacity stage of an agent pass.

Run: `.venv/bin/python -m bench.bench_sim [--repeat 3] [--trace PATH] [--pods 250]`.

1. The whole trace (/work/shared/traces/bitbrains_rnd_dev.csv.gz: 250 VMs, 30 days, 1.8 M samples; GWA-T-12
   Bitbrains, Shen et al., CCGrid 2015) read and replayed through every policy, `--repeat` times: the read,
   the replay and their sum, median and spread (min-max). Skipped when the trace is absent.
2. `agent.capacity.lendable.compute_state` on a node of `--pods` online pods whose windows hold a simulated day: one
   pass's capacity stage with the `node_peak` predictor (the default) and with `pod_peaks` (the rule before
   issue 20), median and p10-p90 per pass.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from collections.abc import Callable

from agent.capacity.lendable import PREDICTORS, CapacityParams, PodAges, compute_state
from agent.node_state import node_state
from agent.snapshot import NodeSample, PodMeta, PodSample, Snapshot
from agent.windows.store import SeriesKey, WindowStore, online_key, system_key
from colo_sim.replay import Settings, replay
from colo_sim.trace import read_trace

TRACE = "/work/shared/traces/bitbrains_rnd_dev.csv.gz"
GI = 1 << 30


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f}, n={len(values)})"


def whole_trace(path: str, repeat: int) -> None:
    if not os.path.exists(path):
        print(f"whole trace: skipped, {path} is absent")
        return
    reads, replays, totals = [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        rows = read_trace(path)
        t1 = time.perf_counter()
        result = replay(rows.samples, Settings(), rows.skipped)
        t2 = time.perf_counter()
        reads.append(t1 - t0)
        replays.append(t2 - t1)
        totals.append(t2 - t0)
        del rows
    print(f"whole trace: {result.nodes} nodes, {result.pods} pods, {len(result.policies)} policies")
    print(f"  read         {spread(reads)}")
    print(f"  replay       {spread(replays)}")
    print(f"  read+replay  {spread(totals)}")


def pass_state(pods: int) -> tuple[WindowStore, Snapshot]:
    """A node with `pods` online pods and a day of windows (one sample a minute, then 10 minutes at 1 Hz)."""
    store = WindowStore()
    samples = [PodSample(PodMeta(f"p{i}", "ns", f"p{i}", "online", cpu_request_cores=1.0, memory_request_bytes=GI),
                         "burstable", f"/kubepods/pod{i}", 0.2 + 0.001 * i, GI // 4, GI // 4, GI // 4, 0, 0.0, ())
               for i in range(pods)]  # fmt: skip
    keys: list[tuple[SeriesKey, float]] = []
    for p in samples:
        keys += [(("pod", p.uid, "cpu"), p.cpu_cores or 0.0), (("pod", p.uid, "memory"), float(GI // 4))]
    cpu = sum(p.cpu_cores or 0.0 for p in samples)
    keys += [(online_key("cpu"), cpu), (online_key("memory"), pods * GI / 4.0),
             (system_key("cpu"), 0.5), (system_key("memory"), float(GI))]  # fmt: skip
    t = 0.0
    for m in range(1430):
        t = m * 60.0 + 0.5
        store.add_many(t, keys)
    for s in range(int(t) + 1, int(t) + 600):
        t = float(s)
        store.add_many(t, keys)
    node = NodeSample(float(pods), cpu + 0.5, 4 * pods * GI, pods * GI // 4 + GI, 0)
    return store, Snapshot(1, t, t, node, {}, {p.uid: p for p in samples}, (), 0.0)


def timed(fn: Callable[[], object], repeat: int) -> str:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    q = statistics.quantiles(times, n=10)
    return f"median {statistics.median(times) * 1e3:.3f} ms (p10 {q[0] * 1e3:.3f}, p90 {q[-1] * 1e3:.3f})"


def capacity_stage(pods: int, repeat: int) -> None:
    store, snap = pass_state(pods)
    state = node_state(snap, (float(pods), float(4 * pods * GI)))
    ages = PodAges()
    for predictor in PREDICTORS:
        params = CapacityParams(predictor=predictor)
        stage = functools.partial(compute_state, state, store, params, ages)
        print(f"capacity stage, {pods} pods, {predictor:9s}: {timed(stage, repeat)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3, help="whole-trace runs")
    parser.add_argument("--trace", default=TRACE)
    parser.add_argument("--pods", type=int, default=250)
    args = parser.parse_args()
    capacity_stage(args.pods, 200)
    whole_trace(args.trace, args.repeat)


if __name__ == "__main__":
    main()
