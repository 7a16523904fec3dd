"""Rolling windows against a brute-force recomputation of the documented definitions.

`Ref` keeps every sample and recomputes each window from scratch with the definitions of the
`agent.windows.store` docstring; the driver feeds the same stream to both and compares every window (value and
coverage) at many instants, including instants between samples and long after the last one.
"""

from __future__ import annotations

import math
import random
import statistics
import time
import tracemalloc
import uuid
from bisect import bisect_right
from collections.abc import Iterable, Sequence

import pytest

from agent.windows.store import (
    QUANTILES,
    WINDOW_NAMES,
    WINDOW_SPANS,
    SeriesKey,
    SeriesWindows,
    WindowStore,
    WindowValue,
    quantile,
    wall_aligned_phase,
)

Expected = tuple[float | None, float]
Stream = list[tuple[float, float]]

REL = 1e-9
ABS = 1e-12


def ref_quantile(values: Sequence[float], q: float) -> float:
    """Type-7 percentile through the standard library (an independent implementation)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


class Ref:
    """Every sample kept; every window recomputed from the definitions at each query."""

    def __init__(self, phase: float = 0.0, max_gap: float = 5.0) -> None:
        self.phase = phase % 300.0
        self.max_gap = max_gap
        self.ts: list[float] = []
        self.vs: list[float] = []
        self.ds: list[float] = []  # coverage of each sample: min(time since the previous, max_gap)

    def add(self, t: float, v: float) -> None:
        d = self.max_gap if not self.ts else min(t - self.ts[-1], self.max_gap)
        self.ts.append(t)
        self.vs.append(v)
        self.ds.append(d)

    def rebase(self, t_new: list[float], phase: float) -> None:
        """The same samples on another time base (after a restart)."""
        assert len(t_new) == len(self.ts)
        self.ts = t_new
        self.phase = phase

    def stats(self, now: float) -> dict[str, Expected]:
        hi = bisect_right(self.ts, now)
        lo = bisect_right(self.ts, now - 90000.0, 0, hi)  # nothing older matters to any window
        ts, vs, ds = self.ts[lo:hi], self.vs[lo:hi], self.ds[lo:hi]
        out: dict[str, Expected] = {}
        raw5: list[float] = []
        for name, span in (("avg_1m", 60.0), ("avg_5m", 300.0)):
            idx = [i for i, t in enumerate(ts) if now - span < t <= now]
            cov = min(1.0, math.fsum(ds[i] for i in idx) / span)
            vals = [vs[i] for i in idx]
            out[name] = (math.fsum(vals) / len(vals) if vals else None, cov)
            raw5 = vals
        for name, q in QUANTILES.items():
            if name.endswith("_5m"):
                out[name] = (ref_quantile(sorted(raw5), q) if raw5 else None, out["avg_5m"][1])
        # buckets: k = ceil((t - phase) / 60); the latest complete boundary K = floor((now - phase) / 60)
        buckets: dict[int, list[int]] = {}
        for i, t in enumerate(ts):
            buckets.setdefault(math.ceil((t - self.phase) / 60.0), []).append(i)
        big_k = math.floor((now - self.phase) / 60.0)

        def avg5(k: int) -> float | None:
            idx = [i for j in range(k - 4, k + 1) for i in buckets.get(j, [])]
            return math.fsum(vs[i] for i in idx) / len(idx) if idx else None

        def covered(klo: int, khi: int, span: float) -> float:
            return min(1.0, math.fsum(ds[i] for j in range(klo, khi + 1) for i in buckets.get(j, [])) / span)

        def max_avg(klo: int, khi: int) -> float | None:
            avgs = [a for k in range(klo, khi + 1) if (a := avg5(k)) is not None]
            return max(avgs) if avgs else None

        hour = range(big_k - 59, big_k + 1)
        cov_1h = covered(big_k - 59, big_k, 3600.0)
        out["max_avg_1h"] = (max_avg(big_k - 59, big_k), cov_1h)
        k0 = math.floor((big_k - 1439) / 5) * 5
        out["max_avg_1d"] = (max_avg(k0, big_k), covered(k0, big_k, 60.0 * (big_k - k0 + 1)))
        means = sorted(math.fsum(vs[i] for i in buckets[k]) / len(buckets[k]) for k in hour if k in buckets)
        for name, q in QUANTILES.items():
            if name.endswith("_1h"):
                out[name] = (ref_quantile(means, q) if means else None, cov_1h)
        return out


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL, abs_tol=ABS)


def assert_matches(got: dict[str, WindowValue], exp: dict[str, Expected], ctx: str) -> None:
    assert list(got) == list(WINDOW_NAMES), ctx
    for name in WINDOW_NAMES:
        g, (ev, ec) = got[name], exp[name]
        assert 0.0 <= g.coverage <= 1.0, f"{ctx} {name}: coverage {g.coverage}"
        assert close(g.coverage, ec), f"{ctx} {name}: coverage {g.coverage} != {ec}"
        if ev is None:
            assert g.value is None, f"{ctx} {name}: {g.value} != None"
        else:
            assert g.value is not None and close(g.value, ev), f"{ctx} {name}: {g.value} != {ev}"


def check(sw: SeriesWindows, ref: Ref, now: float, ctx: str = "") -> dict[str, WindowValue]:
    got = sw.stats(now)
    assert_matches(got, ref.stats(now), f"{ctx} now={now}")
    for name in WINDOW_NAMES:  # the single-window path agrees with stats
        assert sw.value(name, now) == got[name], f"{ctx} now={now} {name}"
    return got


def drive(
    stream: Iterable[tuple[float, float]],
    *,
    phase: float = 0.0,
    max_gap: float = 5.0,
    every: int = 97,
    probes: Sequence[float] = (0.0, 0.4, 59.0, 301.0),
    sw: SeriesWindows | None = None,
    ref: Ref | None = None,
) -> tuple[SeriesWindows, Ref, int]:
    """Feed both, comparing at every `every`-th sample at `probes` seconds after it; returns checks made."""
    sw = sw if sw is not None else SeriesWindows(phase=phase, max_gap=max_gap)
    ref = ref if ref is not None else Ref(phase, max_gap)
    checks = 0
    t = 0.0
    for i, (t, v) in enumerate(stream):
        sw.add(t, v)
        ref.add(t, v)
        if i % every == every - 1:
            for p in probes:
                check(sw, ref, t + p, f"sample {i}")
                checks += 1
    for p in (0.0, 60.0, 240.0, 299.5, 600.0, 3599.0, 3700.0, 86000.0, 86700.0, 90000.0):
        check(sw, ref, t + p, "after the stream")
        checks += 1
    return sw, ref, checks


# ---------------------------------------------------------------------- streams


def steady(n: int, value: float = 2.5, t0: float = 0.0, step: float = 1.0) -> Stream:
    return [(t0 + i * step, value) for i in range(n)]


def ramp(n: int, t0: float = 0.5) -> Stream:
    return [(t0 + i, i / 1000.0) for i in range(n)]


def spikes(n: int, seed: int = 7) -> Stream:
    rng = random.Random(seed)
    spike_at = set(rng.sample(range(n), n // 400))
    out: Stream = []
    for i in range(n):
        hit = any(i - j in spike_at for j in range(3))
        out.append((i + 0.25, 40.0 if hit else 1.0 + 0.01 * (i % 7)))
    return out


def noisy_with_gaps(n: int, seed: int = 42) -> Stream:
    """Lognormal values, jittery intervals (0.5..3 s) and gaps of several minutes to two hours."""
    rng = random.Random(seed)
    out: Stream = []
    t = 10.0
    for _ in range(n):
        r = rng.random()
        if r < 0.002:
            t += rng.choice((180.0, 420.0, 65 * 60.0, 7200.0)) + rng.random()
        elif r < 0.02:
            t += rng.uniform(5.0, 40.0)  # a busy agent
        else:
            t += rng.choice((1.0, 1.0, 1.0, 0.5, 2.0, 3.0))
        out.append((t, rng.lognormvariate(0.0, 1.0) * 1e9))
    return out


# ---------------------------------------------------------------------- definitions by hand


def test_empty_series_and_unknown_key() -> None:
    sw = SeriesWindows()
    assert sw.stats(100.0) == dict.fromkeys(WINDOW_NAMES, WindowValue(None, 0.0))
    assert sw.value("max_avg_1h", 100.0) == WindowValue(None, 0.0)
    store = WindowStore()
    assert store.stats(("pod", "x", "cpu"), 5.0) == dict.fromkeys(WINDOW_NAMES, WindowValue(None, 0.0))
    assert store.value(("pod", "x", "cpu"), "p99_1h", 5.0) == WindowValue(None, 0.0)
    assert store.get(("pod", "x", "cpu")) is None
    with pytest.raises(KeyError):
        sw.value("avg_7m", 1.0)
    with pytest.raises(KeyError):
        store.value(("pod", "x", "cpu"), "avg_7m", 1.0)
    assert set(WINDOW_SPANS) == set(WINDOW_NAMES)


def test_hand_computed_values() -> None:
    """Independent of Ref: a few windows worked out by hand."""
    sw = SeriesWindows()
    for i in range(1, 601):  # ten minutes, 1 Hz: 1.0 for the first five, 3.0 for the last five
        sw.add(float(i), 1.0 if i <= 300 else 3.0)
    st = sw.stats(600.0)
    assert st["avg_1m"] == WindowValue(3.0, 1.0)
    assert st["avg_5m"] == WindowValue(3.0, 1.0)
    # boundaries 60..600: the 5-minute averages rise from 1.0 to 3.0; the hour holds 10 minutes of data
    assert st["max_avg_1h"].value == 3.0
    assert st["max_avg_1h"].coverage == pytest.approx((600 - 1 + 5) / 3600)  # first sample covers max_gap
    assert st["max_avg_1h"].coverage == pytest.approx(0.167, abs=0.002)
    assert st["p50_1h"].value == 2.0  # five minutes at 1.0, five at 3.0
    assert st["p99_1h"].value == 3.0
    assert st["max_avg_1d"].value == 3.0
    assert st["p50_5m"].value == 3.0
    # a gap of 10 minutes: raw windows empty, the hour keeps its data
    st = sw.stats(1200.0)
    assert st["avg_5m"] == WindowValue(None, 0.0)
    assert st["p90_5m"] == WindowValue(None, 0.0)
    assert st["max_avg_1h"].value == 3.0
    # the 5-minute average evaluated at 660 s still sees samples 361..600
    sw2 = SeriesWindows()
    sw2.add(30.0, 4.0)
    assert sw2.value("max_avg_1h", 59.0) == WindowValue(None, 0.0)  # no complete boundary yet
    assert sw2.value("max_avg_1h", 60.0).value == 4.0
    assert sw2.value("max_avg_1h", 60.0 + 4 * 60).value == 4.0  # boundary 300 still sees t=30
    assert sw2.value("max_avg_1h", 61.0 * 60).value == 4.0
    assert sw2.value("max_avg_1h", 64.0 * 60).value == 4.0  # the hour is boundaries 300..3840
    assert sw2.value("max_avg_1h", 65.0 * 60).value is None  # boundary 300 (its 5 minutes hold t=30) left


def test_quantile_type7() -> None:
    xs = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert quantile(xs, 0.5) == 3.0
    assert quantile(xs, 0.9) == pytest.approx(4.0 + 0.6 * 6.0)
    assert quantile([7.0], 0.99) == 7.0
    rng = random.Random(1)
    for n in (2, 3, 17, 300):
        data = sorted(rng.random() for _ in range(n))
        for q in (0.5, 0.9, 0.95, 0.99):
            assert close(quantile(data, q), ref_quantile(data, q))


def test_gap_counts_as_uncovered() -> None:
    sw = SeriesWindows(max_gap=5.0)
    for t in range(0, 30):
        sw.add(float(t), 1.0)
    for t in range(50, 60):  # 20 s silence: 5 s of it counted, 15 uncovered
        sw.add(float(t), 1.0)
    assert sw.value("avg_1m", 59.0).coverage == pytest.approx((5 + 29 + 5 + 9) / 60)  # first sample: 5 s


def test_wall_aligned_phase() -> None:
    mono, wall = 12345.25, 1_700_000_017.5
    phase = wall_aligned_phase(mono, wall)
    assert 0 <= phase < 300
    # a boundary phase + 60k in monotonic time is a whole wall-clock minute
    k = 1000
    assert ((phase + 60 * k) + (wall - mono)) % 60 == pytest.approx(0.0, abs=1e-6)


def test_rejects_bad_samples() -> None:
    sw = SeriesWindows()
    sw.add(10.0, 1.0)
    before = sw.stats(10.0)
    for t, v in ((9.0, 2.0), (math.nan, 1.0), (math.inf, 1.0), (11.0, math.nan), (11.0, -math.inf)):
        sw.add(t, v)
    assert sw.rejected == 5
    assert sw.stats(10.0) == before
    store = WindowStore()
    store.add(("pod", "a", "cpu"), 1.0, math.nan)
    assert len(store) == 0 and store.rejected == 1
    with pytest.raises(ValueError):
        SeriesWindows(max_gap=0.0)
    with pytest.raises(ValueError):
        WindowStore(max_gap=301.0)


# ---------------------------------------------------------------------- against the brute force


@pytest.mark.parametrize(
    ("name", "stream", "phase"),
    [
        ("steady integer times (samples on boundaries)", steady(2 * 3600, t0=0.0), 0.0),
        ("steady, odd phase", steady(2 * 3600, t0=3.5), 17.25),
        ("ramp", ramp(3 * 3600), 0.0),
        ("spikes", spikes(2 * 3600), 120.0),
        ("random with gaps", noisy_with_gaps(3 * 3600), 0.0),
        ("random with gaps, other seed", noisy_with_gaps(3 * 3600, seed=3), 299.0),
        ("sub-second sampling", steady(3000, value=0.75, t0=0.1, step=0.25), 0.0),
    ],
)
def test_matches_brute_force(name: str, stream: Stream, phase: float) -> None:
    _, _, checks = drive(stream, phase=phase)
    assert checks > 100, name


def test_matches_brute_force_over_days() -> None:
    """27 hours at 10 s intervals (max_gap 15 s) with gaps: the day window fills up and slides."""
    rng = random.Random(99)
    stream: Stream = []
    t = 5.0
    while t < 27 * 3600:
        t += 10.0 if rng.random() > 0.003 else rng.uniform(300.0, 5400.0)
        stream.append((t, 1.0 + math.sin(t / 5000.0) + rng.random()))
    sw, ref, _ = drive(stream, max_gap=15.0, every=53, probes=(0.0, 7.0))
    got = check(sw, ref, stream[-1][0])
    assert got["max_avg_1d"].coverage > 0.5


def test_queries_ahead_then_feeding_on() -> None:
    """Queries far ahead of the data (pending averages, the hourly cache) must not disturb later feeding."""
    sw, ref = SeriesWindows(), Ref()
    t = 0.0
    rng = random.Random(5)
    for block in range(12):
        for _ in range(rng.randint(30, 900)):
            t += 1.0
            v = rng.random() * (10 if block % 3 else 1)
            sw.add(t, v)
            ref.add(t, v)
        for ahead in (0.0, 61.0, 250.0, 3590.0, 3650.0, 7000.0):
            check(sw, ref, t + ahead, f"block {block}")
        t += rng.choice((0.0, 120.0, 3000.0))


def test_monotonic_decreasing_series_rescans() -> None:
    """A falling series moves the hourly maximum out of the hour every minute."""
    stream = [(float(i), 10000.0 - i) for i in range(3 * 3600)]
    drive(stream, every=61, probes=(0.0,))


def test_cold_window_reports_low_coverage() -> None:
    sw = SeriesWindows()
    for i in range(600):
        sw.add(float(i) + 0.5, 1.0)
    st = sw.stats(600.0)
    assert st["max_avg_1h"].coverage == pytest.approx(600 / 3600 + 4 / 3600)  # first sample: 5 s
    assert st["p95_1h"].coverage == st["max_avg_1h"].coverage
    assert st["max_avg_1d"].coverage == pytest.approx(604 / (60 * 1441))  # k0 = -1430: 1441 boundaries
    assert st["avg_5m"].coverage == 1.0


# ---------------------------------------------------------------------- the store


def test_store_api() -> None:
    store = WindowStore()
    a: SeriesKey = ("pod", "a", "cpu")
    b: SeriesKey = ("pod", "b", "memory")
    n: SeriesKey = ("node", "", "cpu")
    for i in range(200):
        t = float(i)
        store.add(a, t, 1.0)
        store.add_many(t, [(b, 2.0), (n, 3.0)])
    assert len(store) == 3 and sorted(store.keys()) == sorted([a, b, n])
    assert store.stats(b, 199.0)["avg_1m"].value == 2.0
    assert store.value(n, "avg_5m", 199.0).value == 3.0
    sw = store.get(a)
    assert sw is not None and sw.last_t == 199.0
    assert store.retain(lambda k: k[0] == "node") == 2
    assert store.keys() == [n] and a not in store
    assert store.retain(lambda k: True) == 0
    assert store.expire(199.0 + 86400 + 600) == 1
    assert len(store) == 0


def _keys(pods: int) -> list[SeriesKey]:
    keys: list[SeriesKey] = [("node", "", "cpu"), ("node", "", "memory")]
    for _ in range(pods):
        uid = str(uuid.uuid4())
        keys += [("pod", uid, "cpu"), ("pod", uid, "memory")]
    return keys


def fill_day(store: WindowStore, keys: list[SeriesKey]) -> float:
    """A simulated day, fed fast: one sample every 15 minutes for the first 23 h, one a minute for the
    next 52 minutes, then 1 Hz for the last 8 minutes (a day is 86400 s).

    Memory does not depend on how the day was sampled except for the raw samples, which hold the last
    5 minutes only: the minute and day rings are allocated whole when a series starts, and the 1 Hz tail
    (longer than 5 minutes + one compaction batch) puts the raw arrays at their 1 Hz size. So the total
    equals a full 1 Hz day's; `test_one_series_full_day_at_1hz` checks that per series with every second
    of a day. Feeding all 43 M samples under tracemalloc would take many minutes."""
    rng = random.Random(0)
    vals = [rng.random() * 4 for _ in keys]
    times = [m * 900.0 + 0.5 for m in range(23 * 4)]  # .. 23 h
    times += [82800.5 + 60.0 * m for m in range(52)]  # .. 86400 - 8 min
    times += [float(s) for s in range(86400 - 480, 86401)]
    for t in times:
        store.add_many(t, zip(keys, vals, strict=True))
    return times[-1]


def test_memory_250_pods_one_day() -> None:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        keys = _keys(250)
        store = WindowStore()
        now = fill_day(store, keys)
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(store) == 502
    st = store.stats(keys[5], now)
    assert st["max_avg_1d"].value is not None and st["avg_5m"].coverage == 1.0
    print(f"250 pods x 2 + node x 2, one day: {used / 2**20:.2f} MiB ({used / len(store):.0f} B per series)")
    assert used <= 10 * 2**20


def test_one_series_full_day_at_1hz() -> None:
    """Every second of a day into one series: its memory is the per-series share the store test assumes."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        sw = SeriesWindows()
        rng = random.Random(3)
        t0 = time.perf_counter()
        for s in range(86400):
            sw.add(float(s), rng.random())
        elapsed = time.perf_counter() - t0
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    print(f"one series, a full 1 Hz day: {used} B, fed in {elapsed:.2f} s (traced)")
    assert used <= 10 * 2**20 / 502 * 0.8
    # the same series fed the way `fill_day` feeds the store uses as much (the raw arrays dominate)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        store = WindowStore()
        fill_day(store, [("node", "", "cpu")])
        used_sparse = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert abs(used_sparse - used) <= 0.1 * used, (used_sparse, used)
    assert sw.stats(86399.0)["max_avg_1d"].coverage == pytest.approx(1.0, abs=0.01)
