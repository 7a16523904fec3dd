"""The online QoS strategies keep what a pod's spec gives between passes (agent/enforce/strategies/online.py
SpecCache): a plan from a warm strategy is the plan a fresh one makes, and a change of spec or of the
running containers changes it in the next pass."""

from __future__ import annotations

import dataclasses
from typing import Any

from agent.config_sections.pod_qos import CpuBurstConfig, MemoryQosConfig, QuotaBurstConfig
from agent.enforce.actions import Plan, Recorded, SetCpuBurst, SetCpuQuota, SetMemoryProtection
from agent.enforce.strategies.cpu_burst import CpuBurst
from agent.enforce.strategies.memory_qos import MemoryQos
from agent.enforce.strategies.quota_burst import QuotaBurst
from agent.snapshot import PodSample
from tests.test_qos_plans import GI, MI, P, pod, state

Strategy = CpuBurst | QuotaBurst | MemoryQos


def strategies() -> list[Strategy]:
    return [CpuBurst(CpuBurstConfig(enabled=True), True), QuotaBurst(QuotaBurstConfig(enabled=True, step_percent=50)),
            MemoryQos(MemoryQosConfig(enabled=True, protection="min"), True, "/kubepods")]  # fmt: skip


def values(plan: Plan) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in plan.actions:
        if isinstance(a, SetCpuBurst):
            out[a.cgroup] = a.burst_us
        elif isinstance(a, SetCpuQuota):
            out[a.cgroup] = a.quota_us
        elif isinstance(a, SetMemoryProtection):
            out[a.cgroup] = a.value
    return out


def test_a_cached_plan_follows_the_spec_and_the_containers() -> None:
    """Same UID and cgroups, a new PodMeta (the pod source makes one per resourceVersion): new targets at
    once; a container that stops running (same PodMeta) leaves the plan."""
    small = pod("a", limits=(0.5, 1.0), throttled=0.5, memory=[(256 * MI, 512 * MI), (128 * MI, 256 * MI)])
    big = pod("a", limits=(1.0, 1.0), throttled=0.5, memory=[(512 * MI, GI), (128 * MI, 256 * MI)])
    burst, quota, memory = strategies()
    assert values(burst.plan(state([small]), Recorded({}, {}))) == {f"{P}/a-c0": 50_000, f"{P}/a-c1": 100_000,
                                                                    P: 150_000}  # fmt: skip
    assert values(quota.plan(state([small]), Recorded({}, {})))[f"{P}/a-c0"] == 75_000
    assert values(memory.plan(state([small]), Recorded({}, {})))[f"{P}/a-c0"] == 256 * MI
    assert values(burst.plan(state([big]), Recorded({}, {})))[f"{P}/a-c0"] == 100_000
    assert values(quota.plan(state([big]), Recorded({}, {})))[f"{P}/a-c0"] == 150_000
    assert values(memory.plan(state([big]), Recorded({}, {})))[f"{P}/a-c0"] == 512 * MI
    one = dataclasses.replace(big, containers=big.containers[1:])  # a-c0 not running this pass
    for s in (burst, quota, memory):
        got = values(s.plan(state([one]), Recorded({}, {})))
        assert f"{P}/a-c1" in got and f"{P}/a-c0" not in got, s.name


def test_a_warm_plan_is_the_plan_of_a_fresh_strategy() -> None:
    """Pass after pass with specs changing, pods coming and going: the warm strategy's plan (actions,
    memo, report) equals the one a strategy built for that pass alone makes from the same memo."""
    warm = strategies()
    memos: dict[str, Any] = {}
    passes: list[list[PodSample]] = [
        [pod("a", throttled=0.5), pod("b", memory=[(64 * MI, None)])],
        [pod("a", throttled=0.5), pod("b", memory=[(64 * MI, None)])],
        [pod("a", limits=(0.2, 1.0), throttled=0.0), pod("c", annotations={"volcano.sh/enable-quota-burst": "x"})],
        [pod("a", "offline"), pod("c", throttled=0.9, memory=[(GI, GI)])],
    ]
    for n, pods in enumerate(passes):
        for s, fresh in zip(warm, strategies(), strict=True):
            recorded = Recorded({}, {}, memos.get(s.name), 100.0 + n)
            got, want = s.plan(state(pods), recorded), fresh.plan(state(pods), recorded)
            assert (got.actions, got.memo, got.report) == (want.actions, want.memo, want.report), (n, s.name)
            memos[s.name] = got.memo
