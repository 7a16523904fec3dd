"""Disk QoS on a real cgroup v2 kernel (the UML guest, whose block device ubda is a sparse file on the host):
the offline pod's io.max is written on the pod cgroup (v2 throttles the subtree), a `dd oflag=direct` from
its container is held near the limit and an online pod's is not; io.max goes back at shutdown. The guest's
kernel has no io.weight (neither BFQ group scheduling nor io.cost), so only io.max is exercised."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.config import AgentConfig
from agent.config_sections.enforcement import EnforcementConfig
from agent.enforce.stage import Enforcer, detect_facts
from agent.enforce.strategies.registry import strategies
from agent.snapshot import ContainerSample, DiskRates, DiskSample, NodeSample, PodMeta, PodSample, Snapshot
from cgroup import CgroupReader
from cgroup.blkio import IoLimit, io_limits
from testsupport.disk import MIB, dd_in

pytest.importorskip("tests.v2kernel.v2real", reason="the cgroup v2 kernel tier is not merged")
from tests.v2kernel.v2real import V2Tree

pytestmark = pytest.mark.v2kernel
LIMIT = 2 * MIB
DEVICE = "ubda"


@contextlib.contextmanager
def guest_disk() -> Iterator[tuple[str, str]]:
    """(device node, 'MAJ:MIN') of the guest's ubda, from a devtmpfs of the guest's own when /dev lacks it."""
    if not os.path.exists(f"/sys/block/{DEVICE}/dev"):
        pytest.skip("the guest has no block device ubda")
    majmin = Path(f"/sys/block/{DEVICE}/dev").read_text().strip()
    node = f"/dev/{DEVICE}"
    if os.path.exists(node) and stat.S_ISBLK(os.stat(node).st_mode):
        yield node, majmin
        return
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["mount", "-t", "devtmpfs", "devtmpfs", d], check=True)
        try:
            yield f"{d}/{DEVICE}", majmin
        finally:
            subprocess.run(["umount", d], check=False)


def sample(uid: str, cls: str, path: str, ctr: str) -> PodSample:
    meta = PodMeta(uid, "default", uid, cls, cpu_request_cores=0.5)  # type: ignore[arg-type]
    return PodSample(
        meta, "burstable", path, 0.1, 0, 0, 0, 0, 0.0, (ContainerSample("c" + uid, ctr, 0.1, 0, 0, 0, 0.0),)
    )


def test_io_max_holds_an_offline_pod_and_goes_back(v2tree_systemd: V2Tree) -> None:
    tree = v2tree_systemd
    with guest_disk() as (node, majmin):
        off_uid, off_pod, (off_ctr,) = tree.pod("burstable")
        on_uid, on_pod, (on_ctr,) = tree.pod("burstable")
        qos = {"enabled": True, "write_bps": LIMIT, "include_devices": (DEVICE,)}
        config = AgentConfig(enforcement=EnforcementConfig(ledger_file="", disk=qos))  # type: ignore[arg-type]
        reader = CgroupReader(tree.layout)
        enf = Enforcer(tree.layout, tree.model, reader, config.enforcement, lambda: (2.0, 1 << 30),
                       registered=strategies(config, detect_facts(tree.layout, tree.model, reader)))  # fmt: skip
        pods = {off_uid: sample(off_uid, "offline", off_pod, off_ctr), on_uid: sample(on_uid, "online", on_pod, on_ctr)}
        disk = DiskSample(DEVICE, majmin, 0.1, DiskRates(0.0, 0.0, 0.0, 0.0))
        snap = Snapshot(1, time.monotonic(), time.time(), NodeSample(1.0, 0.5, 1 << 30, 1 << 28, 0), {}, pods, (),
                        0.0, disks=(disk,))  # fmt: skip
        try:
            enf.on_snapshot(snap)
            assert enf.errors == 0, enf.last_error
            assert tree.read(off_pod, "io.max") == f"{majmin} rbps=max wbps={LIMIT} riops=max wiops=max"
            assert io_limits(reader, off_pod)[majmin] == IoLimit(wbps=LIMIT) and tree.read(off_ctr, "io.max") == ""
            held = dd_in([f"{tree.dir(off_ctr)}/cgroup.procs"], node, 6, 0)
            free = dd_in([f"{tree.dir(on_ctr)}/cgroup.procs"], node, 6, 32)
            assert 0.5 * LIMIT <= held <= 1.5 * LIMIT, held / MIB
            assert free >= 2 * held, (free / MIB, held / MIB)
        finally:
            enf.stop()
        assert tree.read(off_pod, "io.max") == "" and enf.errors == 0, enf.last_error
