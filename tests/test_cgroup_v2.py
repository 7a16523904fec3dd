"""cgroup v2 on trees that hold the kernel's files byte for byte, for both drivers."""

from __future__ import annotations

import pytest

from cgroup import (
    CgroupGone,
    CgroupReader,
    CgroupWriter,
    PathModel,
    detect_driver,
    detect_layout,
    discover_pods,
    parse_container_id,
    resolve_pod,
    shares_to_weight,
)
from cgroup.paths import Driver
from tests.v2tree import V2Cgroup, V2Tree

CID = "4f1b2c3d" * 8


@pytest.fixture(params=["systemd", "cgroupfs"])
def tree(request: pytest.FixtureRequest, tmp_path: object) -> tuple[V2Tree, PathModel]:
    t = V2Tree(str(tmp_path))
    model = PathModel(request.param)
    return t, model


def make_pod(t: V2Tree, model: PathModel, uid: str = "1a2b3c4d-0000-1111-2222-333344445555") -> tuple[str, str]:
    for qos in ("burstable", "besteffort"):
        t.put(model.tier(qos), V2Cgroup())  # type: ignore[arg-type]
    pod = model.pod("burstable", uid)
    t.put(pod, V2Cgroup(usage_usec=5_000_000, memory_current=300 << 20))
    ctr = model.container("burstable", uid, parse_container_id(f"containerd://{CID}"))
    t.put(
        ctr,
        V2Cgroup(
            usage_usec=4_200_000,
            user_usec=4_000_000,
            system_usec=200_000,
            nr_periods=120,
            nr_throttled=30,
            throttled_usec=1_500_000,
            memory_current=200 << 20,
            memory_stat={"anon": 150 << 20, "file": 50 << 20, "inactive_file": 40 << 20, "active_file": 10 << 20},
            memory_max=512 << 20,
            cpu_max=(50000, 100000),
            cpu_weight=39,
            cpu_pressure=(1.5, 0.75, 0.25, 123456),
            memory_pressure=(0.0, 0.1, 0.02, 999),
            procs=(4242, 4243),
        ),
    )
    return pod, ctr


def test_layout_and_driver_from_tree(tree: tuple[V2Tree, PathModel]) -> None:
    t, model = tree
    make_pod(t, model)
    layout = detect_layout(t.base)
    assert layout.mode == "v2" and layout.unified is not None and layout.unified.path == t.mount
    decision = detect_driver(layout, host_root=t.base, argv=[])
    assert decision.driver == model.driver
    assert "filesystem" in decision.rule


def test_readers(tree: tuple[V2Tree, PathModel]) -> None:
    t, model = tree
    _, ctr = make_pod(t, model)
    reader = CgroupReader(t.layout)
    cpu = reader.cpu(ctr)
    assert (cpu.usage_ns, cpu.nr_periods, cpu.nr_throttled, cpu.throttled_ns) == (4_200_000_000, 120, 30, 1_500_000_000)
    mem = reader.memory(ctr)
    assert mem.usage_bytes == 200 << 20
    assert mem.working_set_bytes == 160 << 20  # usage - inactive_file
    assert (mem.anon_bytes, mem.file_bytes) == (150 << 20, 50 << 20)
    assert reader.memory_limit(ctr) == 512 << 20 and reader.memory_high(ctr) is None
    settings = reader.cpu_settings(ctr)
    assert (settings.quota_us, settings.period_us, settings.weight, settings.shares, settings.idle) == (
        50000, 100000, 39, None, False,
    )  # fmt: skip
    psi = reader.psi(ctr, "cpu")
    assert psi is not None and psi.some.avg10 == 1.5 and psi.some.total_us == 123456
    assert psi.full is not None and psi.full.avg300 == 0.25
    assert reader.procs(ctr) == [4242, 4243]
    assert reader.cpuset(ctr, effective=True) == frozenset({0, 1})


def test_working_set_floors_at_zero(tree: tuple[V2Tree, PathModel]) -> None:
    t, _ = tree
    t.put("/x", V2Cgroup(memory_current=10 << 20, memory_stat={"inactive_file": 12 << 20}))
    assert CgroupReader(t.layout).memory("/x").working_set_bytes == 0


def test_discovery(tree: tuple[V2Tree, PathModel]) -> None:
    t, model = tree
    pod, ctr = make_pod(t, model)
    t.put(model.pod("besteffort", "99999999-0000-1111-2222-333344445555"), V2Cgroup())
    pods = {p.uid: p for p in discover_pods(t.layout, model)}
    assert set(pods) == {"1a2b3c4d-0000-1111-2222-333344445555", "99999999-0000-1111-2222-333344445555"}
    found = pods["1a2b3c4d-0000-1111-2222-333344445555"]
    assert found.qos == "burstable" and found.path == pod
    assert [c.path for c in found.containers] == [ctr] and found.containers[0].id == CID
    resolved = resolve_pod(t.layout, model, found.uid, None, [parse_container_id(f"containerd://{CID}")])
    assert resolved is not None and resolved.path == found.path and resolved.qos == found.qos
    assert [(c.id, c.path) for c in resolved.containers] == [(c.id, c.path) for c in found.containers]


def test_writes_in_kernel_format(tree: tuple[V2Tree, PathModel]) -> None:
    t, model = tree
    _, ctr = make_pod(t, model)
    w = CgroupWriter(t.layout)
    w.set_cpu_quota(ctr, 25000, 100000)
    assert t.read(ctr, "cpu.max") == b"25000 100000"
    w.set_cpu_quota(ctr, None, 100000)
    assert t.read(ctr, "cpu.max") == b"max 100000"
    w.set_cpu_shares(ctr, 2)
    assert t.read(ctr, "cpu.weight") == b"1"
    w.set_cpu_shares(ctr, 1024)
    assert t.read(ctr, "cpu.weight") == str(shares_to_weight(1024)).encode() == b"39"
    w.set_cpu_weight(ctr, 10000)
    assert t.read(ctr, "cpu.weight") == b"10000"
    assert w.set_cpu_idle(ctr, True) and t.read(ctr, "cpu.idle") == b"1"
    w.set_memory_high(ctr, 100 << 20)
    assert t.read(ctr, "memory.high") == b"104857600"
    w.set_memory_high(ctr, None)
    assert t.read(ctr, "memory.high") == b"max"
    w.set_memory_limit(ctr, None)
    assert t.read(ctr, "memory.max") == b"max"
    w.set_cpuset(ctr, {0, 1, 2, 5})
    assert t.read(ctr, "cpuset.cpus") == b"0-2,5"


def test_vanished_cgroup_is_gone(tree: tuple[V2Tree, PathModel]) -> None:
    import shutil

    t, model = tree
    pod, ctr = make_pod(t, model)
    reader = CgroupReader(t.layout)
    reader.cpu(ctr)
    shutil.rmtree(t.dir(pod))
    # an open descriptor on a regular file still reads; the kernel answers ENODEV there: emulate a fresh reader
    reader.forget(ctr)
    with pytest.raises(CgroupGone):
        reader.cpu(ctr)
    with pytest.raises(CgroupGone):
        reader.psi(ctr, "memory")


@pytest.mark.parametrize("driver", ["systemd", "cgroupfs"])
def test_kubelet_config_decides_before_filesystem(tmp_path: object, driver: Driver) -> None:
    t = V2Tree(str(tmp_path))
    other: Driver = "cgroupfs" if driver == "systemd" else "systemd"
    t.put(PathModel(other).kubepods(), V2Cgroup())
    import os

    os.makedirs(f"{t.base}/var/lib/kubelet")
    with open(f"{t.base}/var/lib/kubelet/config.yaml", "w") as f:
        f.write(f"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: {driver}\n")
    decision = detect_driver(t.layout, host_root=t.base, argv=[])
    assert decision.driver == driver and "config.yaml" in decision.rule
