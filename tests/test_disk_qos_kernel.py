"""Disk QoS on the real cgroup v1 kernel: a loop device the test attaches (and detaches), an offline and an
online pod cgroup, `dd oflag=direct` into the device from inside each. The offline pod is held near the
budget the enforcer wrote (a ratio bound with generous slack, measured by dd itself), the online one is not;
the disk collectors count what dd wrote; every rule goes back when the pod turns online and at shutdown."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.config import AgentConfig
from agent.config_sections.enforcement import EnforcementConfig
from agent.enforce.stage import Enforcer, detect_facts
from agent.enforce.strategies.registry import strategies
from agent.sense.sampler import CgroupPodSource, Sampler
from agent.snapshot import ContainerSample, DiskRates, DiskSample, NodeSample, PodMeta, PodSample, Snapshot
from agent.windows.store import WindowStore
from cgroup import CgroupReader
from cgroup.blkio import NO_LIMIT, IoLimit, io_limits
from testsupport.cgtree import v1_available
from testsupport.disk import MIB, DiskTree, dd, loop_device

pytestmark = [
    pytest.mark.cgroupv1,
    pytest.mark.skipif(not v1_available() or shutil.which("losetup") is None, reason="needs root, v1 and losetup"),
]

LIMIT = 4 * MIB  # the offline pods' write budget on the loop device


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[tuple[str, str]]:
    with loop_device(str(tmp_path)) as dev:
        yield dev


@pytest.fixture
def tree() -> Iterator[DiskTree]:
    t = DiskTree("cgroupfs")
    if "blkio" not in t.layout.v1:
        pytest.skip("no v1 blkio hierarchy")
    try:
        yield t
    finally:
        t.cleanup()


def pod(uid: str, cls: str, path: str, ctr: str) -> PodSample:
    meta = PodMeta(uid, "default", uid, cls, cpu_request_cores=0.5)  # type: ignore[arg-type]
    return PodSample(
        meta, "burstable", path, 0.1, 0, 0, 0, 0, 0.0, (ContainerSample(ctr[-64:], ctr, 0.1, 0, 0, 0, 0.0),)
    )


def snapshot(name: str, majmin: str, *pods: PodSample) -> Snapshot:
    disk = DiskSample(name, majmin, 0.1, DiskRates(0.0, 0.0, 0.0, 0.0))  # a quiet device: the full budget
    node = NodeSample(2.0, 1.5, 8 << 30, 1 << 30, 0)
    return Snapshot(1, time.monotonic(), time.time(), node, {}, {p.uid: p for p in pods}, (), 0.0, disks=(disk,))


def test_an_offline_pod_is_held_to_its_disk_budget_and_an_online_one_is_not(
    tree: DiskTree, loop: tuple[str, str], tmp_path: Path
) -> None:
    device, majmin = loop
    name = os.path.basename(device)
    off_uid, off_pod, (off_ctr,) = tree.pod("burstable")
    on_uid, on_pod, (on_ctr,) = tree.pod("burstable")
    config = AgentConfig(enforcement=EnforcementConfig(
        ledger_file=str(tmp_path / "ledger.json"),
        disk={"enabled": True, "write_bps": LIMIT, "include_devices": (name,)},  # type: ignore[arg-type]
    ))  # fmt: skip
    reader = CgroupReader(tree.layout)
    chosen = strategies(config, detect_facts(tree.layout, tree.model, reader))
    enf = Enforcer(tree.layout, tree.model, reader, config.enforcement, lambda: (2.0, 8 << 30), registered=chosen)
    offline, online = pod(off_uid, "offline", off_pod, off_ctr), pod(on_uid, "online", on_pod, on_ctr)
    try:
        enf.on_snapshot(snapshot(name, majmin, offline, online))
        assert enf.errors == 0, enf.last_error
        held = IoLimit(wbps=LIMIT)
        assert io_limits(reader, off_ctr)[majmin] == held and io_limits(reader, off_pod)[majmin] == held
        assert io_limits(reader, on_ctr) == {} and io_limits(reader, on_pod) == {}

        throttled = dd(tree, off_ctr, device, 12, 0)
        free = dd(tree, on_ctr, device, 12, 64)
        # dd's own rate: near the limit (the kernel lets a first slice through), and the online pod well above
        assert 0.5 * LIMIT <= throttled <= 1.5 * LIMIT, throttled / MIB
        assert free >= 2 * throttled, (free / MIB, throttled / MIB)

        # the pod turns online: its rules go (v1 removes a rule with 0)
        now_online = pod(off_uid, "online", off_pod, off_ctr)
        enf.on_snapshot(snapshot(name, majmin, now_online, online))
        assert io_limits(reader, off_ctr).get(majmin, NO_LIMIT) == NO_LIMIT
        assert io_limits(reader, off_pod).get(majmin, NO_LIMIT) == NO_LIMIT
        # offline again, then a shutdown: back as they were
        enf.on_snapshot(snapshot(name, majmin, offline, online))
        assert io_limits(reader, off_ctr)[majmin] == held
    finally:
        enf.stop()
    assert io_limits(reader, off_ctr) == {} and io_limits(reader, off_pod) == {}
    assert enf.errors == 0, enf.last_error


def test_the_disk_collectors_count_what_a_pod_wrote(tree: DiskTree, loop: tuple[str, str]) -> None:
    device, majmin = loop
    name = os.path.basename(device)
    _, _, (ctr,) = tree.pod("burstable")
    source = CgroupPodSource(tree.layout, tree.model, 0.0)
    collectors = frozenset({"disk", "disk_devices"})
    sampler = Sampler(tree.layout, tree.model, source, WindowStore(), collectors=collectors)
    try:
        first = sampler.sample()
        dd(tree, ctr, device, 8, 0)
        snap = sampler.sample()
    finally:
        sampler.close()
    (sample,) = snap.pods.values()
    assert sample.disk is not None
    rates, seconds = sample.disk[majmin], snap.mono - first.mono
    assert rates.write_bytes_per_second is not None and rates.writes_per_second
    assert abs(rates.write_bytes_per_second * seconds - 8 * MIB) < 0.01 * 8 * MIB  # what dd wrote, no more
    disks = {d.name: d for d in snap.disks}
    assert disks[name].device == majmin
    assert (disks[name].rates.write_bytes_per_second or 0) >= rates.write_bytes_per_second * 0.99
    # a share of the pass (a loop device's io_ticks may stay 0: the kernel ticks them per jiffy of requests)
    assert disks[name].busy_ratio is not None and 0 <= disks[name].busy_ratio <= 1
