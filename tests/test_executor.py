"""The one executor on kernel-format v2 trees: what holds is not written, originals are recorded and saved
before the first write, a ledger that cannot be saved refuses every write of the pass; and a strategy added
to the registry's list runs with no change anywhere else."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.config import AgentConfig
from agent.config_sections.enforcement import EnforcementConfig
from agent.enforce.actions import (
    Action,
    Plan,
    Recorded,
    Report,
    Restore,
    SetCpuIdle,
    SetCpuQuota,
    SetCpuset,
    SetCpuShares,
    SetMemoryHigh,
    SetMemoryLimit,
    SetOomScoreAdj,
)
from agent.enforce.executor import CgroupExecutor
from agent.enforce.ledger import Ledger, Touched
from agent.enforce.originals import Originals
from agent.enforce.stage import Enforcer, detect_facts
from agent.enforce.strategies.registry import strategies
from agent.node_state import NodeState
from agent.snapshot import ContainerSample, NodeSample, PodMeta, PodSample, Snapshot
from cgroup import CgroupReader, PathModel, parse_container_id
from testsupport.v2tree import V2Cgroup, V2Tree

MODEL = PathModel("systemd")
GI = 1 << 30


def v2_pod(tree: V2Tree, n: int, cls: str = "offline") -> PodSample:
    uid = f"0000000{n}-1111-2222-3333-444444444444"
    path = MODEL.pod("burstable", uid)
    tree.put(path, V2Cgroup(cpu_max=(40_000, 100_000), cpuset_cpus="", cpuset_effective="0-3"))
    ctr = MODEL.container("burstable", uid, parse_container_id(f"containerd://{str(n) * 64}"))
    tree.put(ctr, V2Cgroup(cpu_max=(40_000, 100_000), cpuset_cpus="", cpuset_effective="0-3"))
    meta = PodMeta(uid, "default", f"pod-{n}", cls, cpu_request_cores=0.2, cpu_limit_cores=0.4)  # type: ignore[arg-type]
    container = ContainerSample(str(n) * 64, ctr, 0.05, 0, 0, 0, 0.0)
    return PodSample(meta, "burstable", path, 0.1, 0, 0, 0, 0, 0.0, (container,))


def snapshot(pods: list[PodSample]) -> Snapshot:
    return Snapshot(1, time.monotonic(), time.time(), NodeSample(2.0, 1.5, 8 * GI, GI, 0), {},
                    {p.uid: p for p in pods}, (), 0.0)  # fmt: skip


def protect(p: PodSample) -> list[Action]:
    """What a strategy might ask of an offline pod: a bit of every kind of write."""
    ctr = p.containers[0].cgroup
    return [
        SetCpuShares(p.cgroup, 2, "baseline", p.uid, weight=1),
        SetCpuIdle(p.cgroup, True, "baseline", p.uid),
        SetOomScoreAdj(p.cgroup, 1000, "baseline", p.uid),
        SetCpuQuota(p.cgroup, 10_000, 100_000, "quota", p.uid, 0.01, {ctr: (10_000, 100_000)}),
        SetCpuset(p.cgroup, frozenset({3}), "cpuset", p.uid, {ctr: frozenset({3})}),
        SetMemoryHigh(p.cgroup, 256 << 20, "memory_high", p.uid),
    ]


def files(tree: V2Tree, p: PodSample) -> list[bytes]:
    names = ("cpu.weight", "cpu.idle", "cpu.max", "cpuset.cpus", "memory.high")
    return [tree.read(p.cgroup, n).strip() for n in names] + [tree.read(p.containers[0].cgroup, "cpu.max").strip()]


def executor(tree: V2Tree, ledger_file: str) -> CgroupExecutor:
    ledger, reader = Ledger(ledger_file), CgroupReader(tree.layout)
    config = EnforcementConfig(ledger_file=ledger_file)
    return CgroupExecutor(tree.layout, reader, ledger, Originals(tree.layout, reader, ledger, config, tree.base),
                          tree.base)  # fmt: skip


def test_every_write_of_the_pass_is_refused_while_the_ledger_cannot_be_saved(tmp_path: Path) -> None:
    tree = V2Tree(str(tmp_path / "host"))
    pods = [v2_pod(tree, 1), v2_pod(tree, 2)]
    before = [files(tree, p) for p in pods]
    (tmp_path / "not-a-directory").write_text("")
    ex = executor(tree, str(tmp_path / "not-a-directory" / "ledger.json"))
    # a pod whose memory.high a previous pass set (its original in the ledger): putting it back needs no record
    back = v2_pod(tree, 3)
    tree.put(back.cgroup, V2Cgroup(memory_high=256 << 20))
    ex.ledger.record(Touched(back.uid, back.cgroup, 204, None, 100_000, parts={"memory_high": {"before": None}}))
    outcome = ex.apply([*(a for p in pods for a in protect(p)), Restore(back.uid, frozenset({"memory_high"}))],
                       snapshot([*pods, back]))  # fmt: skip
    assert outcome.refused and outcome.writes == ex.writes == 1
    assert [files(tree, p) for p in pods] == before
    assert tree.read(back.cgroup, "memory.high").strip() == b"max"
    assert ex.errors == 1 and "ledger could not be saved" in (ex.last_error or "")


def test_originals_are_on_disk_and_what_holds_is_not_written_again(tmp_path: Path) -> None:
    tree = V2Tree(str(tmp_path / "host"))
    p = v2_pod(tree, 1)
    ledger = tmp_path / "ledger.json"
    ex = executor(tree, str(ledger))
    first = ex.apply(protect(p), snapshot([p]))
    # weight, idle, oom_score_adj, pod and container quota, cpuset (pod to the union {3}, container), memory.high
    assert not first.refused and first.writes == 8 and ex.errors == 0
    assert files(tree, p) == [b"1", b"1", b"10000 100000", b"3", b"268435456", b"10000 100000"]
    saved = json.loads(ledger.read_text())["pods"][p.uid]
    parts = saved["parts"]
    assert (parts["cpuset"]["pod"], parts["memory_high"]["before"], parts["quota"]) == ("", None, {})
    assert set(parts) == {"baseline", "quota", "cpuset", "memory_high"}
    assert saved["quota_us"] == 40_000 and saved["containers"] == {p.containers[0].cgroup: 40_000}
    # the same actions again: only oom_score_adj (per process, always) is written
    again = ex.apply(protect(p), snapshot([p]))
    assert again.writes == 1
    # a pod quota within its tolerance holds, and its containers follow it: nothing written below it
    nudged = SetCpuQuota(p.cgroup, 10_050, 100_000, "quota", p.uid, 0.01, {p.containers[0].cgroup: (10_050, 100_000)})
    assert ex.apply([nudged], snapshot([p])).writes == 0
    assert ex.apply([dataclasses.replace(nudged, tolerance=0.0)], snapshot([p])).writes == 2  # pod, then container


@dataclass(frozen=True, slots=True)
class DummyReport(Report):
    passes: int

    def fields(self) -> dict[str, Any]:
        return {"dummy_passes": self.passes}


class EveryOnlinePodsMemoryLimit:
    """A strategy the registry does not know: the pod's own memory limit (a part protecting "own" limits, never
    recorded nor restored) on online pods, and a count of its passes in its memo and report."""

    name = "dummy"
    parts = frozenset({"batch"})

    def plan(self, state: NodeState, recorded: Recorded) -> Plan:
        passes = (recorded.memo or 0) + 1
        actions = tuple(SetMemoryLimit(p.cgroup, GI, "batch", p.uid) for p in state.online)
        return Plan(actions, passes, DummyReport(passes))


def test_a_strategy_added_to_the_list_needs_no_change_anywhere_else(tmp_path: Path) -> None:
    tree = V2Tree(str(tmp_path / "host"))
    offline, online = v2_pod(tree, 1), v2_pod(tree, 2, "online")
    config = EnforcementConfig(ledger_file=str(tmp_path / "ledger.json"))
    reader = CgroupReader(tree.layout)
    registered = [*strategies(AgentConfig(enforcement=config), detect_facts(tree.layout, MODEL, reader)),
                  EveryOnlinePodsMemoryLimit()]  # fmt: skip
    enf = Enforcer(tree.layout, MODEL, reader, config, lambda: (2.0, 8 * GI), registered=registered,
                   host_root=tree.base)  # fmt: skip
    for _ in range(2):
        enf.on_snapshot(snapshot([offline, online]))
    assert tree.read(online.cgroup, "memory.max").strip() == str(GI).encode()
    assert tree.read(offline.cgroup, "cpu.idle").strip() == b"1"  # the registry's own strategies ran as before
    section = enf.section()
    assert section["dummy_passes"] == 2 and section["pods_touched"] == [offline.uid]  # own limits: no record
    enf.stop()
    assert tree.read(online.cgroup, "memory.max").strip() == str(GI).encode()  # never restored
    assert tree.read(offline.cgroup, "cpu.idle").strip() == b"0"


def test_a_restarted_container_gets_its_quota_and_a_steady_one_is_not_read_again(tmp_path: Path) -> None:
    """Under a pod quota that holds, a container without a quota (a new cgroup: restarted) gets its own, never
    above its pod's; a container once seen with a quota is not read again while its pod's quota stays."""
    from agent.enforce.quota_changes import RestartedContainers
    from cgroup import CgroupWriter, CpuSettings

    tree = V2Tree(str(tmp_path / "host"))
    reader = CgroupReader(tree.layout)
    restarted = RestartedContainers(reader, CgroupWriter(tree.layout, reader))
    pod = CpuSettings(quota_us=40_000, period_us=100_000, shares=None, weight=100, idle=None)
    old, new = "/kubepods.slice/pod-a/old", "/kubepods.slice/pod-a/new"
    tree.put(old, V2Cgroup(cpu_max=(30_000, 100_000)))
    assert restarted.changes({old: (30_000, 100_000)}, pod) == []
    tree.put(old, V2Cgroup(cpu_max=(None, 100_000)))  # not read again while the pod's quota holds
    assert restarted.changes({old: (30_000, 100_000)}, pod) == []
    tree.put(new, V2Cgroup(cpu_max=(None, 100_000)))
    (change,) = restarted.changes({new: (90_000, 100_000)}, pod)  # asks more than the pod holds: the pod's
    change.apply()
    assert tree.read(new, "cpu.max").strip() == b"40000 100000"
    # the pod's quota moved: every container is looked at again
    moved = dataclasses.replace(pod, quota_us=50_000)
    (again,) = restarted.changes({old: (30_000, 100_000)}, moved)
    again.apply()
    assert tree.read(old, "cpu.max").strip() == b"30000 100000"
