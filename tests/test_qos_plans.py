"""The online QoS strategies' plans by tables: NodeState and the ledger's record in, actions out (no cgroup,
no clock). The decisions under them are table-tested in tests/test_qos_strategies.py. Also the one fact
enforcement hands them (offline pods suppressed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agent.config_sections.enforcement import EnforcementConfig
from agent.config_sections.pod_qos import CpuBurstConfig, MemoryQosConfig, QuotaBurstConfig
from agent.enforce.actions import (
    SHARED,
    Plan,
    Recorded,
    Report,
    Restore,
    SetCpuBurst,
    SetCpuQuota,
    SetMemoryHigh,
    SetMemoryProtection,
)
from agent.enforce.ledger import Touched
from agent.enforce.stage import Enforcer
from agent.enforce.strategies.cpu_burst import RECHECK_SECONDS, CpuBurst
from agent.enforce.strategies.cpu_suppression import CpuReport
from agent.enforce.strategies.memory_qos import MemoryQos, ancestors
from agent.enforce.strategies.quota_burst import QuotaBurst
from agent.node_state import NodeState
from agent.snapshot import ContainerSample, PodMeta, PodSample
from cgroup import CgroupReader, Layout, PathModel
from cgroup.layout import Mount
from testsupport.qos import qos_state

GI, MI = 1 << 30, 1 << 20


def pod(
    uid: str,
    cls: str = "online",
    limits: Sequence[float | None] = (0.5, 1.0),
    *,
    annotations: dict[str, str] | None = None,
    throttled: float | None = 0.0,
    usage: float | None = 0.1,
    memory: Sequence[tuple[int, int | None]] = (),
    overhead: int = 0,
) -> PodSample:
    """A pod with one container per CPU limit; its pod limit is their sum when all have one. Its cgroup's
    memory limit (as the sampler reads it) is theirs plus `overhead`, which the spec's sum does not hold."""
    cg = f"/kubepods/burstable/pod{uid}"
    containers = tuple(ContainerSample(f"{uid}-c{i}", f"{cg}/{uid}-c{i}", usage, 0, 0, 0, throttled)
                       for i in range(len(limits)))  # fmt: skip
    pod_limit = None if any(x is None for x in limits) else sum(x for x in limits if x is not None)
    meta = PodMeta(uid, "ns", uid, cls, cpu_limit_cores=pod_limit,  # type: ignore[arg-type]
                   container_cpu_limits={c.id: lim for c, lim in zip(containers, limits, strict=True)},
                   annotations=annotations or {},
                   container_memory={c.id: m for c, m in zip(containers, memory, strict=False)},
                   memory_limit_bytes=None if not memory or any(m[1] is None for m in memory)
                   else sum(m[1] or 0 for m in memory))  # fmt: skip
    read = None if meta.memory_limit_bytes is None else meta.memory_limit_bytes + overhead
    return PodSample(meta, "burstable", cg, usage, 0, 0, 0, 0, throttled, containers, memory_limit_bytes=read)


def state(pods: Sequence[PodSample], busy: float | None = 0.5, **facts: bool) -> NodeState:
    """An 8-core, 32 GiB node (testsupport.qos.qos_state)."""
    return qos_state(pods, busy, 8.0, memory=32 * GI, used=4 * GI, **facts)


def entry(uid: str, **fields: Any) -> Touched:
    parts = {part: {} if record is True else record for part, record in fields.items()}  # the parts held
    return Touched(uid, f"/kubepods/burstable/pod{uid}", 1024, 150_000, 100_000, parts=parts)


def rec(entries: Sequence[Touched] = (), memo: Any = None, now: float = 100.0) -> Recorded:
    return Recorded({e.uid: e for e in entries}, {}, memo, now)


def bursts(plan: Plan) -> dict[str, int]:
    return {a.cgroup: a.burst_us for a in plan.actions if isinstance(a, SetCpuBurst)}


def quotas(plan: Plan) -> dict[str, int | None]:
    return {a.cgroup: a.quota_us for a in plan.actions if isinstance(a, SetCpuQuota)}


def rep(plan: Plan) -> Any:
    """The plan's report: one key, the strategy's name, as the `qos` section shows it."""
    ((_, report),) = plan.report.fields().items()
    return report


def restores(plan: Plan) -> set[str]:
    return {a.uid for a in plan.actions if isinstance(a, Restore)}


P = "/kubepods/burstable/poda"


# ---- cpu_burst -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("enabled", "annotations", "cls", "limits", "expected"),
    [
        # node setting: 100% of each container's quota, the pod the sum
        (True, {}, "online", (0.5, 1.0), {f"{P}/a-c0": 50_000, f"{P}/a-c1": 100_000, P: 150_000}),
        # the pod opts in alone; its fixed burst time is capped at each quota
        (False, {"volcano.sh/enable-quota-burst": "true", "volcano.sh/quota-burst-time": "80000"}, "online",
         (0.5, 1.0), {f"{P}/a-c0": 50_000, f"{P}/a-c1": 80_000, P: 130_000}),
        (True, {"volcano.sh/enable-quota-burst": "false"}, "online", (0.5, 1.0), {}),  # opts out
        (False, {}, "online", (0.5, 1.0), {}),  # off, no annotation
        (True, {}, "offline", (0.5, 1.0), {}),  # offline pods never
        (True, {}, "unknown", (0.5, 1.0), {}),  # nor a pod not known to be online
        (True, {}, "online", (0.5, None), {f"{P}/a-c0": 50_000}),  # no limit, no burst; an unlimited pod none
        (True, {}, "online", (None,), {}),
    ],
)  # fmt: skip
def test_cpu_burst_targets(
    enabled: bool, annotations: dict[str, str], cls: str, limits: tuple[float | None, ...], expected: dict[str, int]
) -> None:
    plan = CpuBurst(CpuBurstConfig(enabled=enabled), True).plan(state([pod("a", cls, limits, annotations=annotations)]),
                                                                rec())  # fmt: skip
    assert bursts(plan) == expected
    assert all(a.uid == "a" and a.part == "burst" for a in plan.actions if isinstance(a, SetCpuBurst))
    assert ("a" in rep(plan)["pods"]) is bool(expected)


def test_cpu_burst_restores_what_it_no_longer_plans() -> None:
    """Recorded bursts of a pod that went offline, opted out, went away, or of every pod once switched off."""
    was = [entry(u, burst={f"/kubepods/burstable/pod{u}": 0}) for u in ("a", "b", "c", "d")]
    pods = [pod("a", "offline"), pod("b", annotations={"volcano.sh/enable-quota-burst": "no"}),
            pod("c", annotations={"volcano.sh/enable-quota-burst": "0"})]  # fmt: skip
    plan = CpuBurst(CpuBurstConfig(enabled=True), True).plan(state(pods), rec(was))
    # b's value is no boolean: the node's setting applies (and is reported); d is gone
    assert restores(plan) == {"a", "c", "d"} and "b" in rep(plan)["pods"]
    assert any("is not a boolean" in w for w in rep(plan)["warnings"])
    off = CpuBurst(CpuBurstConfig(enabled=False), True).plan(state(pods), rec(was))
    assert restores(off) == {"a", "b", "c", "d"} and not bursts(off)


def test_cpu_burst_unsupported_plans_nothing_but_restores() -> None:
    plan = CpuBurst(CpuBurstConfig(enabled=True), False).plan(state([pod("a")]), rec([entry("a", burst={P: 0})]))
    assert not bursts(plan) and restores(plan) == {"a"} and rep(plan)["supported"] is False


def test_cpu_burst_follows_the_current_spec_and_rechecks() -> None:
    """Between re-checks only changed targets are asked for: an in-place resize lowers the container's and
    the pod's burst at once; every target is asked for again after RECHECK_SECONDS."""
    s = CpuBurst(CpuBurstConfig(enabled=True), True)
    first = s.plan(state([pod("a")]), rec(now=100.0))
    assert len(bursts(first)) == 3
    same = s.plan(state([pod("a")]), rec(memo=first.memo, now=101.0))
    assert bursts(same) == {}
    resized = s.plan(state([pod("a", limits=(0.2, 1.0))]), rec(memo=same.memo, now=102.0))
    assert bursts(resized) == {f"{P}/a-c0": 20_000, P: 120_000}
    later = s.plan(state([pod("a", limits=(0.2, 1.0))]), rec(memo=resized.memo, now=100.0 + RECHECK_SECONDS))
    assert len(bursts(later)) == 3


# ---- quota_burst -----------------------------------------------------------------------------------------
CFG = QuotaBurstConfig(enabled=True, step_percent=50)  # 0.5 CPU: 50 → 75 → 100 → ... → 150 ms


def test_quota_burst_raises_a_throttled_container_and_its_pod_on_an_idle_node() -> None:
    s = QuotaBurst(CFG)
    plan = s.plan(state([pod("a", limits=(0.5, 1.0), throttled=0.0)]), rec())
    assert quotas(plan) == {} and rep(plan)["node_state"] == "idle"  # not throttled: nothing asked
    hot = pod("a", limits=(0.5, 1.0), throttled=0.5)
    plan = s.plan(state([hot]), rec())
    # both throttled: each gets half its own quota more; the pod its own plus the raises
    assert quotas(plan) == {f"{P}/a-c0": 75_000, f"{P}/a-c1": 150_000, P: 225_000}
    assert all(a.part == "quota_burst" for a in plan.actions if isinstance(a, SetCpuQuota))
    again = s.plan(state([hot]), rec([entry("a", quota_burst=True)], memo=plan.memo))
    assert quotas(again) == {f"{P}/a-c0": 100_000, f"{P}/a-c1": 200_000, P: 300_000} and not restores(again)
    c0 = rep(again)["pods"]["a"]["containers"]["a-c0"]
    assert c0["state"] == "raise" and c0["quota_cores"] == 1.0 and c0["own_quota_cores"] == 0.5


@pytest.mark.parametrize(
    ("busy", "facts", "node"),
    [
        (5.0, {}, "busy"),  # 5 of 8 CPUs: above 60%
        (None, {}, "busy"),  # no CPU rate yet: never idle
        (0.5, {"offline_suppressed": True}, "blocked"),
        (0.5, {"evicting": True}, "blocked"),
    ],
)
def test_quota_burst_gives_back_at_once(busy: float | None, facts: dict[str, bool], node: str) -> None:
    """A raise goes back in the next pass: the container's own quota from the spec, the pod's as recorded at
    the first raise (kubelet's 10 ms of pod overhead included, which the spec's sum misses), then the record
    is cleared."""
    s = QuotaBurst(CFG)
    hot = pod("a", limits=(0.5,), throttled=0.5)
    raised = s.plan(state([hot]), rec())
    assert quotas(raised) == {f"{P}/a-c0": 75_000, P: 75_000}  # the executor never lets it lower the pod's
    plan = s.plan(state([hot], busy, **facts), rec([overhead_entry()], memo=raised.memo))
    assert rep(plan)["node_state"] == node
    assert quotas(plan) == {f"{P}/a-c0": 50_000, P: 60_000} and restores(plan) == {"a"}


def overhead_entry() -> Touched:
    """Pod a recorded at its first raise: 0.5 CPU container, 0.6 CPU pod (0.1 of overhead)."""
    c0 = f"{P}/a-c0"
    return Touched("a", P, 1024, 60_000, 100_000, {c0: 50_000}, {c0: 100_000}, parts={"quota_burst": {}})


def test_quota_burst_raises_over_the_recorded_pod_quota_and_follows_a_resize() -> None:
    """After the first raise the pod's quota is its recorded one plus the raises; an in-place resize of the
    container since moves it by as much (the overhead stays)."""
    s = QuotaBurst(CFG)
    hot = pod("a", limits=(0.5,), throttled=0.5)
    raised = s.plan(state([hot]), rec())
    again = s.plan(state([hot]), rec([overhead_entry()], memo=raised.memo))
    assert quotas(again) == {f"{P}/a-c0": 100_000, P: 110_000}
    resized = pod("a", limits=(0.2,), throttled=0.0)
    back = s.plan(state([resized], 5.0), rec([overhead_entry()], memo=again.memo))
    assert quotas(back) == {f"{P}/a-c0": 20_000, P: 30_000} and restores(back) == {"a"}


def test_quota_burst_climbs_step_by_step_to_its_ceiling() -> None:
    """Throttled pass after pass on an idle node: +50% of its own 0.1 CPU each pass, up to 300%, never down;
    the pod follows its one container."""
    s = QuotaBurst(CFG)
    hot = pod("a", limits=(0.1,), throttled=1.0)
    c0 = f"{P}/a-c0"
    recorded = Touched("a", P, 1024, 10_000, 100_000, {c0: 10_000}, {c0: 100_000}, parts={"quota_burst": {}})
    memo, seen = None, []
    for _ in range(6):
        plan = s.plan(state([hot]), rec([recorded] if seen else [], memo=memo))
        memo, q = plan.memo, quotas(plan)
        assert q[P] == q[c0] and not restores(plan)
        seen.append(q[c0])
    assert seen == [15_000, 20_000, 25_000, 30_000, 30_000, 30_000]


def test_quota_burst_never_beyond_the_nodes_headroom() -> None:
    """Two 1-CPU containers throttled, each asking 0.5 core more; 4 of 8 CPUs busy, safe level 60% (4.8):
    0.8 core to give, the most throttled first."""
    s = QuotaBurst(CFG)
    pb = "/kubepods/burstable/podb"
    pods = [pod("a", limits=(1.0,), throttled=0.9), pod("b", limits=(1.0,), throttled=0.2)]
    roomy = s.plan(state(pods, 2.0), rec())
    assert quotas(roomy) == {f"{P}/a-c0": 150_000, P: 150_000, f"{pb}/b-c0": 150_000, pb: 150_000}
    tight = s.plan(state(pods, 4.0), rec())
    assert rep(tight)["node_state"] == "idle" and rep(tight)["headroom_cores"] == pytest.approx(0.8)
    got = quotas(tight)
    assert got[f"{P}/a-c0"] == got[P] == 150_000
    assert got[f"{pb}/b-c0"] == got[pb] == pytest.approx(130_000, abs=2)


def test_quota_burst_restores_pods_gone_offline_and_when_switched_off() -> None:
    was = [entry("a", quota_burst=True), entry("b", quota_burst=True), entry("c")]
    plan = QuotaBurst(CFG).plan(state([pod("a", "offline")]), rec(was))
    assert restores(plan) == {"a", "b"} and quotas(plan) == {}  # not online / gone: the recorded quotas
    off = QuotaBurst(QuotaBurstConfig(enabled=False)).plan(state([pod("a", throttled=1.0)]), rec(was))
    assert restores(off) == {"a", "b"} and quotas(off) == {} and rep(off)["enabled"] is False


# ---- memory_qos ------------------------------------------------------------------------------------------
def test_ancestors_up_to_kubepods() -> None:
    assert ancestors("/kubepods/burstable/podx", "/kubepods") == ("/kubepods/burstable", "/kubepods")
    assert ancestors("/kubepods/podx", "/kubepods") == ("/kubepods",)
    assert ancestors("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podx.slice",
                     "/kubepods.slice") == ("/kubepods.slice/kubepods-besteffort.slice", "/kubepods.slice")  # fmt: skip


def memory_actions(plan: Plan) -> dict[tuple[str, str], int | None]:
    out: dict[tuple[str, str], int | None] = {}
    for a in plan.actions:
        if isinstance(a, SetMemoryProtection):
            out[(a.cgroup, a.kind)] = a.value
        elif isinstance(a, SetMemoryHigh):
            out[(a.cgroup, "high")] = a.limit
    return out


def test_memory_qos_on_v2_protects_requests_up_the_tree() -> None:
    cfg = MemoryQosConfig(enabled=True, protection="low", protect_percent=50, high_percent=80)
    # kubelet's pod cgroup limit holds 32 MiB of pod overhead: the pod's memory.high is 80% of that limit
    a = pod("a", memory=[(256 * MI, 512 * MI), (128 * MI, 256 * MI)], overhead=32 * MI)
    plan = MemoryQos(cfg, True, "/kubepods").plan(state([a, pod("b", "offline", memory=[(GI, GI)])]), rec())
    assert memory_actions(plan) == {
        (f"{P}/a-c0", "low"): 128 * MI, (f"{P}/a-c0", "high"): int(512 * MI * 0.8) // 4096 * 4096,
        (f"{P}/a-c1", "low"): 64 * MI, (f"{P}/a-c1", "high"): int(256 * MI * 0.8) // 4096 * 4096,
        (P, "low"): 192 * MI, (P, "high"): int(800 * MI * 0.8) // 4096 * 4096,
        ("/kubepods/burstable", "low"): 192 * MI, ("/kubepods", "low"): 192 * MI,
    }  # fmt: skip
    uids = {a.cgroup: a.uid for a in plan.actions if isinstance(a, SetMemoryProtection)}
    assert uids[P] == "a" and uids["/kubepods"] == SHARED
    assert restores(plan) == {SHARED}  # shared cgroups no target names go back
    assert rep(plan)["pods"]["a"] == {"protected_bytes": 192 * MI, "high_bytes": int(800 * MI * 0.8) // 4096 * 4096}
    minimum = MemoryQos(MemoryQosConfig(enabled=True, protection="min"), True, "/kubepods").plan(state([a]), rec())
    assert memory_actions(minimum)[(P, "min")] == 384 * MI and (P, "low") not in memory_actions(minimum)


def test_memory_qos_on_v1_is_unsupported_and_off_restores() -> None:
    a = pod("a", memory=[(256 * MI, 512 * MI)])
    v1 = MemoryQos(MemoryQosConfig(enabled=True), False, "/kubepods").plan(state([a]), rec())
    assert memory_actions(v1) == {} and rep(v1)["supported"] is False and "v1" in rep(v1)["reason"]
    was = [entry("a", memory_qos={P: {"low": 0}}), entry("b", memory_qos={"/x": {"min": 0}})]
    off = MemoryQos(MemoryQosConfig(enabled=False), True, "/kubepods").plan(state([a]), rec(was))
    assert memory_actions(off) == {} and restores(off) == {"a", "b", SHARED}


def test_memory_qos_puts_back_a_file_it_no_longer_asks_for() -> None:
    """A restart with `protection: min` (was low) and no high_percent: memory.low and memory.high of the
    pod's cgroups go back to what was recorded before Colo's first write."""
    a = pod("a", memory=[(256 * MI, 512 * MI)])
    was = entry("a", memory_qos={P: {"low": 0, "high": None}, f"{P}/a-c0": {"low": 4096}})
    plan = MemoryQos(MemoryQosConfig(enabled=True, protection="min"), True, "/kubepods").plan(state([a]), rec([was]))
    got = memory_actions(plan)
    assert got[(P, "min")] == got[(f"{P}/a-c0", "min")] == 256 * MI
    assert got[(P, "low")] == 0 and got[(P, "high")] is None and got[(f"{P}/a-c0", "low")] == 4096
    assert ("/kubepods", "low") not in got  # the shared cgroups' records are the executor's


@pytest.mark.parametrize(
    ("reports", "enabled", "suppressing"),
    [
        ({}, True, False),  # no offline pod held
        ({"cfs_quota": CpuReport("cfsQuota", 0.4, quota_cores={"u1": 0.4})}, True, True),
        ({"cfs_quota": CpuReport("cfsQuota", 0.4, released=True)}, True, False),  # released
        ({"cpuset": CpuReport("cpuset", 1.0, cpuset="0-1")}, True, True),
        ({"cfs_quota": CpuReport("cfsQuota", 0.4, quota_cores={"u1": 0.4})}, False, False),  # enforcement off
    ],
)
def test_offline_suppressed_is_what_enforcement_reported(
    reports: dict[str, Report], enabled: bool, suppressing: bool, tmp_path: Path
) -> None:
    """The fact quota burst stops for (NodeState.offline_suppressed), from the enforcer's last reports."""
    layout = Layout("v2", {}, Mount(str(tmp_path)))
    e = Enforcer(layout, PathModel("systemd", "/"), CgroupReader(layout),
                 EnforcementConfig(ledger_file="", enabled=enabled), lambda: (2.0, GI), registered=[])  # fmt: skip
    e.reports = reports
    assert e.suppressing is suppressing
