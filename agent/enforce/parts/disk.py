"""The `disk` part: offline pods' per-device throttle limits (v1 `blkio.throttle.*_device` of the pod and
of each of its containers, since v1 throttling is flat; v2 `io.max` of the pod, which holds its subtree).
A write names the limits it asks for (`keys`: rbps, wbps, riops, wiops, those the budget has) and leaves
the others alone, so a pass reads on v1 only the files of those. Its record: each written cgroup's limits
before, per device and limit, whichever write came first (`{cgroup: {"MAJ:MIN": {"wbps": null}}}`, null
for no rule); put back as they were."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from agent.enforce.actions import CgroupIO, Knob, Part, Probe
from agent.enforce.ledger import Touched
from agent.enforce.parts.registry import register
from agent.enforce.parts.spec import PartSpec, RecordIO, RestoreIO
from cgroup import CgroupError, CgroupGone, CgroupWriter
from cgroup.blkio import KEYS, NO_LIMIT, IoLimit, io_limits, set_io_limit

NAME = "disk"
FILE = "io limits"
Limits = tuple[tuple[str, IoLimit], ...]  # ('MAJ:MIN', its limits) per device


def _differ(held: dict[str, IoLimit], device: str, limit: IoLimit, keys: tuple[str, ...]) -> bool:
    now = held.get(device, NO_LIMIT)
    return any(getattr(now, k) != getattr(limit, k) for k in keys)


def _write(writer: CgroupWriter, cgroup: str, limits: Limits, keys: tuple[str, ...], held: dict[str, IoLimit]) -> None:
    for device, limit in limits:
        if _differ(held, device, limit, keys):
            set_io_limit(writer, cgroup, device, limit, keys)


@dataclass(frozen=True, slots=True)
class SetIoLimits(Knob):
    """One cgroup's `keys` limits of some devices; devices and limits not named are left alone."""

    cgroup: str
    limits: Limits
    part: Part = NAME
    uid: str = ""
    keys: tuple[str, ...] = KEYS

    file = FILE

    def probe(self, io: CgroupIO) -> Probe | None:
        held = io_limits(io.reader, self.cgroup, self.keys)
        holds = not any(_differ(held, device, limit, self.keys) for device, limit in self.limits)
        return held, holds, partial(_write, io.writer, self.cgroup, self.limits, self.keys, held)


def _record(io: RecordIO, entry: Touched, action: Any, current: Any) -> bool:
    """Each limit the action writes as it was before Colo's first write of it to that cgroup."""
    assert isinstance(action, SetIoLimits)
    changed = action.cgroup not in entry.parts.get(NAME, {})
    record = entry.parts.setdefault(NAME, {}).setdefault(action.cgroup, {})
    for device, _ in action.limits:
        before = record.setdefault(device, {})
        for key in action.keys:
            if key not in before:
                before[key] = getattr(current.get(device, NO_LIMIT), key)
                changed = True
    return changed


def _restore(io: RestoreIO, entry: Touched) -> bool:
    ok = True
    for cgroup, devices in entry.parts[NAME].items():
        if (cgroup, FILE) in io.asked:
            continue  # the strategy asks values of it in this pass; the record stands
        keys = tuple(k for k in KEYS if any(k in before for before in devices.values()))
        try:
            held = io_limits(io.reader, cgroup, keys)
        except CgroupGone:
            continue
        except CgroupError:
            ok = False
            continue
        for device, before in devices.items():
            limit, asked = IoLimit(**before), tuple(k for k in KEYS if k in before)
            if _differ(held, device, limit, asked):
                write = partial(set_io_limit, io.writer, cgroup, device, limit, asked)
                ok &= io.write(f"restore disk limits of {cgroup}", write)
    return ok


SPEC = PartSpec(NAME, "offline", record=_record, restore=_restore)
register(SPEC, order=100)
