"""Benchmark: the rolling windows at 250 pods x 2 resources + node series.

Run: `.venv/bin/python -m bench.bench_windows [--pods 250]`. Prints the cost of `add` (the 1 Hz hot path,
per call, through `WindowStore.add` and per tick through `add_many`), of `stats` per series and of the
`max_avg_1h` fast path on a store holding a full simulated day, the traced memory of that store, and the
time and size of saving and loading it.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable

from agent.windows.persist import load_windows, save_windows
from agent.windows.store import SeriesKey, WindowStore


def series_keys(pods: int) -> list[SeriesKey]:
    keys: list[SeriesKey] = [("node", "", "cpu"), ("node", "", "memory")]
    keys += [(scope, "", res) for scope in ("online", "system") for res in ("cpu", "memory")]  # capacity's (issue 20)
    for _ in range(pods):
        uid = str(uuid.uuid4())
        keys += [("pod", uid, "cpu"), ("pod", uid, "memory")]
    return keys


def simulated_day(store: WindowStore, keys: list[SeriesKey], values: list[float]) -> float:
    """One sample a minute for 23 h 50 min (every minute bucket and day slot filled), then 1 Hz."""
    t = 0.0
    for m in range(1430):
        t = m * 60.0 + 0.5
        store.add_many(t, zip(keys, values, strict=True))
    for s in range(int(t) + 1, 86401):
        t = float(s)
        store.add_many(t, zip(keys, values, strict=True))
    return t


def sparse_day(store: WindowStore, keys: list[SeriesKey], values: list[float]) -> float:
    """Cheaper under tracemalloc, same memory: a sample every 15 min for 23 h, every minute to 86400 - 480,
    then 1 Hz (the rings are allocated whole; the 1 Hz tail sizes the raw arrays)."""
    times = [m * 900.0 + 0.5 for m in range(23 * 4)]
    times += [82800.5 + 60.0 * m for m in range(52)]
    times += [float(s) for s in range(86400 - 480, 86401)]
    for t in times:
        store.add_many(t, zip(keys, values, strict=True))
    return times[-1]


def best_of(runs: int, fn: Callable[[], object]) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=250)
    args = ap.parse_args()
    rng = random.Random(0)
    keys = series_keys(args.pods)
    values = [rng.random() * 4 for _ in keys]
    n = len(keys)
    print(f"series: {n} ({args.pods} pods x 2 resources + node, online and system cpu and memory)")

    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    traced = WindowStore()
    t0 = time.perf_counter()
    sparse_day(traced, keys, values)
    fill = time.perf_counter() - t0
    mem = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del traced
    print(f"memory after a simulated day: {mem / 2**20:.2f} MiB ({mem / n:.0f} B per series, tracemalloc)")
    print(f"  (sparse day as in tests/test_windows.py, filled in {fill:.1f} s under tracemalloc)")
    store = WindowStore()
    now = simulated_day(store, keys, values)

    # add: one more hour of 1 Hz ticks on the warm store, minute boundaries included
    ticks = 600
    t0 = time.perf_counter()
    for s in range(1, ticks + 1):
        t = now + s
        for key, v in zip(keys, values, strict=True):
            store.add(key, t, v)
    per_add = (time.perf_counter() - t0) / (ticks * n)
    now += ticks
    t0 = time.perf_counter()
    for s in range(1, ticks + 1):
        store.add_many(now + s, zip(keys, values, strict=True))
    per_add_many = (time.perf_counter() - t0) / (ticks * n)
    now += ticks
    print(f"add: {per_add * 1e6:.2f} us per call via add(), {per_add_many * 1e6:.2f} us via add_many()")
    print(f"  a 1 Hz tick of {n} series: {per_add * n * 1e3:.2f} ms ({per_add * n * 100:.2f} % of one core)")

    def all_stats() -> None:
        for key in keys:
            store.stats(key, now)

    def all_fast() -> None:
        for key in keys:
            store.value(key, "max_avg_1h", now)

    st = best_of(7, all_stats)
    fast = best_of(7, all_fast)
    scrape = statistics.median(st)
    print(f"stats: {scrape / n * 1e6:.1f} us per series, {scrape * 1e3:.1f} ms for all series (one scrape)")
    print(f"value(max_avg_1h): {statistics.median(fast) / n * 1e6:.2f} us per series")

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "windows.state")
        saves = best_of(5, lambda: save_windows(store, path, node="bench", mono_now=now, wall_now=1.7e9))
        size = os.path.getsize(path)
        loads = best_of(5, lambda: load_windows(path, node="bench", mono_now=100.0, wall_now=1.7e9 + 30))
        loaded = load_windows(path, node="bench", mono_now=100.0, wall_now=1.7e9 + 30)
        assert len(loaded) == n
    print(f"save: {statistics.median(saves) * 1e3:.1f} ms median (min {min(saves) * 1e3:.1f}), {size / 2**20:.2f} MiB")
    print(f"load: {statistics.median(loads) * 1e3:.1f} ms median (min {min(loads) * 1e3:.1f})")


if __name__ == "__main__":
    main()
