"""The pure strategies, by tables: no cgroup, no API server, no clock."""

from __future__ import annotations

import pytest

from agent.config_sections.enforcement import EnforcementConfig
from agent.enforce.ledger import Touched
from agent.enforce.strategies import cpu_suppression, memory_high
from agent.evict import choice
from agent.node_state import NodeState, Usage, node_state
from agent.snapshot import NodeSample, PodSample, Snapshot
from tests.test_capacity import GI, sample, snapshot


@pytest.mark.parametrize(
    ("load", "released", "below", "expected"),
    [
        (0.2, False, 0.3, True),  # quiet: released
        (0.35, True, 0.3, True),  # between the two thresholds: stays released
        (0.35, False, 0.3, False),  # ... and stays suppressed
        (0.41, True, 0.3, False),  # above below + 0.1: suppressed again
        (0.4, True, 0.3, True),  # exactly at the hysteresis bound: unchanged
        (0.0, False, 0.0, False),  # 0 disables release
        (0.0, True, 0.0, False),
    ],
)
def test_release_with_hysteresis(load: float, released: bool, below: float, expected: bool) -> None:
    assert cpu_suppression.release((load,), released, below) is expected


@pytest.mark.parametrize(
    ("online", "system", "high", "sizes", "expected"),
    [
        # 16 GiB allocatable, 60%: 9.6 GiB; online 4, system 2 -> 3.6 GiB split 1:3 by working set
        (4 * GI, 2 * GI, 60, (GI, 3 * GI), (int(3.6 * GI) // 4, int(3.6 * GI) * 3 // 4)),
        # nothing left: each pod still gets the floor
        (9 * GI, 2 * GI, 60, (GI, GI), (64 << 20, 64 << 20)),
    ],
)
def test_memory_high_split(
    online: int, system: int, high: int, sizes: tuple[int, int], expected: tuple[int, int]
) -> None:
    pods = [sample(f"p{i}", "offline", 0, 0, 0.1, size) for i, size in enumerate(sizes)]
    memory = Usage(16.0 * GI, float(online + system + sum(sizes)), float(online + sum(sizes)), float(online),
                   float(sum(sizes)))  # fmt: skip
    plan = memory_high.plan(memory, pods, high, 64 << 20)
    assert (plan["p0"], plan["p1"]) == pytest.approx(expected, abs=1)


def test_eviction_choice_orders_and_stops_at_the_watermark() -> None:
    pods = [
        sample("low-prio-small", "offline", 0, 0, 0.5, GI),
        sample("low-prio-big", "offline", 0, 0, 2.0, GI),
        sample("high-prio", "offline", 0, 0, 4.0, GI),
    ]
    object.__setattr__(pods[2].meta, "priority", 100)
    # 8 cores, usage 90% of allocatable, high watermark 80%: the big low-priority pod (25%) is enough
    victims, order, projected = choice.plan(pods, "cpu", 90.0, 8.0, 80, 2)
    assert [p.uid for p in order] == ["low-prio-big", "low-prio-small", "high-prio"]
    assert [p.uid for p in victims] == ["low-prio-big"] and projected == pytest.approx(65.0)
    victims, _, _ = choice.plan(pods, "cpu", 99.0, 8.0, 50, 2)  # far above: capped at 2 per round
    assert [p.uid for p in victims] == ["low-prio-big", "low-prio-small"]


def _cpu_state(node_cpu: float | None, pods: list[PodSample]) -> NodeState:
    snap = snapshot(pods, 0.0 if node_cpu is None else node_cpu, 4 * GI, 1000.0)
    if node_cpu is None:
        snap = Snapshot(snap.seq, snap.mono, snap.wall, NodeSample(8.0, None, 32 * GI, 4 * GI, 0), {}, snap.pods,
                        (), 0.0)  # fmt: skip
    return node_state(snap, (8.0, 32 * GI))


def test_cpu_quota_budget_split_and_unknown() -> None:
    cfg = EnforcementConfig()  # threshold 0.65, min 0.1 cores, growth 10% of the node per pass
    online = sample("web", "online", 2, GI, 3.0, GI)
    batch = sample("batch", "offline", 1, GI, 0.5, GI)
    be = sample("be", "offline", 0, 0, 0.2, GI)
    state = _cpu_state(4.0, [online, batch, be])  # system = 4.0 - 3.7 = 0.3
    assert cpu_suppression.budget(state, None, cfg) == pytest.approx(8 * 0.65 - 3.0 - 0.3)
    assert cpu_suppression.budget(state, 0.5, cfg) == pytest.approx(0.5 + 0.8)  # growth capped at 0.8 per pass
    assert cpu_suppression.budget(_cpu_state(None, [online, batch]), 0.5, cfg) is None  # unknown: no budget at all
    quotas, besteffort = cpu_suppression.Demands().split(1.0, [batch, be], cfg.besteffort_share)
    assert quotas == pytest.approx({"batch": 0.9, "be": 0.1}) and besteffort == pytest.approx(0.1)


def test_cpu_quota_targets_keep_a_tighter_container_quota() -> None:
    entry = Touched("u", "/kubepods/burstable/podu", 204, None, 100_000,
                    containers={"/c/tight": 10_000, "/c/unlimited": None, "/c/loose": 90_000},
                    container_periods={"/c/tight": 100_000, "/c/unlimited": 100_000, "/c/loose": 100_000})  # fmt: skip
    targets = cpu_suppression.pod_targets(0.25, entry, EnforcementConfig())
    assert targets == (25_000, 100_000, {"/c/tight": (10_000, 100_000), "/c/unlimited": (25_000, 100_000),
                                         "/c/loose": (25_000, 100_000)})  # fmt: skip
    assert cpu_suppression.pod_targets(0.0, entry, EnforcementConfig())[0] == 1000  # the kernel's minimum


def test_cpu_quota_tier_cap_only_while_the_tier_holds_only_offline_pods() -> None:
    cfg = EnforcementConfig()
    be_off = sample("a", "offline", 0, 0, 0.1, GI)
    be_off.qos = "besteffort"
    be_on = sample("b", "online", 0, 0, 0.1, GI)
    be_on.qos = "besteffort"
    assert cpu_suppression.tier_cap(_cpu_state(2.0, [be_off]), 0.5, cfg) == 50_000
    assert cpu_suppression.tier_cap(_cpu_state(2.0, [be_off]), 0.01, cfg) == 10_000  # floored at the minimum
    assert cpu_suppression.tier_cap(_cpu_state(2.0, [be_off, be_on]), 0.5, cfg) is None  # an online pod is there
    assert cpu_suppression.tier_cap(_cpu_state(2.0, [be_off]), None, cfg) is None  # released / another policy
    assert cpu_suppression.tier_cap(_cpu_state(2.0, []), 0.5, cfg) is None
