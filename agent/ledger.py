"""What Colo changed on which pod cgroup, so it can be restored at shutdown, when a feature is switched
off, when a pod turns online, and after a restart (the ledger survives in a small JSON file)."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass, field

log = logging.getLogger(__name__)


@dataclass
class Touched:
    """One pod's cgroups and the original values Colo will put back."""

    uid: str
    cgroup: str
    shares: int  # kubelet's cpu.shares for the pod (from its request)
    quota_us: int | None  # the pod's own CFS quota (None: unlimited)
    period_us: int
    containers: dict[str, int | None] = field(default_factory=dict)  # container cgroup -> own quota
    cpuset: str | None = None  # the parent's cpuset to return to, when the cpuset policy confined the pod
    memory_high: bool = False
    idle: bool = False


class Ledger:
    def __init__(self, path: str = "") -> None:
        self.path = path
        self.entries: dict[str, Touched] = {}
        self._dirty = False

    def load(self) -> None:
        if not self.path:
            return
        try:
            with open(self.path) as f:
                raw = json.load(f)
            self.entries = {uid: Touched(**e) for uid, e in raw.get("pods", {}).items()}
        except FileNotFoundError:
            return
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            log.warning("enforcement ledger %s unreadable (%s): ignoring it", self.path, exc)
            self.entries = {}

    def record(self, entry: Touched) -> None:
        self.entries[entry.uid] = entry
        self._dirty = True

    def drop(self, uid: str) -> None:
        if self.entries.pop(uid, None) is not None:
            self._dirty = True

    def save(self) -> None:
        """Atomic write, only when something changed."""
        if not self.path or not self._dirty:
            return
        data = json.dumps(
            {"format": "colo-enforcement-ledger", "pods": {u: asdict(e) for u, e in self.entries.items()}}
        )
        directory = os.path.dirname(self.path) or "."
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
