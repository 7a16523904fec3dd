"""The run-queue protection's decisions, by tables (signal in, ceiling out), and the ceiling as the CPU policy
applies it: no cgroup, no API server, no clock."""

from __future__ import annotations

import dataclasses

import pytest

from agent.config import AgentConfig, load_config
from agent.config_sections.enforcement import EnforcementConfig, RunQueueProtectionConfig
from agent.enforce.actions import Recorded
from agent.enforce.strategies import cpu_suppression
from agent.enforce.strategies.run_queue_guard import (
    BASELINE_READINGS,
    FUTILE_READINGS,
    Feel,
    GuardMemo,
    RunQueueGuard,
    decide,
    judge,
)
from agent.node_state import node_state
from agent.snapshot import RunQueue, SloReading
from common.config import ConfigError
from tests.test_capacity import GI, sample, snapshot

C = RunQueueProtectionConfig(enabled=True)  # rise: > 1.5x and > +0.05; quiet: <= 1.2x or <= +0.025


@pytest.mark.parametrize(
    ("share", "delay", "baseline", "expected"),
    [
        (0.30, 0.1, None, "learning"),  # no baseline yet: no judgement
        (0.30, 0.1, 0.10, "rise"),  # 3x and +20 points
        (0.16, 0.1, 0.10, "rise"),  # 1.6x and +6 points
        (0.14, 0.1, 0.10, "hold"),  # 1.4x: between quiet and rise
        (0.12, 0.1, 0.10, "quiet"),  # 1.2x
        (0.04, 0.1, 0.01, "hold"),  # 4x but only +3 points: not a rise; above +2.5 points: not quiet either
        (0.03, 0.1, 0.01, "quiet"),  # +2 points
        (0.30, 0.001, 0.10, "idle"),  # a rise of a pod that barely waits: noise
        (0.70, 0.006, 0.20, "idle"),  # waits 70% of under 9 ms a second: a mostly asleep pod (the controller's)
        (0.70, 0.035, 0.20, "rise"),  # ... of 50 ms a second: judged
        (0.10, 0.1, 0.10, "quiet"),
    ],
)
def test_a_reading_against_its_baseline(share: float, delay: float, baseline: float | None, expected: str) -> None:
    assert judge(share, delay, baseline, C) == expected


def memo(cap: float | None, history: tuple[float, ...] = (0.1,), at: float = 0.0, quiet: int = 0) -> GuardMemo:
    return GuardMemo(cap, {"a": history}, {"a": at}, quiet)


@pytest.mark.parametrize(
    ("before", "share", "at", "budget", "state", "cap", "quiet"),
    [
        # a rise cuts at once to half the lower of the ceiling and the utilization budget
        (memo(None), 0.5, 1.0, 1.2, "cut", 0.6, 0),
        (memo(0.8), 0.5, 1.0, 1.2, "cut", 0.4, 0),
        (memo(0.8), 0.5, 1.0, 0.6, "cut", 0.3, 0),  # the utilization budget fell below the ceiling
        (memo(0.15), 0.5, 1.0, 1.2, "cut", 0.1, 0),  # never below cpu_min_offline_cores
        # the same reading seen again (an online pod's stands between its turns): no second cut
        (memo(0.4, at=1.0), 0.5, 1.0, 1.2, "holding", 0.4, 0),
        # quiet readings: held for quiet_readings, then grown by grow_share x allocatable (2 cores) per reading
        (memo(0.4), 0.1, 1.0, 1.2, "holding", 0.4, 1),
        (memo(0.4, quiet=1), 0.1, 1.0, 1.2, "holding", 0.4, 2),
        (memo(0.4, quiet=2), 0.1, 1.0, 1.2, "growing", 0.5, 3),
        (memo(0.4, quiet=2, at=1.0), 0.1, 1.0, 1.2, "holding", 0.4, 2),  # no fresh reading: no growth
        # grown up to the utilization budget: the ceiling is lifted
        (memo(1.15, quiet=5), 0.1, 1.0, 1.2, "open", None, 6),
        # between quiet and rise: held, and the quiet count starts again
        (memo(0.4, quiet=5), 0.14, 1.0, 1.2, "holding", 0.4, 0),
        # no ceiling and nothing rising: open
        (memo(None), 0.12, 1.0, 1.2, "open", None, 0),
    ],
)
def test_the_ceiling_after_a_reading(
    before: GuardMemo, share: float, at: float, budget: float, state: str, cap: float | None, quiet: int
) -> None:
    d = decide([Feel("a", share, 0.1, at)], before, budget, 2.0, C, 0.1)
    assert (d.state, d.memo.cap, d.memo.quiet) == (state, pytest.approx(cap) if cap else None, quiet)
    assert d.reason


def test_the_baseline_is_the_lowest_recent_reading_and_forgets_old_ones() -> None:
    m = GuardMemo()
    shares = (0.3, 0.1) + (0.3,) * BASELINE_READINGS
    for t, share in enumerate(shares):  # (barely waiting: judged idle, so no cut resets the history meanwhile)
        m = decide([Feel("a", share, 0.001, float(t))], m, 1.0, 2.0, C, 0.1).memo
    assert m.history["a"] == (0.3,) * BASELINE_READINGS  # the 0.1 fell out: sustained contention is the baseline
    d = decide([Feel("a", 0.32, 0.1, 999.0)], m, 1.0, 2.0, C, 0.1)
    assert d.judged["a"][0] == "quiet"


def test_a_cut_that_does_not_help_is_undone_and_the_baseline_learned_again() -> None:
    """Waits that stay with offline CPU at the floor are not batch's: after FUTILE_READINGS fresh rises there the
    ceiling is lifted and the pod's baseline is its current share (no new cut at that level)."""
    m = GuardMemo(None, {"a": (0.3,)}, {}, 0)
    states = []
    for t in range(1, 4 + FUTILE_READINGS + 1):
        d = decide([Feel("a", 0.64, 0.1, float(t))], m, 1.2, 2.0, C, 0.1)
        states.append(d.state)
        m = d.memo
    # halved to the floor in four readings (1.2 -> 0.6 -> 0.3 -> 0.15 -> 0.1), then FUTILE_READINGS rises there
    assert states == ["cut"] * (4 + FUTILE_READINGS - 1) + ["open"]
    assert "not batch's doing" in d.reason
    d = decide([Feel("a", 0.64, 0.1, 99.0)], m, 1.2, 2.0, C, 0.1)
    assert (d.state, d.memo.cap) == ("open", None) and d.judged["a"][2] == pytest.approx(0.64)


def test_a_cut_that_helps_costs_nothing_or_answers_an_slo_keeps_batch_at_the_floor() -> None:
    # one quieter reading at the floor starts the count again: the cut helped
    m = GuardMemo(None, {"a": (0.3,)}, {}, 0)
    shares = [0.64] * (4 + FUTILE_READINGS - 1) + [0.4] + [0.64] * (FUTILE_READINGS - 1)
    for t, share in enumerate(shares, 1):
        d = decide([Feel("a", share, 0.1, float(t))], m, 1.2, 2.0, C, 0.1)
        assert d.state in ("cut", "holding"), (t, d.reason)
        m = d.memo
    # the utilization rule holds batch at the floor anyway (budget 0.1): the ceiling costs nothing and stays
    m = GuardMemo(None, {"a": (0.3,)}, {}, 0)
    for t in range(1, 3 * FUTILE_READINGS):
        d = decide([Feel("a", 0.64, 0.1, float(t))], m, 0.1, 2.0, C, 0.1)
        assert (d.state, d.memo.cap) == ("cut", 0.1)
        m = d.memo
    # an SLO pod above its objective is cut however long it stays at the floor
    m = GuardMemo(0.1, {"a": (0.1,)}, {}, 0)
    for t in range(1, 3 * FUTILE_READINGS):
        d = decide([Feel("a", 0.5, 0.1, float(t), slack=-0.3, slack_at=float(t))], m, 1.2, 2.0, C, 0.1)
        assert (d.state, d.memo.cap) == ("cut", 0.1)
        m = d.memo


def test_the_worst_pod_is_named_and_a_vanished_pod_is_forgotten() -> None:
    m = GuardMemo(None, {"a": (0.1,), "b": (0.1,), "gone": (0.1,)}, {}, 0)
    d = decide([Feel("a", 0.3, 0.1, 1.0), Feel("b", 0.6, 0.1, 1.0)], m, 1.0, 2.0, C, 0.1)
    assert d.state == "cut" and "b waited 60%" in d.reason
    assert set(d.memo.history) == {"a", "b"}


def test_the_cpu_policy_holds_offline_pods_to_the_ceiling_and_does_not_release() -> None:
    snap = snapshot([sample("on", "online", 1.0, GI, 0.1, GI), sample("off", "offline", 0, 0, 0.5, GI)], 0.7, GI, 1.0)
    state = node_state(snap, (4.0, None))
    config = EnforcementConfig()
    assert cpu_suppression.budget(state, None, config) == pytest.approx(4 * 0.65 - 0.1 - 0.1)
    capped = dataclasses.replace(state, offline_cpu_cap=0.5)
    assert cpu_suppression.budget(capped, None, config) == 0.5
    assert cpu_suppression.budget(dataclasses.replace(state, offline_cpu_cap=0.01), None, config) == 0.1
    # the node is quiet (would release), but a ceiling keeps the offline pods suppressed
    memo = cpu_suppression.CpuMemo(loads=(0.05,))
    step = cpu_suppression.budget_and_release(capped, memo, config)
    assert step is not None and step[1] is False
    step = cpu_suppression.budget_and_release(state, memo, config)
    assert step is not None and step[1] is True


def test_the_strategy_reads_the_online_pods_and_hands_its_ceiling_on() -> None:
    on = sample("on", "online", 1.0, GI, 0.5, GI)
    on.run_queue = RunQueue(0.5, 0.5, None, None, 3, at=7.0)
    snap = snapshot([on, sample("off", "offline", 0, 0, 1.0, GI)], 1.6, GI, 1.0)
    state = node_state(snap, (4.0, None))
    guard = RunQueueGuard(EnforcementConfig(rq_protection=C))
    plan = guard.plan(state, Recorded({}, {}, GuardMemo(None, {"on": (0.1,)}, {}, 0)))
    assert plan.offline_cpu_cap is not None and plan.offline_cpu_cap > 0
    fields = plan.report.fields()["run_queue_guard"]
    assert fields["state"] == "cut" and fields["pods"]["on"]["judgement"] == "rise"


def test_the_agents_own_pod_is_never_judged_as_a_service() -> None:
    """The same rising pod as above, named as the agent's own (the downward API's POD_UID): nothing is cut."""
    on = sample("on", "online", 1.0, GI, 0.5, GI)
    on.run_queue = RunQueue(0.5, 0.5, None, None, 3, at=7.0)
    snap = snapshot([on, sample("off", "offline", 0, 0, 1.0, GI)], 1.6, GI, 1.0)
    state = node_state(snap, (4.0, None))
    guard = RunQueueGuard(EnforcementConfig(rq_protection=C), own_pod_uid="on")
    plan = guard.plan(state, Recorded({}, {}, GuardMemo(None, {"on": (0.1,)}, {}, 0)))
    assert plan.offline_cpu_cap is None
    assert plan.report.fields()["run_queue_guard"]["state"] == "open"


def test_switched_by_config_and_its_hysteresis_validated() -> None:
    cfg = load_config([], env={"COLO_ENFORCEMENT__RQ_PROTECTION__ENABLED": "true"})
    assert cfg.enforcement.rq_protection.enabled
    assert not AgentConfig().enforcement.rq_protection.enabled
    bad = {"COLO_ENFORCEMENT__RQ_PROTECTION__QUIET_RATIO": "2", "COLO_ENFORCEMENT__RQ_PROTECTION__RISE_RATIO": "1.5"}
    with pytest.raises(ConfigError):
        load_config([], env=bad)


@pytest.mark.parametrize(
    ("slack", "state", "judgement"),
    [
        (-0.2, "cut", "rise"),  # p99 20% above the SLO: cut to the floor, whatever the run queue says
        (0.1, "holding", "hold"),  # within the band: held
        (0.5, "holding", "quiet"),  # quiet: counts towards growth
    ],
)
def test_an_slo_pod_is_judged_by_its_slack(slack: float, state: str, judgement: str) -> None:
    before = GuardMemo(0.8, {"a": (0.1,)}, {"a": 0.0}, 0)
    d = decide([Feel("a", 0.1, 0.1, 1.0, slack=slack, slack_at=5.0)], before, 1.2, 2.0, C, 0.1)
    assert (d.state, d.judged["a"][0]) == (state, judgement)
    assert d.memo.history["a"] == (0.1, 0.1)  # the run-queue baseline keeps learning
    if state == "cut":
        assert "missed its SLO" in d.reason and d.memo.cap == pytest.approx(0.1)  # the floor, not 0.8 x cut_factor
    again = decide([Feel("a", 0.1, 0.1, 2.0, slack=slack, slack_at=5.0)], d.memo, 1.2, 2.0, C, 0.1)
    assert again.memo.cap == d.memo.cap  # the same scrape does not act twice


def test_the_slack_is_in_the_report_and_the_strategy_takes_it_from_the_state() -> None:
    on = sample("on", "online", 1.0, GI, 0.5, GI)
    on.run_queue = RunQueue(0.01, 0.05, None, None, 3, at=7.0)
    snap = snapshot([on, sample("off", "offline", 0, 0, 1.0, GI)], 1.6, GI, 1.0)
    state = dataclasses.replace(node_state(snap, (4.0, None)), slo={"on": SloReading(0.06, -0.2, 6.0)})
    plan = RunQueueGuard(EnforcementConfig(rq_protection=C)).plan(state, Recorded({}, {}, None))
    pod = plan.report.fields()["run_queue_guard"]["pods"]["on"]
    assert pod == {"judgement": "rise", "slo_slack": -0.2} and plan.offline_cpu_cap is not None
