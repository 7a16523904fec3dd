"""CFS burst of online pods. Its record: each cgroup's burst (µs) before Colo's first burst there."""

from __future__ import annotations

from functools import partial
from typing import Any

from agent.enforce.ledger import Touched
from agent.enforce.parts.registry import register
from agent.enforce.parts.spec import PartSpec, RecordIO, RestoreIO
from cgroup import CgroupError, CgroupGone

NAME = "burst"


def _record(io: RecordIO, entry: Touched, action: Any, current: Any) -> bool:
    record: dict[str, int] = entry.parts.setdefault(NAME, {})
    if action.cgroup in record:
        return False
    record[action.cgroup] = int(current)
    return True


def _restore(io: RestoreIO, entry: Touched) -> bool:
    """Each cgroup's burst as it was (run before the CFS quota batch: a burst only ever goes down here)."""
    ok, w = True, io.writer
    for cg, before in entry.parts[NAME].items():
        try:
            if io.reader.cpu_burst(cg) == before:
                continue
        except CgroupGone:
            continue
        except CgroupError:
            ok = False
            continue
        ok &= io.write(f"restore the CFS burst of {cg}", partial(w.set_cpu_burst, cg, before))
    return ok


SPEC = PartSpec(NAME, "online", record=_record, restore=_restore)
register(SPEC, order=50)  # before the CFS quota batch: a burst only ever goes down there
