"""The pass's node state: every derived quantity in one place, as pure functions of one snapshot."""

from __future__ import annotations

import pytest

from agent.node_state import StateBuilder, node_state, watermark_usage
from agent.snapshot import ContainerBatch, PodBatch, PodMeta, PodSample
from cgroup.kubelet_rules import BatchResources
from tests.test_capacity import GI, sample, snapshot


@pytest.mark.parametrize(
    ("node_cpu", "alloc", "cpu_system", "cpu_alloc", "ratio", "percent"),
    [
        # 8 cores; online pods use 2.0 + 0.5 (unknown class counts online), offline 1.0; node 4.5 busy
        (4.5, (8.0, 32 * GI), 1.0, 8.0, (2.5 + 1.0) / 8.0, 4.5 / 8.0 * 100),
        # pods measured above the node (rounding between reads): system floors at 0
        (3.0, (8.0, 32 * GI), 0.0, 8.0, 2.5 / 8.0, 3.0 / 8.0 * 100),
        # no Node allocatable (standalone, or not seen yet) or a zero one: the machine's capacity stands in
        (4.5, (None, None), 1.0, 8.0, 3.5 / 8.0, 4.5 / 8.0 * 100),
        (4.5, (0.0, 0.0), 1.0, 8.0, 3.5 / 8.0, 4.5 / 8.0 * 100),
        (4.5, (4.0, 16 * GI), 1.0, 4.0, 3.5 / 4.0, 4.5 / 4.0 * 100),
    ],
)
def test_cpu_usage_split(
    node_cpu: float,
    alloc: tuple[float | None, float | None],
    cpu_system: float,
    cpu_alloc: float,
    ratio: float,
    percent: float,
) -> None:
    pods = [sample("web", "online", 1, GI, 2.0, 4 * GI), sample("x", "unknown", 0, 0, 0.5, GI),
            sample("batch", "offline", 1, GI, 1.0, 2 * GI)]  # fmt: skip
    state = node_state(snapshot(pods, node_cpu, 10 * GI, 1000.0), alloc)
    assert (state.cpu.online, state.cpu.offline, state.cpu.pods) == (2.5, 1.0, 3.5)
    assert state.cpu.system == pytest.approx(cpu_system) and state.cpu.allocatable == cpu_alloc
    assert state.cpu.online_and_system_ratio() == pytest.approx(ratio)
    assert state.cpu.percent() == pytest.approx(percent)
    assert [p.uid for p in state.online] == ["web", "x"] and [p.uid for p in state.offline] == ["batch"]
    assert state.memory.system == 3 * GI and state.memory.online == 5 * GI
    assert state.allocatable_from_node == bool(alloc[0])


def test_unknown_cpu_is_never_idle() -> None:
    """The first pass after a start: no rate yet. Nothing derived from it may read as a quiet node."""
    pod = sample("web", "online", 1, GI, 0.0, GI)
    pod.cpu_cores = None
    snap = snapshot([pod], 0.0, 2 * GI, 1000.0)
    snap = type(snap)(snap.seq, snap.mono, snap.wall, type(snap.node)(8.0, None, 32 * GI, 2 * GI, 0), {},
                      snap.pods, (), 0.0)  # fmt: skip
    state = node_state(snap, (8.0, 32 * GI))
    assert not state.cpu.known and state.cpu.system is None
    assert state.cpu.online_and_system_ratio() is None and state.cpu.percent() is None
    assert state.memory.known and state.memory.percent() == pytest.approx(100 * 2 / 32)


def test_the_builder_smooths_usage_over_passes_and_keeps_unknown_out() -> None:
    """Eviction compares the smoothed percentage: one spike does not decide, an unknown CPU adds nothing."""
    builder = StateBuilder(smoothing_seconds=5.0)
    pods = [sample("web", "online", 1, GI, 1.0, GI)]
    percents = []
    for t, node_cpu in ((1000.0, 2.0), (1001.0, 2.0), (1002.0, 6.0)):  # 25%, 25%, then a 75% spike
        percents.append(builder.build(snapshot(pods, node_cpu, 8 * GI, t), (8.0, 32 * GI)).smoothed_percent["cpu"])
    assert percents == pytest.approx([25.0, 25.0, (25 + 25 + 75) / 3])
    later = builder.build(snapshot(pods, 2.0, 8 * GI, 1010.0), (8.0, 32 * GI))  # the window moved on
    assert later.smoothed_percent["cpu"] == pytest.approx(25.0)
    assert later.smoothed_percent["memory"] == pytest.approx(25.0)
    snap = snapshot(pods, 0.0, 8 * GI, 1011.0)
    unknown = type(snap)(snap.seq, snap.mono, snap.wall, type(snap.node)(8.0, None, 32 * GI, 8 * GI, 0), {},
                         snap.pods, (), 0.0)  # fmt: skip
    assert "cpu" not in builder.build(unknown, (8.0, 32 * GI)).smoothed_percent


def test_the_builder_carries_what_protection_did() -> None:
    """Evicting and offline suppression (the previous pass's) are in the record: online QoS reads them there."""
    builder = StateBuilder(smoothing_seconds=5.0)
    snap = snapshot([sample("a", "online", 1, GI, 0.5, GI)], 1.0, 4 * GI, 100.0)
    plain = builder.build(snap, (8.0, 32 * GI))
    assert (plain.evicting, plain.offline_suppressed) == (False, False)
    state = builder.build(snap, (8.0, 32 * GI), evicting=True, offline_suppressed=True)
    assert (state.evicting, state.offline_suppressed) == (True, True)


def test_the_watermarks_count_batch_cpu_above_its_batch_request_and_all_offline_memory() -> None:
    """Batch CPU within its kubernetes.io/batch-cpu request is what the node lent (given back by CFS weights and
    the budget): not counted; above it, counted; an offline pod's own cpu request is no loan: counted whole.
    Memory is counted whole: given back only by eviction."""
    pods = [sample("web", "online", 1, GI, 2.0, 4 * GI), batch_sample("within", 1500, 1.0, 2 * GI),
            batch_sample("above", 500, 2.0, 2 * GI), sample("plain", "offline", 1, GI, 0.5, GI)]  # fmt: skip
    state = node_state(snapshot(pods, 6.0, 10 * GI, 1000.0), (8.0, 32 * GI))
    assert state.cpu.offline_lent == pytest.approx(1.0 + 0.5)
    assert state.cpu.percent() == pytest.approx((6.0 - 1.5) / 8.0 * 100)  # 2.0 + 0.5 system + 1.5 + 0.5 plain
    assert state.memory.percent() == pytest.approx(10 / 32 * 100)
    assert [watermark_usage(p, "cpu") for p in state.offline] == pytest.approx([0.0, 1.5, 0.5])
    assert [watermark_usage(p, "memory") for p in state.offline] == [2 * GI, 2 * GI, GI]


def batch_sample(uid: str, cpu_request_milli: int, cpu: float, memory: int) -> PodSample:
    batch = PodBatch((ContainerBatch("main", None, BatchResources(cpu_request=cpu_request_milli)),))
    meta = PodMeta(uid, "ns", uid, "offline", batch=batch)
    return PodSample(meta, "besteffort", f"/kubepods/besteffort/pod{uid}", cpu, memory, memory, memory, 0, 0.0, ())
