"""Per part of a pod (agent/actions.py `Part`): whether its ledger entry holds that part (so restore has
something to put back), and how the original is recorded before the executor's first write of it.

Adding a part: a field on `Touched` (agent/ledger.py) for its original, one recorder function and one
`held` test here, and its restore step in agent/restore.py. Parts in `OWN_LIMITS` are the pod's own
limits: never recorded, never restored, so they need nothing here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.actions import Action, Part, SetCpuIdle, SetCpuQuota, SetMemoryHigh, SetMemoryProtection, SetOomScoreAdj
from agent.ledger import Touched
from agent.originals import Originals
from cgroup import CgroupError
from cgroup.files import format_cpuset


@dataclass(frozen=True, slots=True)
class PartRecorder:
    """`held(entry)`: the entry says Colo changed this part. `record(originals, entry, action, current)`
    puts the original (`current`: what the executor read before the write) into the entry; True when the
    entry changed and must be saved."""

    held: Callable[[Touched], bool]
    record: Callable[[Originals, Touched, Action, Any], bool]


def _record_baseline(originals: Originals, entry: Touched, action: Action, current: Any) -> bool:
    """The weight was recorded with the entry; kubelet's oom_score_adj per cgroup before Colo's own."""
    changed = not entry.baseline
    entry.baseline = True
    if isinstance(action, SetCpuIdle) and action.idle and not entry.idle:
        entry.idle, changed = True, True
    if isinstance(action, SetOomScoreAdj):
        originals.record_oom(entry)  # marks the ledger changed itself when it learns a value
    return changed


def _record_quota(originals: Originals, entry: Touched, action: Action, current: Any) -> bool:
    """The pod's and its containers' quotas were recorded with the entry (kept in step each pass)."""
    if entry.quota:
        return False
    entry.quota = True
    return True


def _record_cpuset(originals: Originals, entry: Touched, action: Action, current: Any) -> bool:
    if entry.cpuset is not None:
        return False
    entry.cpuset = format_cpuset(current)
    for path in entry.containers:
        try:
            entry.container_cpusets[path] = format_cpuset(originals.reader.cpuset(path))
        except CgroupError:
            continue
    return True


def _record_memory_high(originals: Originals, entry: Touched, action: Action, current: Any) -> bool:
    """The pod's memory.high before ANY Colo part wrote it: memory QoS's record of it when it has one (a pod
    that was online), else what is there now."""
    if entry.memory_high:
        return False
    qos = entry.memory_qos.get(entry.cgroup, {})
    entry.memory_high, entry.memory_high_before = True, qos.get("high", current)
    return True


def _record_burst(originals: Originals, entry: Touched, action: Action, current: Any) -> bool:
    """The burst each cgroup of the pod had before Colo's first burst there."""
    assert hasattr(action, "cgroup")
    if action.cgroup in entry.burst:
        return False
    entry.burst[action.cgroup] = int(current)
    return True


def _record_quota_burst(originals: Originals, entry: Touched, action: Action, current: Any) -> bool:
    """At the first raise (again after each give-back) the pod's and its containers' quotas as they are
    now, its own: an in-place resize since the entry was made is what goes back."""
    assert isinstance(action, SetCpuQuota)
    changed = False
    if not entry.quota_burst:
        entry.quota_burst, changed = True, True
        for path in (entry.cgroup, *entry.containers):
            try:
                s = originals.reader.cpu_settings(path)
            except CgroupError:
                entry.containers.pop(path, None)
                entry.container_periods.pop(path, None)
                continue
            if path == entry.cgroup:
                entry.quota_us, entry.period_us = s.quota_us, s.period_us
            else:
                entry.containers[path], entry.container_periods[path] = s.quota_us, s.period_us
    if action.cgroup != entry.cgroup and action.cgroup not in entry.containers:
        entry.containers[action.cgroup], entry.container_periods[action.cgroup] = current.quota_us, current.period_us
        changed = True
    return changed


def memory_file(action: Action) -> tuple[str, Any] | None:
    """(the file's short name, how to read it from the executor's reading) of a memory QoS action."""
    if isinstance(action, SetMemoryProtection):
        return action.kind, (lambda cur: cur.min_bytes if action.kind == "min" else cur.low_bytes)
    if isinstance(action, SetMemoryHigh):
        return "high", (lambda cur: cur)
    return None


def memory_files(actions: Iterable[Action]) -> frozenset[tuple[str, str]]:
    """(cgroup, memory file) of each memory QoS or memory.high action of a pass."""
    return frozenset((a.cgroup, a.kind if isinstance(a, SetMemoryProtection) else "high")
                     for a in actions if isinstance(a, SetMemoryProtection | SetMemoryHigh))  # fmt: skip


def record_memory(records: dict[str, dict[str, int | None]], action: Action, current: Any) -> bool:
    """memory.min / low / high of a cgroup before Colo's first write of that file (pods, and the cgroups
    above them in the ledger's `shared`)."""
    found = memory_file(action)
    assert found is not None and hasattr(action, "cgroup")
    name, value = found
    record = records.setdefault(action.cgroup, {})
    if name in record:
        return False
    record[name] = value(current)
    return True


def _record_memory_qos(originals: Originals, entry: Touched, action: Action, current: Any) -> bool:
    """As `record_memory`; the pod's memory.high that offline enforcement changed has its original there (one
    original per file, whichever part wrote it first)."""
    if isinstance(action, SetMemoryHigh) and action.cgroup == entry.cgroup and entry.memory_high:
        current = entry.memory_high_before
    return record_memory(entry.memory_qos, action, current)


RECORDERS: Mapping[Part, PartRecorder] = {
    "baseline": PartRecorder(lambda e: e.baseline, _record_baseline),
    "quota": PartRecorder(lambda e: e.quota, _record_quota),
    "cpuset": PartRecorder(lambda e: e.cpuset is not None, _record_cpuset),
    "memory_high": PartRecorder(lambda e: e.memory_high, _record_memory_high),
    "burst": PartRecorder(lambda e: bool(e.burst), _record_burst),
    "quota_burst": PartRecorder(lambda e: e.quota_burst, _record_quota_burst),
    "memory_qos": PartRecorder(lambda e: bool(e.memory_qos), _record_memory_qos),
}

#: Every part a ledger entry can hold.
KNOWN_PARTS: frozenset[Part] = frozenset(RECORDERS)


def held_parts(entry: Touched, among: Iterable[Part] | None = None) -> frozenset[Part]:
    """The parts (of `among`, default all) the entry says Colo changed, and restore would put back."""
    if among is None:
        return frozenset([part for part, r in RECORDERS.items() if r.held(entry)])
    return frozenset([part for part in among if part in RECORDERS and RECORDERS[part].held(entry)])
