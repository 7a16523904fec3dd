"""Benchmark: colo-sim at fleet scale (issue 31). Timings live here, never in tests.

Run: `.venv/bin/python -m bench.bench_sim_fleet [--nodes 1000] [--pods 40] [--days 14] [--repeat 3]
[--shared-only | --fleet-only] [--dir /tmp/colo-fleet] [--policies colo,oracle,koordinator,volcano]`.

1. The shared Bitbrains trace (/work/shared/traces/bitbrains_rnd_dev.csv.gz; GWA-T-12, Shen et al., CCGrid
   2015; 1.8 M samples) replayed by `colo-sim --jobs 1`, `--repeat` times: CPU µs per sample (user + system
   of every process of the run), peak RSS (the largest sum over the run's processes, sampled every 0.1 s),
   wall time; with it, in each repetition, `--jobs 2` and a Dask `LocalCluster` of 2 worker processes on
   loopback (`--cluster`): the wall-time speed-up over that repetition's `--jobs 1`, and whether the JSON is the
   same byte for byte. Then the floor under the per-sample cost: the agent's per-pass code as the replay calls
   it at each node-step, with empty windows and every prediction made (`pass_floor`).
2. A synthetic fleet, generated under `--dir` (never in the repository), as a Parquet dataset partitioned by
   node: `--nodes` nodes × `--pods` pods × `--days` days at 5 minutes (1,000 × 40 × 14 ≈ 161 M samples). Each
   pod is a Bitbrains VM drawn at random (with replacement, `random.Random(31)`) and a window of `--days`
   consecutive days of its month, also drawn at random; its samples keep their gaps and values and are shifted
   to the fleet's start. Then the fleet is replayed with `--jobs 2`: the same figures.

The machine is shared (2 cores, other engineers' work): CPU figures are noisy, and the load average is printed
with each figure.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

import numpy as np
import psutil

TRACE = "/work/shared/traces/bitbrains_rnd_dev.csv.gz"
STEP = 300
FLEET_T0 = 1_700_000_000.0
SEED = 31
GI = 1 << 30


@dataclass(frozen=True, slots=True)
class Run:
    wall_s: float
    cpu_s: float
    peak_rss: int
    out: bytes
    critical_s: float  # the parent's CPU plus the busiest other process's: the wall time on idle cores


def measured(argv: list[str], env: dict[str, str] | None = None) -> Run:
    """Run colo-sim with `argv`; CPU and RSS summed over its process tree (sampled every 0.1 s)."""
    cmd = [sys.executable, "-m", "colo_sim.main", *argv]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    root = psutil.Process(proc.pid)
    cpu: dict[int, float] = {}
    peak = 0
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.append(proc.stdout.read() if proc.stdout else b""))
    reader.start()
    while proc.poll() is None:
        rss = 0
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        for p in tree:
            try:
                t = p.cpu_times()
                cpu[p.pid] = t.user + t.system
                rss += p.memory_info().rss
            except psutil.NoSuchProcess:
                continue
        peak = max(peak, rss)
        time.sleep(0.1)
    wall = time.perf_counter() - t0
    reader.join()
    err = proc.stderr.read() if proc.stderr else b""
    if proc.returncode != 0:
        raise SystemExit(f"colo-sim {' '.join(argv)} failed: {err.decode()[-500:]}")
    others = [v for pid, v in cpu.items() if pid != proc.pid]
    return Run(wall, sum(cpu.values()), peak, b"".join(chunks), cpu.get(proc.pid, 0.0) + max(others, default=0.0))


def spread(values: list[float], unit: str, fmt: str = ".2f") -> str:
    return (f"median {statistics.median(values):{fmt}} {unit} (min {min(values):{fmt}}, max {max(values):{fmt}}, "
            f"n={len(values)})")  # fmt: skip


def load() -> str:
    return "load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def report(name: str, runs: list[Run], samples: int) -> None:
    print(f"{name}: {samples:,} samples; {load()}")
    print(f"  CPU per sample  {spread([r.cpu_s / samples * 1e6 for r in runs], 'µs')}")
    print(f"  peak RSS        {spread([r.peak_rss / 2**20 for r in runs], 'MiB', '.0f')}")
    print(f"  wall            {spread([r.wall_s for r in runs], 's')}")


def shared_trace(repeat: int, policies: list[str]) -> None:
    """`--jobs 1`, `--jobs 2` and Dask's 2 workers, interleaved in each repetition (the machine's load then
    weighs on all three alike), each speed-up against `--jobs 1` of its own repetition."""
    if not os.path.exists(TRACE):
        print(f"shared trace: skipped, {TRACE} is absent")
        return
    common = ["--trace", TRACE, "--output", "json", *policies]
    try:
        from distributed import LocalCluster
    except ImportError:
        cluster = None
        print("  Dask: skipped (.venv/bin/pip install -e '.[fleet]')")
    else:
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",  # type: ignore[no-untyped-call]
                               dashboard_address=None)  # fmt: skip
    one: list[Run] = []
    two: list[Run] = []
    dask: list[Run] = []
    try:
        for _ in range(repeat):
            one.append(measured([*common, "--jobs", "1"]))
            two.append(measured([*common, "--jobs", "2"]))
            if cluster is not None:
                dask.append(measured([*common, "--cluster", cluster.scheduler_address]))
    finally:
        if cluster is not None:
            cluster.close()
    samples = samples_of(TRACE)
    report("shared trace, --jobs 1", one, samples)
    report("shared trace, --jobs 2", two, samples)
    print(f"  --jobs 2 speed-up {spread([a.wall_s / b.wall_s for a, b in zip(one, two, strict=True)], '×')}; "
          f"same JSON: {all(r.out == one[0].out for r in one + two)}")  # fmt: skip
    # on a busy machine the wall time measures the other jobs; the CPU of the critical path does not
    serial = statistics.median(r.cpu_s for r in one)
    print(f"  --jobs 2 speed-up on idle cores (CPU of --jobs 1 / the parent's + the busiest worker's CPU) "
          f"{spread([serial / r.critical_s for r in two], '×')}")  # fmt: skip
    if dask:
        print(f"  Dask LocalCluster (2 workers) speed-up "
              f"{spread([a.wall_s / b.wall_s for a, b in zip(one, dask, strict=True)], '×')}, "
              f"of --jobs 2's {spread([b.wall_s / d.wall_s for b, d in zip(two, dask, strict=True)], '')}; "
              f"same JSON: {all(r.out == one[0].out for r in dask)}; {load()}")  # fmt: skip
    pass_floor(samples)


def pass_floor(samples: int) -> None:
    """What the agent's per-pass code costs a replayed sample before any window is fed or read and with every
    prediction already made: at each node-step colo-sim hands the pass its online pods (two `OnlinePod` lists),
    observes their ages and calls `resource_capacity` once per policy replayed through it (Colo's and the
    paper's three) and resource. Timed here with an empty window store, each policy's prediction handed in
    (`Reading.shared`) and the trace's mean pods per node-step: a lower bound on the per-sample cost of a replay
    that calls the agent's pass at each step (the minimum of 7 runs, and their median)."""
    import timeit

    from agent.capacity.lendable import RESOURCES, CapacityParams, OnlinePod, PodAges, margins, resource_capacity
    from agent.capacity.predictors.registry import Prediction
    from agent.windows.store import WindowStore
    from colo_sim.policies.colo import paper

    node_steps = 22 * 8_640  # the shared trace's 22 packed nodes × 30 days of 5-minute steps
    per_step = max(1, round(samples / node_steps))
    store = WindowStore(max_gap=STEP)
    uids = [f"pod-{i}" for i in range(per_step)]
    rows = [(i, 1.0, 0.25, float(GI), GI / 4.0) for i in range(per_step)]  # a step's (pod, requests, usages)
    ages = PodAges()
    runs = [(CapacityParams(), "colo"), *((paper(p), p) for p in ("nsigma", "rc_like", "max"))]
    calls = []
    for params, _ in runs:
        learned = margins(params, store)
        for resource in RESOURCES:
            shared = {params.predictor_for(resource): Prediction(8.0, 86_400.0)}
            calls.append((resource, params, None if learned is None else learned[resource], shared))

    def step(policies: int) -> None:
        ages.observe(7200.0, (uids[p[0]] for p in rows))
        pods = {
            "cpu": [OnlinePod(uids[p[0]], p[1], p[2]) for p in rows],
            "memory": [OnlinePod(uids[p[0]], p[3], p[4]) for p in rows],
        }
        for resource, params, margin, shared in calls[: 2 * policies]:
            alloc = 32.0 if resource == "cpu" else 256.0 * GI
            resource_capacity(store, 7200.0, resource, alloc, 0.0, pods[resource], ages, params, margin, dict(shared))

    for policies, name in ((len(runs), "every policy"), (1, "Colo's alone")):
        run = functools.partial(step, policies)
        times = [timeit.timeit(run, number=5_000) / 5_000 / per_step * 1e6 for _ in range(7)]
        print(f"  the agent's pass per replayed sample, windows empty and predictions made ({per_step} pods a "
              f"node-step), {name}: min {min(times):.2f} µs, median {statistics.median(times):.2f}; "
              f"{load()}")  # fmt: skip


def samples_of(trace: str) -> int:
    import gzip

    with gzip.open(trace, "rt") as f:
        return sum(1 for _ in f) - 1


def vm_series() -> list[np.ndarray]:
    """Each Bitbrains VM's usable rows as an array of (unix_s, creq, cuse, mreq, muse), in time order."""
    from colo_sim.csv_arrow import read_csv

    _, intake = read_csv(TRACE, "bitbrains", fast=True)
    rows = intake.rows()
    order = np.argsort(rows.code, kind="stable")
    table = np.stack([rows.t, rows.cpu_request, rows.cpu_usage, rows.memory_request, rows.memory_usage], 1)[order]
    bounds = np.cumsum(np.bincount(rows.code[order]))[:-1]
    return [s for s in np.split(table, bounds) if len(s)]


def make_fleet(target: str, nodes: int, pods: int, days: float) -> int:
    """The synthetic fleet (module docstring) as `target/node=node-NNNN/part-00000.parquet`; rows written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(SEED)
    series = vm_series()
    span = days * 86400.0
    written = 0
    for n in range(nodes):
        parts, names = [], []
        for i in range(pods):
            vm = series[rng.randrange(len(series))]
            first, last = float(vm[0, 0]), float(vm[-1, 0])
            start = first + rng.random() * max(0.0, last - first - span)
            window = vm[(vm[:, 0] >= start) & (vm[:, 0] < start + span)].copy()
            window[:, 0] += FLEET_T0 - start
            parts.append(window)
            names += [f"fleet/pod-{n:04d}-{i:02d}"] * len(window)
        table = np.concatenate(parts)
        cols = ["unix_s", "cpu_request_cores", "cpu_usage_cores", "memory_request_bytes", "memory_usage_bytes"]
        arrow = pa.table([pa.array(names).dictionary_encode(), *(table[:, j] for j in range(5))], names=["pod", *cols])
        folder = os.path.join(target, f"node=node-{n:04d}")
        os.makedirs(folder, exist_ok=True)
        pq.write_table(arrow, os.path.join(folder, "part-00000.parquet"), compression="zstd")
        written += len(table)
    return written


def fleet(nodes: int, pods: int, days: float, folder: str, repeat: int, jobs: int, policies: list[str]) -> None:
    target = os.path.join(folder, f"fleet-{nodes}x{pods}x{days:g}d")
    marker = os.path.join(target, "_rows")
    if not os.path.exists(marker):
        t0 = time.perf_counter()
        rows = make_fleet(target, nodes, pods, days)
        with open(marker, "w") as f:
            f.write(str(rows))
        print(f"fleet: generated {rows:,} samples in {time.perf_counter() - t0:.0f} s under {target}")
    with open(marker) as f:
        rows = int(f.read())
    runs = [measured(["--trace", target, "--output", "json", "--jobs", str(jobs), *policies]) for _ in range(repeat)]
    report(f"fleet {nodes} nodes × {pods} pods × {days:g} days, --jobs {jobs} {' '.join(policies)}", runs, rows)
    doc = json.loads(runs[0].out)
    print(f"  {doc['nodes']} nodes, {doc['pods']} pods, {doc['steps']} steps scored per node")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=40)
    parser.add_argument("--days", type=float, default=14.0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "colo-fleet"))
    parser.add_argument("--fleet-only", action="store_true")
    parser.add_argument("--shared-only", action="store_true")
    parser.add_argument("--policies", help="colo-sim's --policies (default: every policy)")
    args = parser.parse_args()
    policies = ["--policies", args.policies] if args.policies else []
    if not args.fleet_only:
        shared_trace(args.repeat, policies)
    if not args.shared_only and os.path.exists(TRACE):
        fleet(args.nodes, args.pods, args.days, args.dir, args.repeat, args.jobs, policies)


if __name__ == "__main__":
    main()
