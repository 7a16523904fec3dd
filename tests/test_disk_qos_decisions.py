"""Disk QoS decisions as pure functions (no I/O): the split of a device's budget, its tightening and release
with hysteresis, the devices chosen, the plan's writes on v1 and v2, and the parsers of the kernel's files."""

from __future__ import annotations

import time

import pytest

from agent.config import AgentConfig
from agent.config_sections.enforcement import DiskQosConfig
from agent.enforce.actions import Recorded, Restore
from agent.enforce.ledger import Touched
from agent.enforce.parts.disk import SetIoLimits
from agent.enforce.strategies.cpu_suppression import OfflineCpu
from agent.enforce.strategies.disk_qos import (
    DiskMemo,
    DiskQos,
    chosen_devices,
    per_container,
    pressure,
    split_limits,
    step,
)
from agent.node_state import NodeState, node_state
from agent.sense.collectors.disk import parse_diskstats
from agent.snapshot import ContainerSample, DiskRates, DiskSample, NodeSample, PodMeta, PodSample, Snapshot
from cgroup.blkio import IoCounters, IoLimit, _parse_v1_stat, parse_io_max, parse_io_stat

MIB = 1 << 20
CFG = DiskQosConfig(enabled=True, write_bps=100 * MIB, read_iops=1000, min_pod_bps=MIB, min_pod_iops=10)


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        # by request: 3:1
        ([OfflineCpu("a", 3.0, None), OfflineCpu("b", 1.0, None)],
         {"a": IoLimit(None, 75 * MIB, 750, None), "b": IoLimit(None, 25 * MIB, 250, None)}),
        # a best-effort pod shares besteffort_share (0.1) of it; a CPU limit does not cap the disk
        ([OfflineCpu("a", 1.0, 0.5), OfflineCpu("be", 0.0, None)],
         {"a": IoLimit(None, 90 * MIB, 900, None), "be": IoLimit(None, 10 * MIB, 100, None)}),
        # a tiny share keeps the floor
        ([OfflineCpu("a", 999.0, None), OfflineCpu("b", 0.001, None)],
         {"a": IoLimit(None, int(100 * MIB * 999 / 999.001), 999, None), "b": IoLimit(None, MIB, 10, None)}),
    ],
)  # fmt: skip
def test_a_device_budget_is_split_like_the_cpu_budget(pods: list[OfflineCpu], expected: dict[str, IoLimit]) -> None:
    assert split_limits((0, 100 * MIB, 1000, 0), pods, 0.1, CFG) == expected


@pytest.mark.parametrize(
    ("busy", "online", "online_bps", "expected"),
    [
        (None, 0.0, 0, None),  # unknown: nothing decided
        (0.4, 0.0, 0, 0.5),  # busy / busy_ratio (0.8)
        (0.4, 90 * MIB, 0, 0.5),  # online use ignored while online_bps is 0
        (0.4, 90 * MIB, 60 * MIB, 1.5),  # online use above its threshold
        (0.96, 10 * MIB, 60 * MIB, 1.2),
    ],
)
def test_pressure_is_one_at_the_tighter_threshold(
    busy: float | None, online: float, online_bps: int, expected: float | None
) -> None:
    got = pressure(busy, online, DiskQosConfig(online_bps=online_bps))
    assert got == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize(
    ("loads", "expected"),
    [
        ([0.5, 0.5], [True, True]),  # quiet: the full budget
        ([1.5, 0.5, 1.5], [True, True, True]),  # a one-pass spike changes nothing
        ([1.5, 1.5, 0.95, 0.5, 0.5], [True, False, False, False, True]),  # tightened on the 2nd; 0.95: in the band
        ([1.5, 1.5, None, 0.5, 0.5], [True, False, False, False, True]),  # unknown: the state stands
        ([0.95, 0.95, 0.95], [True, True, True]),  # in the band (0.9-1.0): neither tightened nor released
    ],
)
def test_a_device_is_tightened_and_released_with_hysteresis(loads: list[float | None], expected: list[bool]) -> None:
    memo, got = DiskMemo(), []
    for load in loads:
        free, kept = step(memo, "8:0", load, 2)
        memo = DiskMemo({"8:0": free}, {"8:0": kept})
        got.append(free)
    assert got == expected


def test_loop_ram_and_zram_devices_are_skipped_unless_included() -> None:
    rates = DiskRates(0.0, 0.0, 0.0, 0.0)
    disks = [DiskSample(n, f"7:{i}", 0.0, rates) for i, n in enumerate(("vda", "loop3", "zram0", "ram1", "nvme0n1"))]
    assert [d.name for d in chosen_devices(disks, ())] == ["vda", "nvme0n1"]
    assert [d.name for d in chosen_devices(disks, ("loop3",))] == ["vda", "loop3", "nvme0n1"]


def test_a_v1_pods_share_is_split_among_its_containers() -> None:
    assert per_container(IoLimit(None, 10, 3, None), 2) == IoLimit(None, 5, 1, None)
    assert per_container(IoLimit(None, 10, 1, None), 4) == IoLimit(None, 2, 1, None)  # never 0: 0 removes a rule
    assert per_container(IoLimit(1, 2, 3, 4), 1) == IoLimit(1, 2, 3, 4)


def _pod(uid: str, cls: str, containers: int, disk: dict[str, DiskRates] | None = None) -> PodSample:
    meta = PodMeta(uid, "ns", uid, cls, cpu_request_cores=1.0)  # type: ignore[arg-type]
    ctrs = tuple(ContainerSample(f"c{i}", f"/kubepods/pod{uid}/c{i}", 0.1, 0, 0, 0, 0.0) for i in range(containers))
    return PodSample(meta, "burstable", f"/kubepods/pod{uid}", 0.1, 0, 0, 0, 0, 0.0, ctrs, disk=disk)


def _state(busy: float | None, *pods: PodSample) -> NodeState:
    disk = DiskSample("vda", "253:0", busy, DiskRates(0.0, 0.0, 0.0, 0.0))
    snap = Snapshot(1, time.monotonic(), 0.0, NodeSample(2.0, 1.0, 8 << 30, 1 << 30, 0), {},
                    {p.uid: p for p in pods}, (), 0.0, disks=(disk,))  # fmt: skip
    return node_state(snap, (2.0, 8 << 30))


def test_the_plan_writes_pods_on_v2_and_containers_too_on_v1_and_tightens_on_a_busy_device() -> None:
    cfg = DiskQosConfig(enabled=True, write_bps=100 * MIB, tightened_share=0.5)
    offline, online = _pod("a", "offline", 2), _pod("b", "online", 1)
    v2 = DiskQos(cfg, 0.1, is_v2=True).plan(_state(0.1, offline, online), Recorded({}, {}))
    wanted = SetIoLimits(offline.cgroup, (("253:0", IoLimit(wbps=100 * MIB)),), "disk", "a", ("wbps",))
    assert v2.actions == (wanted,)  # only the limit the budget has: the others are left as they are
    v1 = DiskQos(cfg, 0.1, is_v2=False)
    plan = v1.plan(_state(0.1, offline, online), Recorded({}, {}))
    half = (("253:0", IoLimit(wbps=50 * MIB)),)
    assert [a.cgroup for a in plan.actions] == [offline.cgroup, *(c.cgroup for c in offline.containers)]
    assert all(a.limits == half for a in plan.actions[1:])  # type: ignore[union-attr]
    memo = plan.memo
    for _ in range(2):  # busy on two passes in a row: half the budget
        plan = v1.plan(_state(0.95, offline, online), Recorded({}, {}, memo))
        memo = plan.memo
    assert plan.actions[0].limits == (("253:0", IoLimit(wbps=50 * MIB)),)  # type: ignore[union-attr]
    assert plan.report.fields()["offline_disk"]["devices"]["vda"]["tightened"] is True


def test_online_disk_use_tightens_the_device() -> None:
    cfg = DiskQosConfig(enabled=True, write_bps=100 * MIB, tightened_share=0.25, online_bps=10 * MIB, confirm_passes=1)
    heavy = {"253:0": DiskRates(0.0, 20.0 * MIB, 0.0, 100.0)}
    plan = DiskQos(cfg, 0.1, True).plan(_state(0.1, _pod("a", "offline", 1), _pod("b", "online", 1, heavy)),
                                        Recorded({}, {}))  # fmt: skip
    assert plan.actions[0].limits == (("253:0", IoLimit(wbps=25 * MIB)),)  # type: ignore[union-attr]


def test_switched_off_it_puts_back_what_it_wrote() -> None:
    held, other = Touched("a", "/kubepods/poda", 2, None, 100_000), Touched("b", "/kubepods/podb", 2, None, 100_000)
    held.parts["disk"] = {"/kubepods/poda": {"253:0": {"wbps": None}}}
    plan = DiskQos(DiskQosConfig(), 0.1, True).plan(_state(0.1), Recorded({"a": held, "b": other}, {}))
    assert plan.actions == (Restore("a", frozenset({"disk"})),)
    assert plan.report.fields() == {"offline_disk": {"enabled": False, "devices": {}, "pods": {}}}


def test_disk_qos_switches_its_collectors_on_and_refuses_them_off() -> None:
    on = AgentConfig.model_validate({"enforcement": {"disk": {"enabled": True}}})
    assert {"disk", "disk_devices"} <= on.collectors.enabled()
    assert not {"disk", "disk_devices"} & AgentConfig().collectors.enabled()  # off by default
    with pytest.raises(ValueError, match=r"needs collectors\.disk_devices"):
        AgentConfig.model_validate({"enforcement": {"disk": {"enabled": True}}, "collectors": {"disk_devices": False}})


def test_the_kernels_files_parse() -> None:
    assert parse_io_max("io.max", b"8:0 rbps=max wbps=1048576 riops=max wiops=200\n") == {
        "8:0": IoLimit(None, MIB, None, 200)
    }
    v1 = b"7:0 Read 4096\n7:0 Write 31457280\n7:0 Sync 0\n7:0 Async 0\n7:0 Discard 0\n7:0 Total 31461376\nTotal 3\n"
    assert _parse_v1_stat("bytes", v1) == {"7:0": (4096, 31457280)}
    stat = b"253:0 rbytes=1024 wbytes=2048 rios=1 wios=2 dbytes=0 dios=0\n"
    assert parse_io_stat("io.stat", stat) == {"253:0": IoCounters(1024, 2048, 1, 2)}
    line = "   7       0 loop0 3 0 24 1 60 0 61440 27 0 25 28 0 0 0 0 0 0\n"  # io_ticks: the 10th counter
    assert parse_diskstats(line) == {"loop0": ("7:0", (24 * 512, 61440 * 512, 3, 60), 25)}
