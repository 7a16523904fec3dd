"""Per part of a pod (agent/actions.py `Part`): whether its ledger entry holds that part (so restore has
something to put back), and how the original is recorded before the executor's first write of it.

Adding a part: a field on `Touched` (agent/ledger.py) for its original, one recorder function and one
`held` test here, and its restore step in agent/restore.py. Parts in `OWN_LIMITS` are the pod's own
limits: never recorded, never restored, so they need nothing here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.actions import Action, Part, SetCpuIdle, SetOomScoreAdj
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
    if entry.memory_high:
        return False
    entry.memory_high, entry.memory_high_before = True, current
    return True


RECORDERS: Mapping[Part, PartRecorder] = {
    "baseline": PartRecorder(lambda e: e.baseline, _record_baseline),
    "quota": PartRecorder(lambda e: e.quota, _record_quota),
    "cpuset": PartRecorder(lambda e: e.cpuset is not None, _record_cpuset),
    "memory_high": PartRecorder(lambda e: e.memory_high, _record_memory_high),
}


def held_parts(entry: Touched) -> frozenset[Part]:
    """Every part the entry says Colo changed (and restore would put back)."""
    return frozenset(part for part, r in RECORDERS.items() if r.held(entry))
