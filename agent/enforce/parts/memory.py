"""Memory parts on cgroup v2: `memory_high` throttles offline pods (its record: the pod's memory.high
before), `memory_qos` protects online pods (memory.min / low / high of their cgroups and of the cgroups
above them up to kubepods; its record: each cgroup's files before, per file, whichever write came first).
Both may write a pod's memory.high (a pod that changes class): one original per file, kept by whichever
part wrote it first, and a file a strategy asks for in the pass is not put back."""

from __future__ import annotations

from functools import partial
from typing import Any

from agent.enforce.actions import SetMemoryHigh, SetMemoryProtection
from agent.enforce.ledger import Touched
from agent.enforce.parts.registry import register
from agent.enforce.parts.spec import PartSpec, RecordIO, RestoreIO
from cgroup import CgroupError, CgroupGone

MEMORY_HIGH, MEMORY_QOS = "memory_high", "memory_qos"
FILES = frozenset({"memory.min", "memory.low", "memory.high"})


def record_memory(records: dict[str, Any], action: Any, current: Any) -> bool:
    """memory.min / low / high of a cgroup before Colo's first write of that file."""
    assert isinstance(action, SetMemoryProtection | SetMemoryHigh)
    name = action.kind if isinstance(action, SetMemoryProtection) else "high"
    record = records.setdefault(action.cgroup, {})
    if name in record:
        return False
    if isinstance(action, SetMemoryProtection):
        record[name] = current.min_bytes if name == "min" else current.low_bytes
    else:
        record[name] = current
    return True


def _record_high(io: RecordIO, entry: Touched, action: Any, current: Any) -> bool:
    """The pod's memory.high before ANY Colo part wrote it: memory QoS's record of it when it has one (a pod
    that was online), else what is there now."""
    if MEMORY_HIGH in entry.parts:
        return False
    qos = entry.parts.get(MEMORY_QOS, {}).get(entry.cgroup, {})
    entry.parts[MEMORY_HIGH] = {"before": qos.get("high", current)}
    return True


def _record_qos(io: RecordIO, entry: Touched, action: Any, current: Any) -> bool:
    """As `record_memory`; the pod's memory.high that offline enforcement changed has its original there."""
    if isinstance(action, SetMemoryHigh) and action.cgroup == entry.cgroup and MEMORY_HIGH in entry.parts:
        current = entry.parts[MEMORY_HIGH].get("before")
    return record_memory(entry.parts.setdefault(MEMORY_QOS, {}), action, current)


def _restore_high(io: RestoreIO, entry: Touched) -> bool:
    cg, before = entry.cgroup, entry.parts[MEMORY_HIGH].get("before")
    if (cg, "memory.high") in io.asked:
        return True  # memory QoS asks for it now and holds the same original
    return io.write(f"restore memory.high of {cg}", partial(io.writer.set_memory_high, cg, before))


def restore_files(io: RestoreIO, records: dict[str, Any]) -> bool:
    """memory.min / low / high of each recorded cgroup as they were."""
    ok, w = True, io.writer
    for cg, record in records.items():
        try:
            now = io.reader.memory_protection(cg)
        except CgroupGone:
            continue
        except CgroupError:
            ok = False
            continue
        held = {"min": now.min_bytes, "low": now.low_bytes, "high": now.high_bytes}
        for name, before in record.items():
            if held.get(name) == before or (cg, f"memory.{name}") in io.asked:
                continue
            if name == "high":
                write = partial(w.set_memory_high, cg, before)
            else:
                write = partial(w.set_memory_min if name == "min" else w.set_memory_low, cg, before or 0)
            ok &= io.write(f"restore memory.{name} of {cg}", write)
    return ok


MEMORY_HIGH_SPEC = PartSpec(MEMORY_HIGH, "offline", record=_record_high, restore=_restore_high)
MEMORY_QOS_SPEC = PartSpec(
    MEMORY_QOS,
    "online",
    record=_record_qos,
    restore=lambda io, entry: restore_files(io, entry.parts[MEMORY_QOS]),
    record_shared=record_memory,
    restore_shared=lambda io, cg, record: restore_files(io, {cg: record}),
    shared_files=FILES,
)
register(MEMORY_HIGH_SPEC, order=40)
register(MEMORY_QOS_SPEC, order=70)
