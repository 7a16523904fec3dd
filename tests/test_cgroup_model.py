"""Layout detection, driver rules, kubelet path naming and the kernel file formats (pure functions)."""

from __future__ import annotations

import errno
import os

import pytest

from cgroup import (
    CgroupError,
    CgroupFileMissing,
    CgroupGone,
    CgroupParseError,
    CgroupPermissionError,
    CgroupReader,
    Layout,
    Mount,
    PathModel,
    detect_driver,
    normalize_qos,
    parse_container_id,
    parse_mountinfo,
    shares_to_weight,
    weight_to_shares,
)
from cgroup.files import format_cpuset, keyed_value, parse_cpu_max, parse_cpuset, parse_keyed, parse_psi
from cgroup.paths import parse_container_dir
from testsupport.v2tree import V2Cgroup, V2Tree

HYBRID = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:5 - cgroup2 cgroup2 rw,nsdelegate
"""


def test_mountinfo_hybrid_with_host_prefix() -> None:
    layout = parse_mountinfo(HYBRID, "/host")
    assert layout.mode == "hybrid"
    assert layout.v1["cpu"].path == layout.v1["cpuacct"].path == "/host/sys/fs/cgroup/cpu,cpuacct"
    assert layout.dir("memory", "/kubepods/besteffort") == "/host/sys/fs/cgroup/memory/kubepods/besteffort"
    assert layout.unified_dir("/kubepods.slice") == "/host/sys/fs/cgroup/unified/kubepods.slice"
    assert "systemd" not in layout.v1


def test_mountinfo_pure_v1_v2_and_none() -> None:
    v1 = parse_mountinfo("\n".join(HYBRID.splitlines()[:4]))
    assert v1.mode == "v1" and v1.unified is None
    v2 = parse_mountinfo("30 24 0:26 / /sys/fs/cgroup rw shared:4 - cgroup2 cgroup2 rw,nsdelegate\n")
    assert v2.mode == "v2" and v2.dir("memory", "/a") == "/sys/fs/cgroup/a"
    with pytest.raises(CgroupError):
        parse_mountinfo("22 28 0:21 / /proc rw - proc proc rw\n")


def test_mountinfo_root_and_escapes() -> None:
    text = "32 31 0:29 /kubepods /sys/fs/cgroup/my\\040cpu rw - cgroup cgroup rw,cpu,cpuacct,memory\n"
    layout = parse_mountinfo(text)
    assert layout.v1["cpu"] == Mount("/sys/fs/cgroup/my cpu", "/kubepods")
    assert layout.dir("cpu", "/kubepods/burstable") == "/sys/fs/cgroup/my cpu/burstable"


def test_this_machine_is_detected() -> None:
    from cgroup import detect_layout

    layout = detect_layout("/")
    assert layout.mode in ("v1", "v2", "hybrid")


@pytest.mark.parametrize(
    ("driver", "root", "kubepods", "pod"),
    [
        ("cgroupfs", "/", "/kubepods", "/kubepods/burstable/pod1234-ab"),
        ("systemd", "/", "/kubepods.slice", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_ab.slice"),
        ("cgroupfs", "/kubelet", "/kubelet/kubepods", "/kubelet/kubepods/burstable/pod1234-ab"),
        ("systemd", "/kubelet", "/kubelet.slice/kubelet-kubepods.slice",
         "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod1234_ab.slice"),
        ("systemd", "/kubelet.slice", "/kubelet.slice/kubelet-kubepods.slice",
         "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod1234_ab.slice"),
    ],
)  # fmt: skip
def test_kubelet_naming(driver: str, root: str, kubepods: str, pod: str) -> None:
    m = PathModel(driver, root)  # type: ignore[arg-type]
    assert m.kubepods() == kubepods
    assert m.tier("guaranteed") == kubepods
    assert m.pod("burstable", "1234-ab") == pod
    assert m.pod_uid_from_dir(pod.rsplit("/", 1)[1]) == "1234-ab"


def test_container_naming() -> None:
    cid = "a" * 64
    sd, fs = PathModel("systemd"), PathModel("cgroupfs")
    assert sd.container_names(parse_container_id(f"containerd://{cid}")) == [f"cri-containerd-{cid}.scope"]
    assert sd.container_names(parse_container_id(f"cri-o://{cid}")) == [f"crio-{cid}.scope"]
    assert sd.container_names(parse_container_id(f"docker://{cid}")) == [f"docker-{cid}.scope"]
    assert fs.container_names(parse_container_id(f"containerd://{cid}"))[0] == cid
    assert fs.container_names(parse_container_id(f"cri-o://{cid}"))[0] == f"crio-{cid}"
    assert parse_container_dir(f"crio-conmon-{cid}.scope") is None
    assert parse_container_dir(f"docker-{cid}.scope") == parse_container_id(f"docker://{cid}")
    for bad in ("containerd://", "containerd://xyz", "", "containerd://" + "g" * 64):
        with pytest.raises(ValueError):
            parse_container_id(bad)
    assert normalize_qos("BestEffort") == "besteffort"
    with pytest.raises(ValueError):
        normalize_qos("Platinum")


def test_driver_rules_in_order(tmp_path: object) -> None:
    t = V2Tree(str(tmp_path))
    t.put("/kubepods.slice", V2Cgroup())
    layout = t.layout
    assert detect_driver(layout, explicit="cgroupfs", host_root=t.base, argv=[]).rule == "explicit setting"
    d = detect_driver(layout, host_root=t.base, argv=["/usr/bin/kubelet", "--cgroup-driver=cgroupfs"])
    assert (d.driver, d.rule) == ("cgroupfs", "kubelet --cgroup-driver=cgroupfs")
    os.makedirs(f"{t.base}/etc/k")
    with open(f"{t.base}/etc/k/kc.yaml", "w") as f:
        f.write("kind: KubeletConfiguration\ncgroupDriver: cgroupfs\n")
    d = detect_driver(layout, host_root=t.base, argv=["kubelet", "--config", "/etc/k/kc.yaml"])
    assert d.driver == "cgroupfs" and "kc.yaml" in d.rule
    d = detect_driver(layout, host_root=t.base, argv=[])
    assert d.driver == "systemd" and d.rule.startswith("filesystem")
    with pytest.raises(ValueError):
        detect_driver(layout, explicit="upstart", host_root=t.base, argv=[])
    empty = V2Tree(str(tmp_path) + "/e")
    d = detect_driver(empty.layout, host_root=empty.base, argv=[])
    assert d.driver == "cgroupfs" and "default" in d.rule


def test_shares_weight_conversion() -> None:
    assert (shares_to_weight(2), shares_to_weight(1024), shares_to_weight(262144)) == (1, 39, 10000)
    assert (weight_to_shares(1), weight_to_shares(10000)) == (2, 262144)


def test_parsers_and_malformed_contents() -> None:
    assert parse_keyed("f", b"a 1\nb 2\n") == {"a": 1, "b": 2}
    assert keyed_value("f", b"total_cache 5\ncache 7\n", b"cache") == 7
    assert keyed_value("f", b"cache 7\ntotal_cache 5\n", b"total_cache") == 5
    assert parse_cpu_max("f", b"max 100000\n") == (None, 100000)
    assert parse_cpuset("f", b"0-3,8,10-11\n") == frozenset({0, 1, 2, 3, 8, 10, 11})
    assert parse_cpuset("f", b"\n") == frozenset()
    assert format_cpuset({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
    psi = parse_psi("f", b"some avg10=0.11 avg60=1.12 avg300=0.46 total=1883839\n")
    assert psi["some"]["total"] == 1883839 and "full" not in psi
    for fn, data in [
        (parse_keyed, b"a x\n"),
        (parse_keyed, b"justakey\n"),
        (parse_cpu_max, b"100000\n"),
        (parse_cpu_max, b"abc 100000\n"),
        (parse_cpuset, b"3-1"),
        (parse_cpuset, b"a,b"),
        (parse_psi, b"some avg10=x\n"),
        (parse_psi, b"full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
    ]:
        with pytest.raises(CgroupParseError) as info:
            fn("/sys/fs/cgroup/x", data)  # type: ignore[operator]
        assert "/sys/fs/cgroup/x" in str(info.value) and info.value.expected
    with pytest.raises(CgroupParseError):
        keyed_value("f", b"cache 7\n", b"rss")


def test_reader_typed_errors_on_tree(tmp_path: object) -> None:
    t = V2Tree(str(tmp_path))
    d = t.put("/bad", V2Cgroup())
    with open(f"{d}/memory.current", "w") as f:
        f.write("lots\n")
    reader = CgroupReader(t.layout)
    with pytest.raises(CgroupParseError):
        reader.memory("/bad")
    os.remove(f"{d}/cpu.stat")
    with pytest.raises(CgroupFileMissing):
        reader.cpu("/bad")
    with pytest.raises(CgroupGone):
        reader.cpu("/never-existed")
    os.chmod(f"{d}/memory.max", 0o000)
    if os.geteuid() == 0:
        # root bypasses mode bits; show the mapping from the errno instead
        from cgroup.errors import classify_os_error

        err = classify_os_error(f"{d}/memory.max", PermissionError(errno.EACCES, "denied"))
        assert isinstance(err, CgroupPermissionError)
    else:
        with pytest.raises(CgroupPermissionError):
            reader.memory_limit("/bad")


def test_layout_without_controller_says_so() -> None:
    layout = Layout("v1", {"cpu": Mount("/sys/fs/cgroup/cpu")})
    with pytest.raises(CgroupError) as info:
        layout.dir("memory", "/x")
    assert "memory" in str(info.value) and "mode=v1" in str(info.value)


def test_v1_memory_stat_fast_path_and_fallback() -> None:
    from cgroup.counters import _v1_memory_stat

    kernel = (
        b"cache 1\nrss 2\ninactive_anon 3\nhierarchical_memory_limit 9223372036854771712\ntotal_cache 100\n"
        b"total_rss 70\ntotal_shmem 30\ntotal_pgmajfault 0\ntotal_inactive_anon 60\ntotal_active_anon 40\n"
        b"total_inactive_file 50\ntotal_active_file 20\ntotal_unevictable 0\n"
    )
    # anon is total_rss: shmem (counted as cache by v1, as file by v2) stays out, as in v2's anon
    assert _v1_memory_stat("p", kernel) == (50, 70, 100)
    reordered = b"total_inactive_file 50\ntotal_rss 70\ntotal_cache 100\n"
    assert _v1_memory_stat("p", reordered) == (50, 70, 100)
    with pytest.raises(CgroupParseError):
        _v1_memory_stat("p", b"total_cache 100\ntotal_rss x\n")
    with pytest.raises(CgroupParseError):
        _v1_memory_stat("p", b"cache 1\n")


def test_psi_avg10_fast_path() -> None:
    from cgroup.files import parse_psi_avg10

    text = b"some avg10=1.25 avg60=0.50 avg300=0.10 total=123\nfull avg10=0.75 avg60=0.00 avg300=0.00 total=9\n"
    assert parse_psi_avg10("p", text) == (1.25, 0.75)
    assert parse_psi_avg10("p", b"some avg10=2.00 avg60=0.00 avg300=0.00 total=1\n") == (2.0, None)
    with pytest.raises(CgroupParseError):
        parse_psi_avg10("p", b"some avg10=x avg60=0.00\n")
    with pytest.raises(CgroupParseError):
        parse_psi_avg10("p", b"nothing\n")


def test_parent_cgroup() -> None:
    from cgroup import parent_cgroup

    assert parent_cgroup("/kubepods/besteffort/pod1") == "/kubepods/besteffort"
    assert parent_cgroup("/kubepods/besteffort/pod1/") == "/kubepods/besteffort"
    assert parent_cgroup("/kubepods") == "/"
