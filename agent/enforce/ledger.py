"""What Colo changed on which pod cgroup, and the values it found there, so it can put them back at shutdown,
when a feature is switched off, when a pod turns online, and after a restart (the ledger survives in a small
JSON file). An entry is saved before Colo's first write to a pod: a crash between the two can leave nothing
that cannot be restored.

Upgrades and rollbacks (docs/install.md#upgrades-and-rollbacks): a file of an older version is migrated on
load; each file is also written so that the release before parts (version 1, which reads no `version` key)
finds every original it knows after a crash of this one: each entry carries that release's fields beside
`parts` (`previous_release_fields`), and `shared` is in its layout (memory QoS only; every part's is in
`shared_parts`). A file of a newer version is never misread nor moved aside: loading it raises
`LedgerTooNew`, and the agent refuses to start with one line naming both versions."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from common.config import ConfigError

log = logging.getLogger(__name__)


FORMAT = "colo-enforcement-ledger"
#: 1 (no `version` key): one field per part on each entry, `shared` memory QoS's only; 2: `parts` per entry,
#: `shared` per part; 3: 2 with version 1's fields beside `parts` and `shared` in version 1's layout, every
#: part's shared records in `shared_parts` (what the release before parts reads after a crash of this one).
VERSION = 3


class LedgerTooNew(ConfigError):
    """The ledger was written by a newer Colo: reading it would lose the originals this one cannot read."""


@dataclass
class Touched:
    """One pod's cgroups and the values read there before Colo's first write, which restore puts back: the
    pod's own CPU values (taken at first sight, kept in step with its containers) and, per part Colo changed
    (agent/enforce/parts/), that part's record of what it found (`parts`: part name -> JSON values)."""

    uid: str
    cgroup: str
    shares: int  # the pod's cpu.shares (v2: the shares equivalent of its weight)
    quota_us: int | None  # the pod's CFS quota (None: unlimited)
    period_us: int
    containers: dict[str, int | None] = field(default_factory=dict)  # container cgroup -> its CFS quota
    container_periods: dict[str, int] = field(default_factory=dict)  # container cgroup -> its CFS period
    weight: int | None = None  # v2: the pod's cpu.weight
    oom_default: int | None = None  # kubelet's oom_score_adj for the pod: for processes seen only later
    from_spec: bool = False  # no trustworthy value in the cgroups: the originals are kubelet's, from the spec
    parts: dict[str, Any] = field(default_factory=dict)  # a part held -> its record (agent/enforce/parts/)

    def holds(self, part: str) -> bool:
        return part in self.parts


_FIELDS = {f.name for f in dataclasses.fields(Touched)}


def _v1_parts(raw: dict[str, Any]) -> dict[str, Any]:
    """The per-part records of an entry written by a version-1 ledger (one field per part; an entry older
    still has no `quota` or `baseline` flag: it had its quotas and its baseline changed). Every original it
    holds is kept: oom_score_adj values outside a held baseline were put back already."""
    parts: dict[str, Any] = {}
    if raw.get("baseline", True):
        parts["baseline"] = {
            "idle": bool(raw.get("idle", False)),
            "oom_score_adj": dict(raw.get("oom_score_adj") or {}),
        }
    if raw.get("quota", True):
        parts["quota"] = {}
    if raw.get("cpuset") is not None:
        parts["cpuset"] = {"pod": raw["cpuset"], "containers": dict(raw.get("container_cpusets") or {})}
    if raw.get("memory_high"):
        parts["memory_high"] = {"before": raw.get("memory_high_before")}
    if raw.get("burst"):
        parts["burst"] = dict(raw["burst"])
    if raw.get("quota_burst"):
        parts["quota_burst"] = {}
    if raw.get("memory_qos"):
        parts["memory_qos"] = {str(cg): dict(r) for cg, r in raw["memory_qos"].items()}
    return parts


def previous_release_fields(parts: dict[str, Any]) -> dict[str, Any]:
    """An entry's parts as the release before parts (ledger version 1) reads them: the inverse of `_v1_parts`
    for the parts it knew (quota, baseline, cpuset, memory.high, CPU burst, quota burst, memory QoS). Every
    flag is written, also when false: that release takes a missing `quota` or `baseline` for true."""
    baseline, cpuset, memory_high = parts.get("baseline"), parts.get("cpuset"), parts.get("memory_high")
    return {
        "quota": "quota" in parts,
        "baseline": baseline is not None,
        "idle": bool((baseline or {}).get("idle", False)),
        "oom_score_adj": dict((baseline or {}).get("oom_score_adj") or {}),
        "cpuset": None if cpuset is None else cpuset.get("pod"),
        "container_cpusets": dict((cpuset or {}).get("containers") or {}),
        "memory_high": memory_high is not None,
        "memory_high_before": (memory_high or {}).get("before"),
        "burst": dict(parts.get("burst") or {}),
        "quota_burst": "quota_burst" in parts,
        "memory_qos": {str(cg): dict(r) for cg, r in (parts.get("memory_qos") or {}).items()},
    }


def _entry(raw: dict[str, Any], version: int) -> Touched:
    """An entry from the file, migrated from version 1 when the file is that old."""
    known = {k: v for k, v in raw.items() if k in _FIELDS}
    if version < 2:
        known["parts"] = _v1_parts(raw)
    return Touched(**known)


class Ledger:
    """Pod entries plus the QoS tiers Colo capped (tier cgroup -> its CFS period before the cap) and, per
    part, the cgroups above pods it changed (`shared`: part -> cgroup -> that part's record of it). A file
    written by an older Colo is migrated on load (see `_v1_parts`) and saved in the new format.

    The file is replaced atomically and the previous version kept as `<file>.bak`, so a crash between the
    two renames, or a file damaged on disk, still leaves a readable record. A file that cannot be read is
    moved aside (`<file>.corrupt-<time>`), never overwritten, and `trusted` turns False: values found in the
    cgroups may then be Colo's own, so originals come from the pod spec (see the enforcer). `problem` says
    what happened, once, for a node Event.
    """

    def __init__(self, path: str = "") -> None:
        self.path = path
        self.entries: dict[str, Touched] = {}
        self.tiers: dict[str, int] = {}
        self.shared: dict[str, dict[str, Any]] = {}  # part -> cgroup above pods -> its record
        self.trusted = True
        self.problem: str | None = None
        self.save_failed = False  # the last save did not reach the disk: nothing may be written over originals
        self._dirty = False

    @property
    def backup(self) -> str:
        return self.path + ".bak"

    def _read(self, path: str) -> tuple[dict[str, Touched], dict[str, int], dict[str, dict[str, Any]]]:
        with open(path) as f:
            raw = json.load(f)
        if not isinstance(raw, dict) or raw.get("format", FORMAT) != FORMAT:
            raise ValueError("not a Colo enforcement ledger")
        version = int(raw.get("version", 1))
        if version > VERSION:
            raise LedgerTooNew(
                f"enforcement ledger {path} is version {version}, written by a newer colo-agent, and this one reads "
                f"up to version {VERSION}: it would lose the originals it cannot read. Start the newer colo-agent "
                "again and stop it cleanly (it restores every cgroup) before going back; "
                "docs/install.md#upgrades-and-rollbacks"
            )
        entries = {str(uid): _entry(e, version) for uid, e in (raw.get("pods") or {}).items()}
        tiers = {str(k): int(v) for k, v in (raw.get("tiers") or {}).items()}
        shared_raw = raw.get("shared_parts" if version >= 3 else "shared") or {}
        if version < 2:  # only memory QoS wrote cgroups above pods
            shared_raw = {"memory_qos": shared_raw} if shared_raw else {}
        shared = {str(part): dict(records) for part, records in shared_raw.items()}
        if version < VERSION and (entries or shared):
            self._dirty = True  # written in the new format at the next save (the old one stays as the backup)
        return entries, tiers, shared

    def load(self) -> None:
        """The file, else its backup (a crash between the renames of a save); a damaged file is kept aside."""
        if not self.path:
            return
        problems: list[str] = []
        for path in (self.path, self.backup):
            try:
                self.entries, self.tiers, self.shared = self._read(path)
            except FileNotFoundError:
                continue
            except LedgerTooNew:
                raise  # never moved aside nor overwritten: the newer agent reads it
            except (OSError, ValueError, TypeError, AttributeError) as exc:
                aside = f"{path}.corrupt-{int(time.time())}"
                with contextlib.suppress(OSError):
                    os.replace(path, aside)
                problems.append(f"{path} unreadable ({exc}), kept as {aside}")
                self.entries, self.tiers, self.shared = {}, {}, {}
                continue
            if path == self.backup and not problems:
                log.warning("enforcement ledger %s missing: using its backup %s", self.path, path)
            break
        if problems:
            # values in the cgroups may be Colo's own from here on: originals come from the pod spec
            self.trusted = False
            self.problem = "enforcement ledger " + "; ".join(problems) + "; originals taken from the pod specs"
            log.warning("%s", self.problem)
            self._dirty = True  # a good file replaces the damaged one at the first save

    def record(self, entry: Touched) -> None:
        self.entries[entry.uid] = entry
        self._dirty = True

    def changed(self) -> None:
        """An entry was modified in place: the next save writes it."""
        self._dirty = True

    def drop(self, uid: str) -> None:
        if self.entries.pop(uid, None) is not None:
            self._dirty = True

    def record_tier(self, cgroup: str, period_us: int) -> None:
        if cgroup not in self.tiers:
            self.tiers[cgroup] = period_us
            self._dirty = True

    def drop_tier(self, cgroup: str) -> None:
        if self.tiers.pop(cgroup, None) is not None:
            self._dirty = True

    def save(self) -> bool:
        """Atomic write, only when something changed (an in-memory ledger, no path, never touches disk);
        the previous file becomes the backup. False when the record could not be written: the caller must
        not change a cgroup whose original it describes."""
        if not self.path or not self._dirty:
            return True
        data = json.dumps(
            {
                "format": FORMAT,
                "version": VERSION,
                "pods": {u: {**previous_release_fields(e.parts), **asdict(e)} for u, e in self.entries.items()},
                "tiers": self.tiers,
                "shared": dict(self.shared.get("memory_qos") or {}),  # the release before parts reads this layout
                "shared_parts": self.shared,
            }
        )
        directory = os.path.dirname(self.path) or "."
        tmp: str | None = None
        try:
            os.makedirs(directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".ledger.")
            with os.fdopen(fd, "w") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if os.path.exists(self.path):
                os.replace(self.path, self.backup)
            os.replace(tmp, self.path)
            tmp = None
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)  # the renames themselves survive a power cut
            finally:
                os.close(dir_fd)
        except OSError as exc:
            if not self.save_failed:
                log.warning(
                    "cannot save enforcement ledger %s: %s; no cgroup is changed until it can be", self.path, exc
                )
            self.save_failed = True
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            return False
        if self.save_failed:
            log.warning("enforcement ledger %s saved again: enforcement resumes", self.path)
        self.save_failed = False
        self._dirty = False
        return True
