"""The online QoS decisions as tables: burst allowance, dynamic quota burst, memory QoS (no I/O)."""

from __future__ import annotations

import pytest

from agent.config import ConfigError, load_config
from agent.config_sections.pod_qos import CpuBurstConfig, MemoryQosConfig, QuotaBurstConfig
from agent.enforce.strategies.cpu_burst import (
    BURST_TIME_ANNOTATION,
    ENABLE_ANNOTATION,
    BurstInputs,
    parse_bool,
    plan_burst,
)
from agent.enforce.strategies.memory_qos import MemoryTarget, supported
from agent.enforce.strategies.quota_burst import CpuRow, NodeCpu, QuietSince, node_state, plan_quota_burst
from agent.snapshot import PodSample
from testsupport.qos import Ctr, memory_targets, online_pod

MIB = 1 << 20
C1, C2, POD = "/kubepods/burstable/podA/c1", "/kubepods/burstable/podA/c2", "/kubepods/burstable/podA"


# -- burst allowance ---------------------------------------------------------------------------------
def burst_pod(annotations: dict[str, str], online: bool = True) -> BurstInputs:
    return BurstInputs(online, annotations, 150_000, {C1: 50_000, C2: 100_000})


@pytest.mark.parametrize(
    ("node_enabled", "percent", "annotations", "source", "pod", "containers", "warns"),
    [
        (False, 100, {}, "off", None, {}, False),
        (True, 100, {}, "node", 150_000, {C1: 50_000, C2: 100_000}, False),
        (True, 50, {}, "node", 75_000, {C1: 25_000, C2: 50_000}, False),
        # the pod opts in alone, in any of Go's ParseBool spellings
        (False, 100, {ENABLE_ANNOTATION: "true"}, "annotation", 150_000, {C1: 50_000, C2: 100_000}, False),
        (False, 100, {ENABLE_ANNOTATION: "T"}, "annotation", 150_000, {C1: 50_000, C2: 100_000}, False),
        # ... or out of the node's setting
        (True, 100, {ENABLE_ANNOTATION: "false"}, "off", None, {}, False),
        (True, 100, {ENABLE_ANNOTATION: "0"}, "off", None, {}, False),
        # not a boolean: a warning, the node's setting applies
        (True, 100, {ENABLE_ANNOTATION: "yes"}, "node", 150_000, {C1: 50_000, C2: 100_000}, True),
        (False, 100, {ENABLE_ANNOTATION: "yes"}, "off", None, {}, True),
        # a burst time in µs per container, capped at each quota; the pod gets the sum
        (False, 100, {ENABLE_ANNOTATION: "true", BURST_TIME_ANNOTATION: "80000"}, "annotation", 130_000,
         {C1: 50_000, C2: 80_000}, False),
        (True, 40, {BURST_TIME_ANNOTATION: "10000"}, "node", 20_000, {C1: 10_000, C2: 10_000}, False),
        # malformed or non-positive burst time: the percent, with a warning
        (True, 100, {BURST_TIME_ANNOTATION: "0"}, "node", 150_000, {C1: 50_000, C2: 100_000}, True),
        (True, 100, {BURST_TIME_ANNOTATION: "-5"}, "node", 150_000, {C1: 50_000, C2: 100_000}, True),
        (True, 100, {BURST_TIME_ANNOTATION: "1e5"}, "node", 150_000, {C1: 50_000, C2: 100_000}, True),
        (True, 100, {BURST_TIME_ANNOTATION: "１２"}, "node", 150_000, {C1: 50_000, C2: 100_000}, True),
    ],
)  # fmt: skip
def test_burst_allowance(
    node_enabled: bool,
    percent: int,
    annotations: dict[str, str],
    source: str,
    pod: int | None,
    containers: dict[str, int],
    warns: bool,
) -> None:
    plan = plan_burst(CpuBurstConfig(enabled=node_enabled, burst_percent=percent), burst_pod(annotations))
    assert (plan.source, plan.pod_burst_us, plan.container_bursts_us) == (source, pod, containers)
    assert (plan.warning is not None) == warns


def test_burst_only_for_online_pods_with_quotas() -> None:
    cfg = CpuBurstConfig(enabled=True)
    assert plan_burst(cfg, burst_pod({ENABLE_ANNOTATION: "true"}, online=False)).source == "off"
    unlimited = BurstInputs(True, {}, None, {C1: None, C2: 40_000})
    plan = plan_burst(cfg, unlimited)
    assert plan.container_bursts_us == {C2: 40_000} and plan.pod_burst_us is None
    # the pod's burst never exceeds its own quota (the kernel refuses it)
    tight = BurstInputs(True, {}, 60_000, {C1: 50_000, C2: 50_000})
    assert plan_burst(cfg, tight).pod_burst_us == 60_000


def test_parse_bool_is_gos() -> None:
    assert [parse_bool(v) for v in ("1", "t", "TRUE", "True", "0", "f", "FALSE", "False")] == [True] * 4 + [False] * 4
    assert [parse_bool(v) for v in ("yes", "tRUE", "", " true")] == [None] * 4


def test_burst_percent_is_bounded_by_the_kernel_rule() -> None:
    for bad in ("0", "101"):
        with pytest.raises(ConfigError, match=r"qos\.cpu_burst\.burst_percent"):
            load_config([], {"COLO_QOS__CPU_BURST__BURST_PERCENT": bad})
    cfg = load_config([], {})
    assert not cfg.qos.cpu_burst.enabled and not cfg.qos.quota_burst.enabled and not cfg.qos.memory.enabled
    assert (cfg.qos.cpu_burst.burst_percent, cfg.qos.quota_burst.max_quota_burst_percent) == (100, 300)


# -- dynamic quota burst -----------------------------------------------------------------------------
QB = QuotaBurstConfig(enabled=True)  # 300% max, 25% steps, ratio 0.1, safe 0.6, restore after 30 s


def node(busy: float, cpus: float = 8, suppressed: bool = False, evicting: bool = False) -> NodeCpu:
    return NodeCpu(cpus, busy, suppressed, evicting)


def ctr(quota: int, ratio: float, usage: float, own: int = 100_000, cgroup: str = C1) -> CpuRow:
    return (cgroup, POD, own, quota, 100_000, ratio, usage)


@pytest.mark.parametrize(
    ("n", "state"),
    [
        (node(1.0), "idle"),
        (node(4.4), "cooling"),  # 0.55 of 8: within 10% of the safe level 0.6
        (node(4.8), "busy"),
        (node(1.0, suppressed=True), "blocked"),
        (node(1.0, evicting=True), "blocked"),
        (node(0.0, cpus=0), "busy"),
        (NodeCpu(8, None, False, False), "busy"),  # no CPU rate yet: never read as idle
    ],
)
def test_node_state(n: NodeCpu, state: str) -> None:
    assert node_state(QB, n) == state


@pytest.mark.parametrize(
    ("n", "c", "quota", "action"),
    [
        # throttled on an idle node: one step of 25% of its own quota
        (node(1.0), ctr(100_000, 0.5, 1.0), 125_000, "raise"),
        (node(1.0), ctr(275_000, 0.5, 2.7), 300_000, "raise"),
        (node(1.0), ctr(300_000, 0.5, 3.0), 300_000, "hold"),  # at 300% of its own quota
        (node(1.0), ctr(200_000, 0.05, 1.95), 200_000, "hold"),  # throttled under the threshold
        (node(4.4), ctr(150_000, 0.5, 1.5), 150_000, "hold"),  # cooling: no more, no less
        (node(4.8), ctr(250_000, 0.5, 2.5), 100_000, "reset"),  # busy: back at once
        (node(1.0, suppressed=True), ctr(250_000, 0.5, 2.5), 100_000, "reset"),
        (node(1.0, evicting=True), ctr(250_000, 0.5, 2.5), 100_000, "reset"),
        (node(4.8), ctr(100_000, 0.5, 1.0), 100_000, "hold"),  # busy but nothing raised
        # the node's headroom bounds the step: 10 × 0.6 − 5.35 = 0.65 core, a step of a 4-core quota is 1
        (node(5.35, cpus=10), ctr(400_000, 0.5, 4.0, own=400_000), 465_000, "raise"),
        (node(5.35, cpus=10), ctr(100_000, 0.5, 1.0), 125_000, "raise"),
        # the container's first pass: no rate yet, nothing decided
        (node(1.0), (C1, POD, 100_000, 150_000, 100_000, None, None), 150_000, "hold"),
        # quiet (not throttled, under 90% of its own quota) but not yet for 30 s: held
        (node(1.0), ctr(200_000, 0.0, 0.5), 200_000, "hold"),
    ],
)
def test_quota_burst_decisions(n: NodeCpu, c: CpuRow, quota: int, action: str) -> None:
    d = plan_quota_burst(QB, n, [c], {}, {POD: 200_000}, now=100.0).containers[C1]
    assert (d.quota_us, d.action) == (quota, action), d.reason


def test_headroom_goes_to_the_most_throttled_first() -> None:
    n = NodeCpu(10.0, 5.35, False, False)  # idle (cooling from 5.4); 0.65 core under the safe level
    a = ctr(400_000, 0.9, 4.0, own=400_000, cgroup=C1)
    b = ctr(400_000, 0.4, 4.0, own=400_000, cgroup=C2)
    plan = plan_quota_burst(QB, n, [b, a], {}, {POD: 800_000}, 0.0)
    assert plan.headroom_cores == pytest.approx(0.65)
    assert (plan.containers[C1].quota_us, plan.containers[C1].action) == (465_000, "raise")
    assert (plan.containers[C2].quota_us, plan.containers[C2].action) == (400_000, "hold")
    assert plan.pods == {POD: 865_000}  # the pod's own quota plus its containers' raises
    # with room for both, both step
    plan = plan_quota_burst(QB, node(1.0, cpus=10), [b, a], {}, {POD: 800_000}, 0.0)
    assert plan.containers[C1].quota_us == plan.containers[C2].quota_us == 500_000
    assert plan.pods == {POD: 1_000_000}


def test_quota_burst_walks_up_and_back() -> None:
    """A whole episode, pass by pass: raised step by step, held while used, restored after a quiet spell,
    reset at once when the node gets busy."""
    idle = node(1.0)
    quota, quiet = 100_000, QuietSince()
    seen = []
    for t in range(10):  # throttled: 125, 150, ... up to 300 and no further
        plan = plan_quota_burst(QB, idle, [ctr(quota, 0.6, quota / 100_000)], {C1: quiet}, {POD: 100_000}, float(t))
        quota, quiet = plan.containers[C1].quota_us, plan.quiet[C1]
        seen.append(quota)
        assert plan.pods[POD] == quota  # single-container pod: the pod's quota follows
    assert seen == [125_000, 150_000, 175_000, 200_000, 225_000, 250_000, 275_000, 300_000, 300_000, 300_000]
    # not throttled any more but using more than its own quota: held
    plan = plan_quota_burst(QB, idle, [ctr(quota, 0.0, 2.0)], {C1: quiet}, {}, 20.0)
    assert plan.containers[C1].action == "hold" and plan.quiet[C1].at is None
    # quiet within its own quota: restored only after 30 s of it
    for at, expect in ((21.0, 300_000), (40.0, 300_000), (51.0, 100_000)):
        plan = plan_quota_burst(QB, idle, [ctr(quota, 0.0, 0.5)], {C1: quiet}, {}, at)
        quota, quiet = plan.containers[C1].quota_us, plan.quiet[C1]
        assert quota == expect, at
    assert plan.containers[C1].action == "restore"
    # throttled again, then the node turns busy: back to its own quota in one pass
    for t in range(3):
        quota = plan_quota_burst(QB, idle, [ctr(quota, 0.6, 1.0)], {}, {}, 60.0 + t).containers[C1].quota_us
    assert quota == 175_000
    d = plan_quota_burst(QB, node(6.0), [ctr(quota, 0.6, 1.7)], {}, {}, 70.0).containers[C1]
    assert (d.quota_us, d.action) == (100_000, "reset")


def test_unlimited_pod_stays_unlimited() -> None:
    plan = plan_quota_burst(QB, node(1.0), [ctr(100_000, 0.6, 1.0)], {}, {POD: None}, 0.0)
    assert plan.containers[C1].quota_us == 125_000 and plan.pods == {}


# -- memory QoS --------------------------------------------------------------------------------------
TIERS = ("/kubepods/burstable", "/kubepods")


def mem_pod(online: bool = True, cgroup: str = POD, c1: str = C1, c2: str = C2) -> PodSample:
    ctrs = [Ctr(c1, memory=(256 * MIB, 512 * MIB)), Ctr(c2, memory=(100 * MIB + 123, 200 * MIB))]
    return online_pod(cgroup.rsplit("/", 1)[1], cgroup, ctrs, cls="online" if online else "offline")


def test_memory_qos_v1_reports_unsupported() -> None:
    report, targets = memory_targets(MemoryQosConfig(enabled=True), False, [mem_pod()])
    assert not report["supported"] and "cgroup v2" in report["reason"] and not targets
    assert memory_targets(MemoryQosConfig(), True, [mem_pod()])[1] == {}
    assert supported(MemoryQosConfig(), True) == (True, "disabled")


@pytest.mark.parametrize(
    ("cfg", "c1", "c2", "pod", "tier"),
    [
        # memory.low from the request (page-aligned), no memory.high by default
        (MemoryQosConfig(enabled=True), MemoryTarget(0, 256 * MIB, None), MemoryTarget(0, 100 * MIB, None),
         MemoryTarget(0, 356 * MIB, None), MemoryTarget(0, 356 * MIB, None)),
        (MemoryQosConfig(enabled=True, protection="min", protect_percent=50),
         MemoryTarget(128 * MIB, 0, None), MemoryTarget(50 * MIB, 0, None),
         MemoryTarget(178 * MIB, 0, None), MemoryTarget(178 * MIB, 0, None)),
        # memory.high from the limit, never below what is protected; the pod's from its containers' limits
        (MemoryQosConfig(enabled=True, high_percent=80),
         MemoryTarget(0, 256 * MIB, 512 * MIB * 8 // 10 // 4096 * 4096), MemoryTarget(0, 100 * MIB, 160 * MIB),
         MemoryTarget(0, 356 * MIB, 712 * MIB * 8 // 10 // 4096 * 4096), MemoryTarget(0, 356 * MIB, None)),
        (MemoryQosConfig(enabled=True, high_percent=40),
         MemoryTarget(0, 256 * MIB, 256 * MIB), MemoryTarget(0, 100 * MIB, 100 * MIB),
         MemoryTarget(0, 356 * MIB, 356 * MIB), MemoryTarget(0, 356 * MIB, None)),
        (MemoryQosConfig(enabled=True, protection="none", high_percent=100),
         MemoryTarget(0, 0, 512 * MIB), MemoryTarget(0, 0, 200 * MIB),
         MemoryTarget(0, 0, 712 * MIB), MemoryTarget(0, 0, None)),
    ],
)  # fmt: skip
def test_memory_qos_targets(
    cfg: MemoryQosConfig, c1: MemoryTarget, c2: MemoryTarget, pod: MemoryTarget, tier: MemoryTarget
) -> None:
    offline = mem_pod(
        False, "/kubepods/besteffort/podB", "/kubepods/besteffort/podB/c1", "/kubepods/besteffort/podB/c2"
    )
    report, targets = memory_targets(cfg, True, [mem_pod(), offline])
    assert report["supported"]
    assert targets[C1] == c1 and targets[C2] == c2 and targets[POD] == pod
    if cfg.protection == "none":  # nothing protected: the cgroups above pods are asked for nothing
        assert "/kubepods/burstable" not in targets and "/kubepods" not in targets
    else:
        assert targets["/kubepods/burstable"] == tier and targets["/kubepods"] == tier
    assert not any(k.startswith("/kubepods/besteffort/") for k in targets)  # offline pods keep theirs


def test_memory_protection_sums_up_the_tree_and_caps_at_limits() -> None:
    other = online_pod("podG", "/kubepods/podG", [Ctr("/kubepods/podG/c", memory=(1 << 30, None))],
                       memory_limit_bytes=64 * MIB)  # fmt: skip
    _, targets = memory_targets(MemoryQosConfig(enabled=True), True, [mem_pod(), other])
    assert targets["/kubepods/podG/c"].low_bytes == 1 << 30  # no container limit: the request
    assert targets["/kubepods/podG"].low_bytes == 64 * MIB  # capped at the pod's own limit
    assert targets["/kubepods/burstable"].low_bytes == 356 * MIB
    assert targets["/kubepods"].low_bytes == 356 * MIB + 64 * MIB
