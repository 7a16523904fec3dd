"""The shorter paths colo-sim's replay takes through the agent's windows (issue 31) give the numbers of the longer
ones, bit for bit: `_advance`'s shortcut for one bucket with samples leaves the state the per-boundary loop
leaves; `SeriesWindows.values` and `WindowStore.values_of` read what `value` reads; the minute means, read
between the other windows of a warm series, leave its caches as a fresh series' answers; `rc_like`, which
reads a pod's 5-minute average only where the day alone is too short a history, predicts what reading all
three windows of every pod predicts.
"""

from __future__ import annotations

import math
import random
from typing import ClassVar

import pytest

from agent.capacity.lendable import CapacityParams, OnlinePod
from agent.capacity.predictors import registry
from agent.capacity.predictors.registry import HISTORY_WINDOW, Reading, pod_key, seen_seconds
from agent.windows.grid import WINDOW_NAMES, SeriesState, WindowValue
from agent.windows.stats import SeriesWindows
from agent.windows.store import WindowStore
from tests.test_windows_incremental import fresh, random_stream, same


class PerBoundary(SeriesWindows):
    """The same series without the one-bucket shortcut: every closed boundary goes through the generic loop."""

    __slots__ = ()
    one_bucket_shortcut: ClassVar[bool] = False


def trace_like(rng: random.Random, n: int) -> list[tuple[float, float]]:
    """Samples a replayed trace feeds (a step of 60 to 900 s, a step missed now and then, a day off once in a
    while) with bursts of 1 Hz samples between them, so that a closing bucket has one, or several, buckets with
    samples among its five."""
    out: list[tuple[float, float]] = []
    t = 1_372_629_804.0 + rng.uniform(0.0, 300.0)
    step = rng.choice((60.0, 120.0, 300.0, 300.0, 900.0))
    for _ in range(n):
        r = rng.random()
        if r < 0.03:
            t += step * rng.randrange(2, 6)
        elif r < 0.035:
            t += 86_400.0 + rng.uniform(0.0, 3600.0)
        elif r < 0.08:
            for _ in range(rng.randrange(2, 90)):
                t += 1.0
                out.append((t, rng.uniform(0.0, 4.0)))
        t += step
        out.append((t, rng.choice((0.0, rng.uniform(0.0, 4.0), float(rng.randrange(1 << 20, 1 << 32))))))
    return out


def same_state(a: SeriesState, b: SeriesState) -> bool:
    fields = ("times", "values", "msum", "mcnt", "mcov", "mev", "dmax", "dcov", "hours")
    for name in fields:
        x, y = getattr(a, name), getattr(b, name)
        if (x is None) != (y is None) or (x is not None and y is not None and x.tobytes() != y.tobytes()):
            return False
    return (a.d0, a.last_t, a.last_gap_t, a.kc, a.dhead, a.hhead) == (
        b.d0,
        b.last_t,
        b.last_gap_t,
        b.kc,
        b.dhead,
        b.hhead,
    )


@pytest.mark.parametrize("seed", range(8))
def test_the_one_bucket_shortcut_leaves_the_state_the_per_boundary_loop_leaves(seed: int) -> None:
    rng = random.Random(seed)
    phase, max_gap = rng.uniform(0.0, 300.0), rng.choice((5.0, 60.0, 300.0))
    short = SeriesWindows(phase=phase, max_gap=max_gap, hours=True)
    loop = PerBoundary(phase=phase, max_gap=max_gap, hours=True)
    for i, (t, v) in enumerate(trace_like(rng, 1500)):
        short.add(t, v)
        loop.add(t, v)
        if i % 7 == 0:
            assert same_state(short.state(), loop.state()), (seed, i)
            assert (short._hmax, short._hmax_k) == (loop._hmax, loop._hmax_k), (seed, i)
            for now in (t, t + 150.0):
                a, b = short.row(now), loop.row(now)
                assert all(same(x.value, y.value) and same(x.coverage, y.coverage) for x, y in zip(a, b, strict=True))
                assert short.day_profile(now, 7) == loop.day_profile(now, 7)
                assert short.days_peak(now, 7) == loop.days_peak(now, 7)


def test_values_and_values_of_read_what_value_reads() -> None:
    rng = random.Random(11)
    store = WindowStore(phase=30.0, max_gap=300.0)
    keys = [pod_key(f"p{i}", "cpu") for i in range(4)]
    names = ("p99_1h", "avg_5m", "max_avg_1h", "p50_5m", "max_avg_1d", "avg_1m", "p90_1h")
    for t, v in trace_like(rng, 800):
        store.add(keys[rng.randrange(len(keys))], t, v)
        if rng.random() < 0.1:
            now = t + rng.choice((0.0, 40.0, 299.0))
            asked = tuple(rng.sample(names, rng.randrange(1, 4)))
            got = store.values_of([*keys, pod_key("gone", "cpu")], asked, now)
            want = [tuple(store.value(key, name, now) for name in asked) for key in keys]
            assert got == [*want, (WindowValue(None, 0.0),) * len(asked)]
    with pytest.raises(KeyError, match="nope"):
        store.values_of([pod_key("gone", "cpu")], ("avg_5m", "nope"), 0.0)
    with pytest.raises(KeyError, match="nope"):
        store.values_of(keys, ("nope",), 0.0)


@pytest.mark.parametrize("seed", range(4))
def test_minute_means_between_other_reads_leave_the_caches_right(seed: int) -> None:
    """The minute means keep the hour's coverage for the windows read after them in the same minute."""
    rng = random.Random(seed)
    sw = SeriesWindows(phase=rng.uniform(0.0, 300.0), max_gap=rng.choice((5.0, 300.0)))
    for i, (t, v) in enumerate(random_stream(rng, 3000) if seed % 2 else trace_like(rng, 1500)):
        sw.add(t, v)
        if i % 11:
            continue
        want = fresh(sw)
        for _ in range(4):  # reads at different minutes, one after another
            now = t + rng.choice((0.0, 0.0, 30.0, 301.0, 3700.0))
            if rng.random() < 0.4:
                assert sw.minute_means(now) == want.minute_means(now)
            else:
                asked = tuple(rng.sample(WINDOW_NAMES, rng.randrange(1, 4)))
                got, ref = sw.values(asked, now), fresh(sw).values(asked, now)
                assert all(
                    same(a.value, b.value) and same(a.coverage, b.coverage) for a, b in zip(got, ref, strict=True)
                )


def rc_like_reading_every_window(r: Reading) -> float:
    """`rc_like` reading the hour's percentile, the history's window and the 5-minute average of every pod."""
    total = 0.0
    for p in r.pods:
        p99, day, avg5 = r.windows.values(pod_key(p.uid, r.resource), ("p99_1h", HISTORY_WINDOW, "avg_5m"), r.now)
        if p99.value is None or seen_seconds(HISTORY_WINDOW, day, avg5) < r.params.min_history_seconds:
            total += max(p.request, p.usage)
        else:
            total += p99.value
    return total


@pytest.mark.parametrize("enough", [0.0, 45.0, 80.0, 200.0, 300.0, 3600.0])
def test_rc_like_predicts_what_reading_every_window_of_every_pod_predicts(enough: float) -> None:
    """Pods fed at 1 Hz that started at different times: a young pod's day (its complete minutes) is shorter than
    its 5-minute average (the minute in progress too), which then decides."""
    rng = random.Random(int(enough))
    store = WindowStore(phase=rng.uniform(0.0, 300.0))
    params = CapacityParams(min_history_seconds=enough, trust_seconds=0.0, margin=None)
    starts = [rng.randrange(0, 600) for _ in range(10)]
    t0 = 1_372_629_804.0
    decided_by_now = 0
    for s in range(900):
        now = t0 + s
        pods = []
        for i, start in enumerate(starts):
            if s >= start and rng.random() > 0.02:  # a pod misses a second now and then
                usage = rng.uniform(0.0, 3.0)
                store.add(pod_key(f"p{i}", "cpu"), now, usage)
                pods.append(OnlinePod(f"p{i}", 2.0, usage))
        if s % 7:
            continue
        pods.append(OnlinePod("never-fed", 1.5, 0.5))
        r = Reading(store, now, "cpu", pods, params)
        got = registry.spec("rc_like").predict(r)
        want = rc_like_reading_every_window(r)
        assert got.peak == want and math.copysign(1.0, got.peak) == math.copysign(1.0, want), (s, got, want)
        for p in pods:
            p99, day, avg5 = store.values(pod_key(p.uid, "cpu"), ("p99_1h", HISTORY_WINDOW, "avg_5m"), now)
            if p99.value is not None and day.coverage * 86400.0 < enough <= avg5.coverage * 300.0:
                decided_by_now += 1
    assert decided_by_now > 0 or enough in (0.0, 3600.0)
