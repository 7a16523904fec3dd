"""A new cgroup part needs no change in the executor, the ledger, restore or reconcile: this test declares
one (pids.max of offline pods: its knob, its record and restore, offline protection), registers it and a
strategy that uses it, and runs the real enforcement stage on a v2 tree. Nothing else in the agent knows it:
what the ledger records, what a pod that turns online and a shutdown put back follow from its declaration."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from agent.config_sections.enforcement import EnforcementConfig
from agent.enforce.actions import (
    CgroupIO,
    Knob,
    Plan,
    Probe,
    Recorded,
    Restore,
    SetCpuQuota,
    SetCpuset,
    SetCpuShares,
    merge_wishes,
)
from agent.enforce.ledger import Touched
from agent.enforce.parts import registry
from agent.enforce.parts.spec import PartSpec, RecordIO, RestoreIO
from agent.enforce.stage import Enforcer
from agent.node_state import NodeState
from agent.snapshot import ContainerSample, NodeSample, PodMeta, PodSample, Snapshot
from cgroup import CgroupReader, PathModel, parse_container_id
from cgroup.files import read_once, write_value
from testsupport.strategies import default_strategies
from testsupport.v2tree import V2Cgroup, V2Tree

MODEL = PathModel("systemd")
GI = 1 << 30
PART = "pids"


# -- the part: one declaration -------------------------------------------------------------------------
def pids_file(io: CgroupIO | RestoreIO, cgroup: str) -> str:
    return os.path.join(io.layout.dir("pids", cgroup), "pids.max")


@dataclass(frozen=True, slots=True)
class SetPidsMax(Knob):
    cgroup: str
    limit: str  # a number or "max"
    part: str
    uid: str = ""

    file = "pids.max"

    def probe(self, io: CgroupIO) -> Probe | None:
        path = pids_file(io, self.cgroup)
        held = read_once(path).decode().strip()
        return held, held == self.limit, partial(write_value, path, self.limit)

    def merge(self, other: SetPidsMax) -> SetPidsMax:  # the tighter limit
        if other.limit == "max":
            return self
        return other if self.limit == "max" or int(other.limit) < int(self.limit) else self


def record(io: RecordIO, entry: Touched, action: Any, current: Any) -> bool:
    if PART in entry.parts:
        return False
    entry.parts[PART] = {"before": current}
    return True


def restore(io: RestoreIO, entry: Touched) -> bool:
    path = pids_file(io, entry.cgroup)
    return io.write(f"restore pids.max of {entry.cgroup}", partial(write_value, path, entry.parts[PART]["before"]))


SPEC = PartSpec(PART, "offline", record=record, restore=restore)


# -- its strategy --------------------------------------------------------------------------------------
class PidsLimit:
    name = "pids_limit"
    parts = frozenset({PART})

    def plan(self, state: NodeState, recorded: Recorded) -> Plan:
        asks = [SetPidsMax(p.cgroup, "64", PART, p.uid) for p in state.offline]
        asks += [SetPidsMax(p.cgroup, "32", PART, p.uid) for p in state.offline]  # two wishes: the tighter goes
        return Plan(tuple(asks))


@pytest.fixture
def registered() -> Iterator[None]:
    registry.register(SPEC, order=1000)  # last in the restore order
    try:
        yield
    finally:
        registry.unregister(PART)


def pod(tree: V2Tree, n: int, cls: str) -> PodSample:
    uid = f"0000000{n}-1111-2222-3333-444444444444"
    path = MODEL.pod("burstable", uid)
    tree.put(path, V2Cgroup(cpu_max=(40_000, 100_000)))
    Path(tree.dir(path), "pids.max").write_text("max\n")
    ctr = MODEL.container("burstable", uid, parse_container_id(f"containerd://{str(n) * 64}"))
    tree.put(ctr, V2Cgroup(cpu_max=(40_000, 100_000)))
    meta = PodMeta(uid, "default", f"pod-{n}", cls, cpu_request_cores=0.2, cpu_limit_cores=0.4)  # type: ignore[arg-type]
    return PodSample(
        meta, "burstable", path, 0.1, 0, 0, 0, 0, 0.0, (ContainerSample(str(n) * 64, ctr, 0.05, 0, 0, 0, 0.0),)
    )


def snapshot(*pods: PodSample) -> Snapshot:
    node = NodeSample(2.0, 1.5, 8 * GI, GI, 0)
    return Snapshot(1, 0.0, 0.0, node, {}, {p.uid: p for p in pods}, (), 0.0)


@pytest.mark.usefixtures("registered")
def test_a_registered_part_is_recorded_written_and_put_back_by_the_generic_machinery(tmp_path: Path) -> None:
    tree = V2Tree(str(tmp_path / "host"))
    offline = pod(tree, 1, "offline")
    ledger_file = tmp_path / "ledger.json"
    config = EnforcementConfig(ledger_file=str(ledger_file))
    chosen = [*default_strategies(tree.layout, MODEL, config), PidsLimit()]
    enf = Enforcer(tree.layout, MODEL, CgroupReader(tree.layout), config, lambda: (2.0, 8 * GI), registered=chosen,
                   host_root=tree.base)  # fmt: skip
    enf.on_snapshot(snapshot(offline))
    assert enf.errors == 0, enf.last_error
    assert tree.read(offline.cgroup, "pids.max").strip() == b"32"
    saved = json.loads(ledger_file.read_text())["pods"][offline.uid]["parts"]
    assert saved[PART] == {"before": "max"} and "baseline" in saved  # recorded before the write, beside the rest
    # the pod turns online: an offline part goes back, whatever strategy wrote it
    online = dataclasses.replace(offline, meta=dataclasses.replace(offline.meta, pod_class="online"))
    enf.on_snapshot(snapshot(online))
    assert tree.read(offline.cgroup, "pids.max").strip() == b"max" and offline.uid not in enf.ledger.entries
    # offline again, then a shutdown: every part back
    enf.on_snapshot(snapshot(offline))
    assert tree.read(offline.cgroup, "pids.max").strip() == b"32"
    enf.stop()
    assert tree.read(offline.cgroup, "pids.max").strip() == b"max" and enf.ledger.entries == {}
    assert enf.errors == 0, enf.last_error


@pytest.mark.usefixtures("registered")
def test_a_part_no_active_strategy_owns_is_put_back_after_a_restart(tmp_path: Path) -> None:
    tree = V2Tree(str(tmp_path / "host"))
    offline = pod(tree, 1, "offline")
    config = EnforcementConfig(ledger_file=str(tmp_path / "ledger.json"))
    reader = CgroupReader(tree.layout)
    first = Enforcer(tree.layout, MODEL, reader, config, lambda: (2.0, 8 * GI),
                     registered=[*default_strategies(tree.layout, MODEL, config), PidsLimit()], host_root=tree.base)  # fmt: skip
    first.on_snapshot(snapshot(offline))
    assert tree.read(offline.cgroup, "pids.max").strip() == b"32"
    # a restart without the strategy: the ledger says pids.max was changed, reconcile puts it back
    second = Enforcer(tree.layout, MODEL, reader, config, lambda: (2.0, 8 * GI),
                      registered=default_strategies(tree.layout, MODEL, config), host_root=tree.base)  # fmt: skip
    second.on_snapshot(snapshot(offline))
    assert tree.read(offline.cgroup, "pids.max").strip() == b"max"
    assert PART not in second.ledger.entries[offline.uid].parts and second.errors == 0, second.last_error
    second.stop()


def test_a_part_is_registered_once() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(registry.PARTS["quota"], order=1000)


def test_two_wishes_for_one_file_merge_by_the_knobs_rule() -> None:
    """The tightest CFS quota keeps its place; two cpusets become their union at the first's place; knobs
    without a rule (shares) are both written; other cgroups and restores are untouched."""
    loose, tight = SetCpuQuota("/p", 50_000, 100_000, "quota", "u"), SetCpuQuota("/p", 20_000, 100_000, "batch", "u")
    a = SetCpuset("/p", frozenset({1}), "cpuset", "u", {"/p/c": frozenset({1})})
    b = SetCpuset("/p", frozenset({2}), "cpuset", "u", {"/p/c": frozenset({2}), "/p/d": frozenset({2})})
    s1, s2 = SetCpuShares("/p", 2, "baseline", "u"), SetCpuShares("/p", 512, "batch", "u")
    other, back = SetCpuQuota("/q", 10_000, 100_000, "quota", "v"), Restore("w", frozenset({"quota"}))
    merged = merge_wishes([loose, a, s1, other, tight, b, s2, back])
    union = SetCpuset("/p", frozenset({1, 2}), "cpuset", "u", {"/p/c": frozenset({1, 2}), "/p/d": frozenset({2})})
    assert merged == [union, s1, other, tight, s2, back]
    assert merge_wishes([s1, s2]) == [s1, s2]  # nothing merged: the list as it came
