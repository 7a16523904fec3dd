"""The enforcement strategies' plans by tables (no cgroup, no clock), the restore planner, and the registry:
one list of strategies, one executor."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from agent.config import AgentConfig
from agent.config_sections.enforcement import EnforcementConfig
from agent.enforce.actions import (
    Plan,
    Recorded,
    Restore,
    SetCpuIdle,
    SetCpuQuota,
    SetCpuset,
    SetCpuShares,
    SetMemoryHigh,
)
from agent.enforce.actions import SetOomScoreAdj as Oom
from agent.enforce.ledger import Touched
from agent.enforce.strategies import reconcile
from agent.enforce.strategies.baseline import Baseline
from agent.enforce.strategies.baseline import phase as baseline_phase
from agent.enforce.strategies.cpu_suppression import CfsQuota, CpuMemo, CpuReport, Cpuset
from agent.enforce.strategies.memory_high import MemoryHigh
from agent.enforce.strategies.registry import Facts, strategies
from agent.node_state import NodeState, node_state
from agent.snapshot import ContainerSample, NodeSample, PodMeta, PodSample, Snapshot

TIER = "/kubepods.slice/kubepods-besteffort.slice"
GI = 1 << 30


def pod(uid: str, cls: str = "offline", *, qos: str = "burstable", cpu: float | None = 0.1, request: float = 0.2,
        limit: float | None = None, memory: int = 0, containers: int = 1) -> PodSample:  # fmt: skip
    path = f"/kubepods/{qos}/pod{uid}"
    meta = PodMeta(uid, "default", uid, cls, cpu_request_cores=request, cpu_limit_cores=limit)  # type: ignore[arg-type]
    ctrs = tuple(ContainerSample(f"c{i}", f"{path}/c{i}", 0.0, 0, 0, 0, 0.0) for i in range(containers))
    return PodSample(meta, qos, path, cpu, memory, memory, memory, 0, 0.0, ctrs)


def state(pods: list[PodSample], node_cpu: float | None = 1.5, **inputs: Any) -> NodeState:
    """A 2-core, 8 GiB node; by default busy enough (1.5 cores) that offline pods are not released."""
    snap = Snapshot(1, 0.0, 0.0, NodeSample(2.0, node_cpu, 8 * GI, 1 * GI, 0), {}, {p.uid: p for p in pods}, (), 0.0)
    return dataclasses.replace(node_state(snap, (2.0, 8 * GI)), **inputs)


def entry(p: PodSample, **flags: Any) -> Touched:
    containers = {c.cgroup: None for c in p.containers}
    parts = {part: {} for part, held in flags.items() if held}  # the parts held, each with an empty record
    return Touched(p.uid, p.cgroup, 204, None, 100_000, containers, dict.fromkeys(containers, 100_000), parts=parts)


def recorded(pods: list[PodSample], memo: Any = None, now: float = 100.0, tiers: dict[str, int] | None = None,
             **flags: Any) -> Recorded:  # fmt: skip
    return Recorded({p.uid: entry(p, **flags) for p in pods}, tiers or {}, memo, now)


# -- baseline ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("last", "now", "due"),
    [(None, 100.0, True), (99.0, 100.0, False), (95.0, 100.0, True), (96.0, 100.0, False)],
)
def test_baseline_is_reapplied_every_oom_reapply_seconds(last: float | None, now: float, due: bool) -> None:
    a = pod("a")
    plan = Baseline(EnforcementConfig(oom_reapply_seconds=5.0)).plan(
        state([a]), recorded([a], None if last is None else {"a": last}, now)
    )
    expected = (SetCpuShares(a.cgroup, 2, "baseline", "a", weight=1), SetCpuIdle(a.cgroup, True, "baseline", "a"),
                Oom(a.cgroup, 1000, "baseline", "a"))  # fmt: skip
    assert plan.actions == (expected if due else ())
    # a first application starts the pod's period at its phase: pods first seen together come back apart
    start = now - 5.0 * baseline_phase("a") if last is None else now
    assert plan.memo == {"a": start if due else last}


def test_baseline_spreads_pods_first_seen_together_over_the_period() -> None:
    pods = [pod(f"p{i}") for i in range(20)]
    cfg = EnforcementConfig(oom_reapply_seconds=5.0)
    first = Baseline(cfg).plan(state(pods), recorded(pods, None, 100.0))
    assert len(first.actions) == 3 * 20  # every pod at first sight
    done: dict[str, float] = {}
    memo = first.memo
    for t in (101.0, 102.0, 103.0, 104.0, 105.0):
        plan = Baseline(cfg).plan(state(pods), recorded(pods, memo, t))
        for a in plan.actions:
            done.setdefault(a.uid, t)
        memo = plan.memo
        assert len(plan.actions) < 3 * 20  # never all of them again in one pass
    assert set(done) == {p.uid for p in pods}  # yet each again within the period


def test_baseline_leaves_online_pods_and_pods_without_an_entry_alone() -> None:
    on, unreadable = pod("on", "online"), pod("x")
    plan = Baseline(EnforcementConfig()).plan(state([on, unreadable]), Recorded({}, {}))
    assert plan.actions == () and plan.memo == {}


# -- cfs quota --------------------------------------------------------------------------------------------
def test_cfs_quota_keeps_everything_while_the_cpu_rate_is_unknown() -> None:
    a = pod("a", cpu=None)
    memo = CpuMemo(0.5, False, CpuReport("cfsQuota", 0.5))
    plan = CfsQuota(EnforcementConfig(), TIER).plan(state([a], node_cpu=None), recorded([a], memo))
    assert plan.actions == () and plan.memo is memo and plan.report == memo.report


def test_cfs_quota_suppresses_pod_then_containers_and_caps_a_tier_of_only_offline_pods() -> None:
    c = EnforcementConfig()
    burst, be = pod("a", containers=2), pod("b", qos="besteffort", request=0.0)
    plan = CfsQuota(c, TIER).plan(state([burst, be]), recorded([burst, be]))
    # 2 × 0.65 − (1.5 − 0.2) → the 0.1-core floor; the best-effort pod gets the 10 % slice
    assert plan.report.fields()["offline_cpu_budget_cores"] == pytest.approx(0.1)
    quotas = plan.report.fields()["offline_cpu_quota_cores"]
    assert quotas == pytest.approx({"a": 0.09, "b": 0.01}) and plan.memo.released is False
    a_quota = int(quotas["a"] * 100_000)
    containers = {f"{burst.cgroup}/c0": (a_quota, 100_000), f"{burst.cgroup}/c1": (a_quota, 100_000)}
    assert plan.actions[0] == SetCpuQuota(burst.cgroup, a_quota, 100_000, "quota", "a", c.cpu_change_threshold,
                                          containers)  # fmt: skip
    assert plan.actions[-1] == SetCpuQuota(TIER, 10_000, 100_000, "quota")  # the 0.1-core floor
    assert plan.report.fields()["besteffort_tier_cap_cores"] == pytest.approx(0.1)


def test_cfs_quota_releases_a_quiet_node_through_restore_and_uncaps_the_tier() -> None:
    a, b = pod("a"), pod("b")
    # the previous pass was quiet too: two passes agree (cpu_release_confirm_passes)
    rec = Recorded({"a": entry(a, quota=True), "b": entry(b)}, {TIER: 50_000}, CpuMemo(0.1, False, {}, (0.0,)), 0.0)
    plan = CfsQuota(EnforcementConfig(), TIER).plan(state([a, b], node_cpu=0.3), rec)
    assert plan.actions == (Restore("a", frozenset({"quota"})), SetCpuQuota(TIER, None, 50_000, "quota"))
    assert plan.memo.released and plan.report.fields()["offline_cpu_released"] is True
    assert plan.report.fields()["offline_cpu_quota_cores"] == {}


def test_cfs_quota_growth_is_capped_from_the_memo() -> None:
    a = pod("a")
    plan = CfsQuota(EnforcementConfig(), TIER).plan(state([a], node_cpu=0.5), recorded([a], CpuMemo(0.1, False)))
    assert plan.memo.budget == pytest.approx(0.3)  # 0.1 + 10 % of 2 cores, not 2 × 0.65 − 0.4


# -- cpuset -----------------------------------------------------------------------------------------------
def test_cpuset_picks_from_the_parents_cpus_away_from_exclusive_ones() -> None:
    a, b = pod("a", containers=2), pod("b")
    parents = {"/kubepods/burstable": frozenset({0, 1, 2, 3})}
    s = state([a, b], exclusive_cpus=frozenset({3}), parent_cpus=parents)
    plan = Cpuset(EnforcementConfig(cpu_policy="cpuset")).plan(s, recorded([a, b]))
    cpus = frozenset({2})  # budget 0.1: one CPU, the highest that is not exclusive
    containers = {f"{a.cgroup}/c0": cpus, f"{a.cgroup}/c1": cpus}
    assert plan.actions == (SetCpuset(a.cgroup, cpus, "cpuset", "a", containers),
                            SetCpuset(b.cgroup, cpus, "cpuset", "b", {f"{b.cgroup}/c0": cpus}))  # fmt: skip
    assert plan.report.fields()["offline_cpuset"] == "2"


def test_cpuset_skips_a_pod_whose_parent_is_unknown_and_releases_through_restore() -> None:
    a = pod("a")
    assert Cpuset(EnforcementConfig()).plan(state([a]), recorded([a])).actions == ()
    quiet_before = CpuMemo(None, False, {}, (0.0,))  # two quiet passes agree (cpu_release_confirm_passes)
    plan = Cpuset(EnforcementConfig()).plan(state([a], node_cpu=0.3), recorded([a], quiet_before, cpuset="0-3"))
    assert plan.actions == (Restore("a", frozenset({"cpuset"})),) and plan.report.fields()["offline_cpuset"] is None


# -- memory.high ------------------------------------------------------------------------------------------
def test_memory_high_follows_the_watermark_in_the_state() -> None:
    a, b = pod("a", memory=GI), pod("b", memory=3 * GI)
    for percent, each in ((60.0, None), (25.0, None), (0.0, 64 << 20)):
        plan = MemoryHigh(EnforcementConfig()).plan(state([a, b], memory_high_percent=percent), recorded([a, b]))
        shares = plan.report.fields()["offline_memory_high_bytes"]
        assert [x.limit for x in plan.actions if isinstance(x, SetMemoryHigh)] == [shares["a"], shares["b"]]
        if each is not None:  # nothing left: each at memory_high_min_bytes
            assert shares == {"a": each, "b": each}
        else:
            assert shares["b"] == pytest.approx(3 * shares["a"], abs=3)  # by working set
            assert sum(shares.values()) == pytest.approx(8 * GI * percent / 100, abs=3)


# -- restore decisions ------------------------------------------------------------------------------------
def test_reconcile_restores_gone_online_and_switched_off_parts() -> None:
    off, on, gone = pod("off"), pod("on", "online"), pod("gone")
    entries = {
        "off": entry(off, baseline=True, quota=True, memory_high=True),
        "on": entry(on, baseline=True, quota=True),
        "gone": entry(gone, baseline=True),
        "empty": Touched("empty", "/kubepods/podempty", 2, None, 100_000),
    }
    s = state([off, on, pod("empty", "online")])
    actions = reconcile.plan(s, entries, {TIER: 0}, frozenset({"baseline", "quota"}))
    assert actions == (
        Restore("off", frozenset({"memory_high"})),  # memory.high switched off
        Restore("on", frozenset({"baseline", "quota"})),  # no longer offline
        Restore("gone", frozenset({"baseline"})),
        Restore("empty", frozenset()),  # holds nothing: the entry goes
    )
    # without an active quota owner, every tier Colo may have capped is uncapped
    uncapped = reconcile.plan(s, {}, {TIER: 0, "/kubepods/burstable": 50_000}, frozenset({"baseline"}))
    assert sorted(uncapped, key=repr) == [
        SetCpuQuota(TIER, None, 0, "quota"),
        SetCpuQuota("/kubepods/burstable", None, 50_000, "quota"),
    ]


# -- the registry -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("policy", "v2", "memory_high", "names"),
    [
        ("cfsQuota", True, True, ["baseline", "cfs_quota", "memory_high", "batch_limits"]),
        ("cpuset", True, True, ["baseline", "cpuset", "memory_high", "batch_limits"]),
        ("none", True, False, ["baseline", "batch_limits"]),
        ("cfsQuota", False, True, ["baseline", "cfs_quota", "batch_limits"]),  # memory.high needs v2
        ("none", False, False, ["baseline"]),  # with batch.enabled false
    ],
)
def test_registry_picks_strategies_from_config_and_facts(policy: str, v2: bool, memory_high: bool,
                                                         names: list[str]) -> None:  # fmt: skip
    batch = {"enabled": "batch_limits" in names}
    config = AgentConfig.model_validate({"enforcement": {"cpu_policy": policy, "memory_high": memory_high},
                                         "batch": batch})  # fmt: skip
    chosen = strategies(config, Facts(v2, TIER))
    # the online QoS strategies and disk QoS are always there: each restores its part when off, a pod may opt in
    # to burst
    assert [s.name for s in chosen] == [*names, "cpu_burst", "quota_burst", "memory_qos", "disk_qos"]
    assert all(isinstance(s.plan(state([]), Recorded({}, {})), Plan) for s in chosen)
