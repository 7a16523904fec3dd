"""What the enforcement pass reads less often decides as before: the CPU settings the executor compares
wishes with stand for `REPROBE_SECONDS` (read again at each cgroup's own phase, at once after Colo wrote
the cgroup), so what holds is still not written and a file rewritten behind Colo's back is put back within
the period; a pod's tree is listed again only when its directories changed."""

from __future__ import annotations

import itertools
import os
import tempfile
import time
from pathlib import Path

import pytest

from agent.config_sections.enforcement import EnforcementConfig
from agent.enforce.executor import REPROBE_SECONDS, ConfirmedSettings
from agent.enforce.stage import Enforcer
from agent.snapshot import ContainerSample, NodeSample, PodMeta, PodSample, Snapshot
from cgroup import CgroupReader, CgroupWriter, PathModel, parse_container_id
from testsupport.cgtree import V1Tree
from testsupport.strategies import default_strategies
from testsupport.v2tree import V2Cgroup, V2Tree
from testsupport.waiting import wait_for

MODEL = PathModel("systemd")
GI = 1 << 30
SLEEPER = "import sys\nsys.stdin.read()\n"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_settings_stand_for_the_period_and_are_read_again_after_a_write(tmp_path: Path) -> None:
    tree = V2Tree(str(tmp_path))
    cg = "/kubepods.slice/pod-a"
    tree.put(cg, V2Cgroup(cpu_max=(40_000, 100_000)))
    clock = Clock()
    settings = ConfirmedSettings(CgroupReader(tree.layout), clock)
    assert settings.get(cg).quota_us == 40_000
    tree.put(cg, V2Cgroup(cpu_max=(30_000, 100_000)))  # rewritten behind Colo's back
    assert settings.get(cg).quota_us == 40_000  # held
    reread_at = []
    for second in range(1, 13):  # the file changes every second; a reading shows when it was read
        tree.put(cg, V2Cgroup(cpu_max=(1000 * second, 100_000)))
        clock.now += 1.0
        if settings.get(cg).quota_us == 1000 * second:
            reread_at.append(second)
    # read again within the period, then once a period at the cgroup's own phase
    assert reread_at[0] <= REPROBE_SECONDS
    assert all(b - a == REPROBE_SECONDS for a, b in itertools.pairwise(reread_at))
    assert len(reread_at) >= 2
    settings.wrote_quota(cg, 20_000, 100_000)  # what Colo wrote is what it holds, without a read
    assert settings.get(cg).quota_us == 20_000
    settings.drop([cg])  # anything else Colo wrote: read at once
    assert settings.get(cg).quota_us == 12_000


def test_cgroups_read_together_come_due_at_their_own_phases(tmp_path: Path) -> None:
    tree = V2Tree(str(tmp_path))
    cgroups = [f"/kubepods.slice/pod-{i}" for i in range(40)]
    for cg in cgroups:
        tree.put(cg, V2Cgroup(cpu_max=(40_000, 100_000)))
    clock = Clock()
    settings = ConfirmedSettings(CgroupReader(tree.layout), clock)
    for cg in cgroups:
        settings.get(cg)
    for cg in cgroups:
        tree.put(cg, V2Cgroup(cpu_max=(30_000, 100_000)))
    fresh_per_second = []
    for _ in range(int(REPROBE_SECONDS)):
        clock.now += 1.0
        before = sum(settings.get(cg).quota_us == 30_000 for cg in cgroups)
        fresh_per_second.append(before)
    assert fresh_per_second[-1] == len(cgroups)  # every one read again within the period
    steps = [b - a for a, b in zip([0, *fresh_per_second], fresh_per_second, strict=False)]
    assert max(steps) < len(cgroups) // 2  # and not all in the same pass


def _v2_offline_pod(tree: V2Tree, n: int) -> PodSample:
    uid = f"0000000{n}-1111-2222-3333-444444444444"
    path = MODEL.pod("burstable", uid)
    tree.put(path, V2Cgroup(cpu_max=(40_000, 100_000)))
    ctr = MODEL.container("burstable", uid, parse_container_id(f"containerd://{str(n) * 64}"))
    tree.put(ctr, V2Cgroup(cpu_max=(40_000, 100_000)))
    meta = PodMeta(uid, "default", f"pod-{n}", "offline", cpu_request_cores=0.2, cpu_limit_cores=0.4)
    return PodSample(meta, "burstable", path, 0.1, 0, 0, 0, 0, 0.0,
                     (ContainerSample(str(n) * 64, ctr, 0.05, 0, 0, 0, 0.0),))  # fmt: skip


def test_a_quota_rewritten_behind_colos_back_is_put_back_within_the_period(tmp_path: Path) -> None:
    tree = V2Tree(str(tmp_path / "host"))
    tree.put(MODEL.kubepods(), V2Cgroup())
    for qos in ("burstable", "besteffort"):
        tree.put(MODEL.tier(qos), V2Cgroup())
    pod = _v2_offline_pod(tree, 1)
    clock = Clock()
    config = EnforcementConfig(ledger_file=str(tmp_path / "ledger.json"))
    enf = Enforcer(tree.layout, MODEL, CgroupReader(tree.layout), config, lambda: (2.0, 8 * GI), clock=clock,
                   registered=default_strategies(tree.layout, MODEL, config))  # fmt: skip

    def one_pass() -> None:
        snap = Snapshot(1, clock.now, time.time(), NodeSample(2.0, 1.9, 8 * GI, GI, 0), {}, {pod.uid: pod}, (), 0.0)
        enf.on_snapshot(snap)
        clock.now += 1.0

    one_pass()
    held = tree.read(pod.cgroup, "cpu.max")
    assert held != b"40000 100000\n"  # suppressed
    writes = enf.writes
    one_pass()
    assert enf.writes == writes  # what holds is not written again
    with open(os.path.join(tree.dir(pod.cgroup), "cpu.max"), "w") as f:
        f.write("40000 100000\n")  # kubelet resized the pod
    for _ in range(int(REPROBE_SECONDS)):
        one_pass()
    assert tree.read(pod.cgroup, "cpu.max") == held  # back within the period
    assert enf.errors == 0


@pytest.mark.cgroupv1
def test_a_pod_tree_is_listed_again_when_its_directories_change(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    _, pod, (c1, c2) = tree.pod("besteffort", containers=2)
    reader = CgroupReader(tree.layout)
    root = tree.layout.dir("cpu", pod)

    def walked() -> list[str]:
        return [d for d, _dirs, _files in os.walk(root)]

    assert reader.tree(pod) == walked()
    tree.remove(c2)  # a container restarts: its cgroup goes, another comes (as many as before)
    c3 = tree.mkdir(f"{pod}/{'c' * 64}")
    assert reader.tree(pod) == walked()
    tree.mkdir(f"{c1}/nested")  # a directory below a container (as many directories under the pod)
    assert reader.tree(pod) == walked()
    proc = tree.start(c3, SLEEPER)
    wait_for(lambda: proc.pid in reader.procs(c3))
    found = dict(reader.procs_tree(pod))
    assert found[tree.layout.dir("cpu", c3)] == [proc.pid] and len(found) == len(walked())
    tree.remove(c3)
    assert reader.tree(pod) == walked()


@pytest.mark.cgroupv1
def test_a_new_process_gets_colos_oom_score_adj_at_the_next_walk(v1tree_cgroupfs: V1Tree) -> None:
    """The baseline checks every process of an offline pod each period: one started since the last walk, in
    a container that came since, included."""
    tree = v1tree_cgroupfs
    uid, pod, (c1,) = tree.pod("besteffort")
    writer = CgroupWriter(tree.layout)
    first = tree.start(c1, SLEEPER)
    wait_for(lambda: first.pid in CgroupReader(tree.layout).procs(c1))
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        config = EnforcementConfig(ledger_file=f"{tmp}/ledger.json")
        enf = Enforcer(tree.layout, tree.model, writer.reader, config, lambda: (2.0, 8 * GI), clock=clock,
                       registered=default_strategies(tree.layout, tree.model, config))  # fmt: skip

        def one_pass(containers: list[str]) -> None:
            meta = PodMeta(uid, "default", "p", "offline")
            samples = tuple(ContainerSample(c.rsplit("/", 1)[1], c, 0.0, 0, 0, 0, 0.0) for c in containers)
            p = PodSample(meta, "besteffort", pod, 0.0, 0, 0, 0, 0, 0.0, samples)
            enf.on_snapshot(Snapshot(1, clock.now, time.time(), NodeSample(2.0, 1.9, 8 * GI, GI, 0), {},
                                     {uid: p}, (), 0.0))  # fmt: skip
            clock.now += 1.0

        def oom(pid: int) -> int:
            with open(f"/proc/{pid}/oom_score_adj") as f:
                return int(f.read())

        one_pass([c1])
        assert oom(first.pid) == config.oom_score_adj
        c2 = tree.mkdir(f"{pod}/{'d' * 64}")
        second = tree.start(c2, SLEEPER)
        wait_for(lambda: second.pid in CgroupReader(tree.layout).procs(c2))
        for _ in range(int(config.oom_reapply_seconds) + 1):
            one_pass([c1, c2])
        assert oom(second.pid) == config.oom_score_adj
        enf.stop()


@pytest.mark.cgroupv1
def test_a_walk_from_a_kept_directory_sees_it_removed_and_made_again(v1tree_cgroupfs: V1Tree) -> None:
    """The pod walk keeps the pod directory open (its long path looked up once); a directory removed since,
    even one made again under the same name, is looked up afresh, and `forget` closes it."""
    tree = v1tree_cgroupfs
    _, pod, (ctr,) = tree.pod("besteffort")
    reader = CgroupReader(tree.layout)
    root = tree.layout.dir("cpu", pod)
    assert [d for d, _ in reader.procs_tree(pod)] == [root, tree.layout.dir("cpu", ctr)]
    tree.remove(pod)
    assert reader.procs_tree(pod) == []  # gone: nothing listed, nothing kept
    tree.mkdir(pod)
    again = tree.mkdir(f"{pod}/{'e' * 64}")
    proc = tree.start(again, SLEEPER)
    wait_for(lambda: proc.pid in reader.procs(again))
    assert dict(reader.procs_tree(pod)) == {root: [], tree.layout.dir("cpu", again): [proc.pid]}
    held = len(reader.files)
    reader.forget(pod)
    assert len(reader.files) < held
