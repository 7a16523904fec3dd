"""cgroup v2 on trees that hold the kernel's files byte for byte, for what the UML guest of tests/v2kernel
cannot show: PSI, the cpuset controller, kubelet's config file. Everything else runs on a real v2 kernel."""

from __future__ import annotations

import pytest

from cgroup import (
    CgroupReader,
    CgroupWriter,
    PathModel,
    PsiReading,
    detect_driver,
    parse_container_id,
)
from cgroup.paths import Driver
from testsupport.v2tree import V2Cgroup, V2Tree

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


def test_psi_and_cpuset_readers(tree: tuple[V2Tree, PathModel]) -> None:
    """What the UML guest's kernel lacks (PSI, the cpuset controller); the rest is read from a real v2
    kernel in tests/v2kernel."""
    t, model = tree
    _, ctr = make_pod(t, model)
    reader = CgroupReader(t.layout)
    assert reader.psi(ctr, "cpu") == PsiReading((1.5, 1.5), 123456)
    assert reader.psi(ctr, "memory") == PsiReading((0.0, 0.0), 999)
    assert reader.cpuset(ctr, effective=True) == frozenset({0, 1})


def test_working_set_floors_at_zero(tree: tuple[V2Tree, PathModel]) -> None:
    t, _ = tree
    t.put("/x", V2Cgroup(memory_current=10 << 20, memory_stat={"inactive_file": 12 << 20}))
    assert CgroupReader(t.layout).memory("/x").working_set_bytes == 0


def test_cpuset_write_in_kernel_format(tree: tuple[V2Tree, PathModel]) -> None:
    t, model = tree
    _, ctr = make_pod(t, model)
    CgroupWriter(t.layout).set_cpuset(ctr, {0, 1, 2, 5})
    assert t.read(ctr, "cpuset.cpus") == b"0-2,5"


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
