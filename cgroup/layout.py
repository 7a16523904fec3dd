"""Which cgroup hierarchies the host has and where they are mounted, from mountinfo.

The DaemonSet mounts the host's / (or its /proc and /sys/fs/cgroup) under a prefix such as /host, so every
path here is the host's path with that prefix in front.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

from cgroup.errors import CgroupError

CgroupMode = Literal["v1", "v2", "hybrid"]
RESOURCE_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids", "blkio")


@dataclass(frozen=True, slots=True)
class Mount:
    """One cgroup mount: where it is (with the host prefix) and which part of the hierarchy it shows."""

    path: str
    root: str = "/"


@dataclass(frozen=True)
class Layout:
    """The host's cgroup layout. `mode` is hybrid when v1 controllers are used beside a v2 `unified` mount."""

    mode: CgroupMode
    v1: dict[str, Mount] = field(default_factory=dict)
    unified: Mount | None = None
    host_root: str = "/"

    @property
    def is_v2(self) -> bool:
        """True when resource controllers live on the unified hierarchy."""
        return self.mode == "v2"

    def dir(self, controller: str, cgroup: str) -> str:
        """Absolute directory of a cgroup path (e.g. '/kubepods/burstable') for a controller."""
        mount = self.unified if self.is_v2 else self.v1.get(controller)
        if mount is None:
            raise CgroupError(cgroup, f"controller {controller!r} is not mounted ({self.describe()})")
        return _join(mount, cgroup)

    def unified_dir(self, cgroup: str) -> str | None:
        """The cgroup's directory on the v2 hierarchy (PSI lives there even on hybrid hosts), if mounted."""
        return None if self.unified is None else _join(self.unified, cgroup)

    def describe(self) -> str:
        parts = [f"mode={self.mode}"]
        if self.v1:
            parts.append("v1=" + ",".join(f"{c}:{m.path}" for c, m in sorted(self.v1.items())))
        if self.unified:
            parts.append(f"unified={self.unified.path}")
        return " ".join(parts)


def _join(mount: Mount, cgroup: str) -> str:
    rel = cgroup if cgroup.startswith("/") else "/" + cgroup
    if mount.root != "/" and (rel == mount.root or rel.startswith(mount.root + "/")):
        rel = rel[len(mount.root) :]
    rel = rel.rstrip("/")
    return mount.path + rel if rel else mount.path


def _unescape(field_: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040...)."""
    if "\\" not in field_:
        return field_
    out: list[str] = []
    i = 0
    while i < len(field_):
        if field_[i] == "\\" and i + 4 <= len(field_) and field_[i + 1 : i + 4].isdigit():
            out.append(chr(int(field_[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field_[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str, host_root: str = "/") -> Layout:
    """Build the layout from mountinfo text (see proc(5)); mount points get the host prefix."""
    prefix = host_root.rstrip("/")
    v1: dict[str, Mount] = {}
    unified: Mount | None = None
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        lf = left.split()
        rf = right.split()
        if len(lf) < 5 or len(rf) < 3:
            continue
        fstype = rf[0]
        root, mountpoint = _unescape(lf[3]), prefix + _unescape(lf[4])
        if fstype == "cgroup2":
            unified = Mount(mountpoint, root)
        elif fstype == "cgroup":
            for opt in rf[2].split(","):
                if opt in RESOURCE_CONTROLLERS and opt not in v1:
                    v1[opt] = Mount(mountpoint, root)
    return _decide(v1, unified, host_root)


def _decide(v1: dict[str, Mount], unified: Mount | None, host_root: str) -> Layout:
    if "cpu" in v1 or "memory" in v1:
        return Layout("hybrid" if unified else "v1", v1, unified, host_root)
    if unified is not None:
        return Layout("v2", {}, unified, host_root)
    raise CgroupError("mountinfo", "no cgroup v1 cpu/memory controller and no cgroup2 mount found")


def _probe_filesystem(host_root: str) -> Layout:
    """Fallback when mountinfo is unreadable: look at the conventional /sys/fs/cgroup layout."""
    base = os.path.join(host_root, "sys/fs/cgroup")
    if os.path.exists(os.path.join(base, "cgroup.controllers")):
        return Layout("v2", {}, Mount(base), host_root)
    v1: dict[str, Mount] = {}
    for name in os.listdir(base) if os.path.isdir(base) else []:
        for ctrl in name.split(","):
            if ctrl in RESOURCE_CONTROLLERS and ctrl not in v1:
                v1[ctrl] = Mount(os.path.join(base, name))
    uni = os.path.join(base, "unified")
    return _decide(v1, Mount(uni) if os.path.exists(os.path.join(uni, "cgroup.procs")) else None, host_root)


def detect_layout(host_root: str = "/") -> Layout:
    """Detect from the host's mountinfo (host PID 1's, so a containerised agent sees the host's mounts)."""
    candidates = [os.path.join(host_root, "proc/1/mountinfo")]
    if host_root.rstrip("/") == "":
        candidates.append("/proc/self/mountinfo")
    for path in candidates:
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            continue
        try:
            return parse_mountinfo(text, host_root)
        except CgroupError:
            continue
    return _probe_filesystem(host_root)
