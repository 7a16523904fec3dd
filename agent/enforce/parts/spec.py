"""What a part is: `PartSpec`, and the narrow views of the executor a part's record and restore steps get
(protocols, so a part never imports the executor that runs it)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from agent.enforce.actions import CgroupIO
from agent.enforce.ledger import Touched
from cgroup import CgroupReader

#: online: protects online pods; offline: holds offline pods down (back as soon as a pod is no longer
#: offline); own: the pod's own limit, written until it holds, never recorded and never put back.
Protects = Literal["online", "offline", "own"]


class RecordIO(Protocol):
    """What recording an original may read (agent/enforce/originals.py `Originals`)."""

    @property
    def reader(self) -> CgroupReader: ...

    def record_oom(self, entry: Touched, scores: dict[str, int]) -> None: ...


class RestoreIO(CgroupIO, Protocol):
    """What putting an original back may do (agent/enforce/restore.py `Restorer`): what a knob's probe reads and
    writes through, and guarded, counted writes."""

    #: (cgroup, file) a strategy asks a value of in this pass: not put back
    @property
    def asked(self) -> frozenset[tuple[str, str]]: ...

    def write(self, what: str, fn: Callable[[], Any]) -> bool: ...

    def record_oom(self, entry: Touched, scores: dict[str, int]) -> None: ...


#: (io, entry, the action about to be written, what the cgroup holds now) -> the entry changed
Record = Callable[[RecordIO, Touched, Any, Any], bool]
#: (io, entry) -> everything went back (the entry then forgets the part)
Restore = Callable[[RestoreIO, Touched], bool]
#: (records of the cgroups above pods, the action, what the cgroup holds now) -> the records changed
RecordShared = Callable[[dict[str, Any], Any, Any], bool]
#: (io, cgroup, its record) -> it went back (the record is then dropped)
RestoreShared = Callable[[RestoreIO, str, Any], bool]


@dataclass(frozen=True, slots=True)
class PartSpec:
    """One part. `record` puts the original into the entry's record of the part (`entry.parts[name]`,
    JSON values) before the first write; `restore` puts it back. A part whose originals are the entry's
    CFS quotas (`quota_batch`) is put back in the executor's safe-order quota batch instead. `first_write`
    may adjust a write before the part is held (quota burst: a first raise never lowers what is there).
    `record_shared`/`restore_shared`: the part also writes cgroups no pod owns (`uid` "")."""

    name: str
    protects: Protects
    record: Record | None = None
    restore: Restore | None = None
    quota_batch: bool = False
    first_write: Callable[[Any, Any], Any] | None = None
    record_shared: RecordShared | None = None
    restore_shared: RestoreShared | None = None
    #: the files whose asking in a pass keeps a shared cgroup's record from being put back
    shared_files: frozenset[str] = frozenset()


def mark(entry: Touched, name: str) -> bool:
    """Hold the part with an empty record (its originals are the entry's own values); True when new."""
    if name in entry.parts:
        return False
    entry.parts[name] = {}
    return True


Parts = Mapping[str, PartSpec]
