"""What Colo changed on which pod cgroup, and the values it found there, so it can put them back at shutdown,
when a feature is switched off, when a pod turns online, and after a restart (the ledger survives in a small
JSON file). An entry is saved before Colo's first write to a pod: a crash between the two can leave nothing
that cannot be restored."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class Touched:
    """One pod's cgroups and the values read there before Colo's first write, which restore puts back."""

    uid: str
    cgroup: str
    shares: int  # the pod's cpu.shares (v2: the shares equivalent of its weight)
    quota_us: int | None  # the pod's CFS quota (None: unlimited)
    period_us: int
    containers: dict[str, int | None] = field(default_factory=dict)  # container cgroup -> its CFS quota
    container_periods: dict[str, int] = field(default_factory=dict)  # container cgroup -> its CFS period
    weight: int | None = None  # v2: the pod's cpu.weight
    quota: bool = False  # Colo wrote CFS quotas (restored when the cfsQuota policy is off or releases the pod)
    cpuset: str | None = None  # the pod's cpuset.cpus before the cpuset policy confined it
    container_cpusets: dict[str, str] = field(default_factory=dict)
    memory_high: bool = False  # Colo wrote memory.high ...
    memory_high_before: int | None = None  # ... over this value (None: max)
    oom_score_adj: dict[str, int] = field(default_factory=dict)  # cgroup with processes -> kubelet's value
    oom_default: int | None = None  # kubelet's formula for the pod: for processes seen only later
    idle: bool = False  # Colo set cpu.idle (informative: restore clears it whenever it is set)


_FIELDS = {f.name for f in dataclasses.fields(Touched)}


def _entry(raw: dict[str, Any]) -> Touched:
    """An entry from the file; one written by an older Colo (no `quota` flag) had its quotas changed."""
    known = {k: v for k, v in raw.items() if k in _FIELDS}
    known.setdefault("quota", True)
    return Touched(**known)


class Ledger:
    """Pod entries plus the QoS tiers Colo capped (tier cgroup -> its CFS period before the cap)."""

    def __init__(self, path: str = "") -> None:
        self.path = path
        self.entries: dict[str, Touched] = {}
        self.tiers: dict[str, int] = {}
        self._dirty = False

    def load(self) -> None:
        if not self.path:
            return
        try:
            with open(self.path) as f:
                raw = json.load(f)
            self.entries = {uid: _entry(e) for uid, e in raw.get("pods", {}).items()}
            self.tiers = {str(k): int(v) for k, v in (raw.get("tiers") or {}).items()}
        except FileNotFoundError:
            return
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            log.warning("enforcement ledger %s unreadable (%s): ignoring it", self.path, exc)
            self.entries, self.tiers = {}, {}

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

    def save(self) -> None:
        """Atomic write, only when something changed; an in-memory ledger (no path) never touches disk."""
        if not self.path or not self._dirty:
            return
        data = json.dumps(
            {
                "format": "colo-enforcement-ledger",
                "pods": {u: asdict(e) for u, e in self.entries.items()},
                "tiers": self.tiers,
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
            os.replace(tmp, self.path)
            self._dirty = False
        except OSError as exc:
            log.warning("cannot save enforcement ledger %s: %s", self.path, exc)
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
