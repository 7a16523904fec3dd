"""The `disk` part: offline pods' per-device throttle limits (v1 `blkio.throttle.*_device` of the pod and
of each of its containers, since v1 throttling is flat; v2 `io.max` of the pod, which holds its subtree).
Its record: each written cgroup's limits before, per device, whichever write came first
(`{cgroup: {"MAJ:MIN": [rbps, wbps, riops, wiops]}}`, null for no rule); put back as they were."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from agent.actions import CgroupIO, Knob, Part, Probe
from agent.ledger import Touched
from agent.parts.spec import PartSpec, RecordIO, RestoreIO
from cgroup import CgroupError, CgroupGone, CgroupWriter
from cgroup.blkio import NO_LIMIT, IoLimit, io_limits, set_io_limit

NAME = "disk"
FILE = "io limits"


def _write(writer: CgroupWriter, cgroup: str, limits: tuple[tuple[str, IoLimit], ...],
           held: dict[str, IoLimit]) -> None:  # fmt: skip
    for device, limit in limits:
        if held.get(device, NO_LIMIT) != limit:
            set_io_limit(writer, cgroup, device, limit)


@dataclass(frozen=True, slots=True)
class SetIoLimits(Knob):
    """One cgroup's limits of some devices ('MAJ:MIN' -> IoLimit); devices not named are left alone."""

    cgroup: str
    limits: tuple[tuple[str, IoLimit], ...]
    part: Part = NAME
    uid: str = ""

    file = FILE

    def probe(self, io: CgroupIO) -> Probe | None:
        held = io_limits(io.reader, self.cgroup)
        holds = all(held.get(device, NO_LIMIT) == limit for device, limit in self.limits)
        return held, holds, partial(_write, io.writer, self.cgroup, self.limits, held)


def _record(io: RecordIO, entry: Touched, action: Any, current: Any) -> bool:
    """The limits of each device the action writes, before Colo's first write of it to that cgroup."""
    assert isinstance(action, SetIoLimits)
    changed = action.cgroup not in entry.parts.get(NAME, {})
    record = entry.parts.setdefault(NAME, {}).setdefault(action.cgroup, {})
    for device, _ in action.limits:
        if device not in record:
            record[device] = list(current.get(device, NO_LIMIT).values())
            changed = True
    return changed


def _restore(io: RestoreIO, entry: Touched) -> bool:
    ok = True
    for cgroup, devices in entry.parts[NAME].items():
        if (cgroup, FILE) in io.asked:
            continue  # the strategy asks values of it in this pass; the record stands
        try:
            held = io_limits(io.reader, cgroup)
        except CgroupGone:
            continue
        except CgroupError:
            ok = False
            continue
        limits = tuple((device, IoLimit(*before)) for device, before in devices.items())
        if any(held.get(device, NO_LIMIT) != limit for device, limit in limits):
            ok &= io.write(f"restore disk limits of {cgroup}", partial(_write, io.writer, cgroup, limits, held))
    return ok


SPEC = PartSpec(NAME, "offline", record=_record, restore=_restore)
