"""The window store fed as colo-sim feeds it: one sample per 5-minute trace step, `max_gap` up to the step
(each sample stands for its whole step). Checked against the brute-force reference of tests/test_windows."""

from __future__ import annotations

import random

import pytest

from agent.windows.store import WindowStore
from tests.test_windows import drive


def trace_steps(n: int, step: float, seed: int) -> list[tuple[float, float]]:
    """A bursty series at `step` seconds with an occasional missing step (a VM off or unmonitored)."""
    rng = random.Random(seed)
    out, t = [], 1_372_629_804.0
    for _ in range(n):
        t += step * (2 if rng.random() < 0.03 else 1)
        out.append((t, rng.choice((0.1, 0.2, 0.3, 4.0)) * rng.random()))
    return out


@pytest.mark.parametrize(("step", "max_gap"), [(300.0, 300.0), (300.0, 60.0), (60.0, 60.0), (120.0, 150.0)])
def test_matches_brute_force_at_trace_steps(step: float, max_gap: float) -> None:
    stream = trace_steps(2 * 288 + 40, step, seed=int(step + max_gap))
    _, _, checks = drive(stream, max_gap=max_gap, every=7, probes=(0.0, 150.0, 299.0))
    assert checks > 100


def test_a_full_step_of_coverage_per_sample() -> None:
    """At max_gap = the step, a day of 5-minute samples covers the day (the agent's min_history rule works on
    replayed traces as on 1 Hz samples)."""
    store = WindowStore(max_gap=300.0)
    for k in range(288):
        store.add(("online", "", "cpu"), 300.0 * (k + 1), 1.0 + (k == 100))
    now = 300.0 * 288
    assert store.value(("online", "", "cpu"), "max_avg_1d", now).value == 2.0
    assert store.value(("online", "", "cpu"), "max_avg_1d", now).coverage > 0.99  # the day reaches up to 4 min back
    assert store.value(("online", "", "cpu"), "max_avg_1h", now).coverage == pytest.approx(1.0)
    assert store.value(("online", "", "cpu"), "avg_5m", now).coverage == pytest.approx(1.0)
