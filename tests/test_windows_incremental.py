"""What the window statistics keep between queries (the long windows per minute, the day's finished-slot peak,
the sorted minute means) gives exactly what a series computed from scratch gives.

A series queried all along (its caches warm, moved a minute at a time) is compared with a copy rebuilt from
its saved state at the same instant (no cache at all): every window's value and coverage must be the same
float, bit for bit (the sign of a zero included), on random streams with gaps, stalls, repeated and equal
values, zeros of both signs, and queries between samples, far ahead and behind the latest sample.
"""

from __future__ import annotations

import math
import random

import pytest

from agent.windows.store import WINDOW_NAMES, SeriesWindows, WindowStore, WindowValue


def same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def fresh(sw: SeriesWindows) -> SeriesWindows:
    """The same series rebuilt from its state: nothing carried over from earlier queries."""
    return SeriesWindows.from_state(sw.state(), shift=0.0, phase=sw.phase)


def assert_identical(got: dict[str, WindowValue], want: dict[str, WindowValue], ctx: str) -> None:
    assert list(got) == list(WINDOW_NAMES) == list(want), ctx
    for name in WINDOW_NAMES:
        g, w = got[name], want[name]
        assert same(g.value, w.value) and same(g.coverage, w.coverage), f"{ctx} {name}: {g} != {w}"


def random_stream(rng: random.Random, n: int) -> list[tuple[float, float]]:
    """1 s ticks with jitter, stalls of a few seconds, gaps of minutes to a day, repeated timestamps."""
    out: list[tuple[float, float]] = []
    t = rng.uniform(0.0, 1000.0)
    level = rng.uniform(0.0, 4.0)
    for _ in range(n):
        r = rng.random()
        if r < 0.002:
            t += rng.choice((90.0, 400.0, 3700.0, 90000.0)) + rng.random()
        elif r < 0.03:
            t += rng.uniform(5.0, 40.0)
        elif r < 0.04:
            t += 0.0
        else:
            t += rng.choice((1.0, 1.0, 1.0, 0.5, 2.0)) + rng.uniform(-0.001, 0.001)
        kind = rng.random()
        if kind < 0.1:
            v = rng.choice((0.0, -0.0))
        elif kind < 0.3:
            v = level  # runs of equal values
        elif kind < 0.35:
            level = rng.uniform(0.0, 4.0)
            v = level
        elif kind < 0.45:
            v = float(rng.randrange(1 << 20, 1 << 32))  # bytes
        else:
            v = rng.lognormvariate(0.0, 1.0) * rng.choice((1.0, -1.0, 1e-3))
        out.append((t, v))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_warm_series_equal_a_fresh_one(seed: int) -> None:
    rng = random.Random(seed)
    sw = SeriesWindows(phase=rng.uniform(0.0, 300.0), max_gap=rng.choice((5.0, 2.0, 30.0)))
    checks = 0
    for i, (t, v) in enumerate(random_stream(rng, rng.choice((4000, 9000)))):
        sw.add(t, v)
        if i % 15 == 0:  # a scrape every 15 samples: the caches move a minute or less at a time
            now = t + rng.choice((0.0, 0.0, 0.3, 59.0))
            assert_identical(sw.stats(now), fresh(sw).stats(now), f"seed {seed} sample {i}")
            checks += 1
        if rng.random() < 0.01:  # a query elsewhere: far ahead, or behind the latest sample
            now = t + rng.choice((-120.0, 301.0, 3600.0, 86400.0))
            assert_identical(sw.stats(now), fresh(sw).stats(now), f"seed {seed} sample {i} probe")
    assert checks > 200


def test_one_window_at_a_time_equals_all_windows() -> None:
    rng = random.Random(3)
    sw = SeriesWindows(phase=17.0)
    for i, (t, v) in enumerate(random_stream(rng, 5000)):
        sw.add(t, v)
        if i % 97 == 0:
            got = sw.stats(t)
            for name in rng.sample(WINDOW_NAMES, 4):
                one = sw.value(name, t)
                assert same(one.value, got[name].value) and same(one.coverage, got[name].coverage), (i, name)


def test_a_day_at_1hz_keeps_matching_every_scrape() -> None:
    """A full day (the day ring wraps, finished slots leave the peak), queried every 15 s."""
    rng = random.Random(5)
    store = WindowStore(phase=42.0)
    key = ("pod", "u", "cpu")
    t = 0.0
    for s in range(86400 + 1800):
        t = float(s) + 0.25
        store.add(key, t, 2.0 + math.sin(s / 900.0) + rng.random() * 0.1)
        if s % 15 == 0 and (s < 7200 or s > 86400 - 600):
            sw = store.get(key)
            assert sw is not None
            assert_identical(store.stats(key, t), fresh(sw).stats(t), f"second {s}")


@pytest.mark.parametrize("name", ["max_avg_1d", "p99_1h", "max_avg_1h", "p50_1h"])
def test_a_window_asked_alone_at_trace_steps_equals_a_fresh_series(name: str) -> None:
    """colo-sim's path: one long window of a series asked per 5-minute step, over two days that fall and rise
    (the day peak's slot leaves the day while its maximum is kept between steps)."""
    rng = random.Random(name)
    sw = SeriesWindows(phase=120.0, max_gap=300.0)
    for i in range(2 * 288 + 40):
        t = 300.0 * i + 7.0
        sw.add(t, 100.0 - (i % 400) * 0.2 + rng.random() * 0.01)
        one = sw.value(name, t)
        want = fresh(sw).stats(t)[name]
        assert same(one.value, want.value) and same(one.coverage, want.coverage), (i, one, want)


def test_values_reads_several_windows_as_value_reads_each() -> None:
    rng = random.Random(9)
    store = WindowStore(phase=5.0)
    key = ("pod", "u", "memory")
    for t, v in random_stream(rng, 3000):
        store.add(key, t, v)
    now = store.get(key).last_t or 0.0  # type: ignore[union-attr]
    names = ("p99_1h", "max_avg_1h", "avg_5m", "max_avg_1d")
    assert store.values(key, names, now) == tuple(store.value(key, n, now) for n in names)
    assert store.values(("pod", "gone", "cpu"), names, now) == (WindowValue(None, 0.0),) * 4
    with pytest.raises(KeyError, match="nope"):
        store.values(("pod", "gone", "cpu"), ("avg_5m", "nope"), now)
