"""Typed errors of the cgroup layer: callers decide by type, never by parsing messages."""

from __future__ import annotations

import errno
import os


class CgroupError(Exception):
    """Base of every error raised by `cgroup`."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


class CgroupGone(CgroupError):
    """The cgroup was removed (ENOENT/ENODEV mid-read): its pod or container ended."""


class CgroupFileMissing(CgroupError):
    """The cgroup exists but this file does not (kernel without the feature, controller not enabled)."""


class CgroupPermissionError(CgroupError):
    """EACCES/EPERM: the agent lacks the privilege to read or write this file."""


class CgroupParseError(CgroupError):
    """The file's content does not have the format the kernel documents."""

    def __init__(self, path: str, content: bytes | str, expected: str) -> None:
        shown = content if isinstance(content, str) else content[:120].decode("utf-8", "replace")
        super().__init__(path, f"malformed content {shown!r}, expected {expected}")
        self.content = content
        self.expected = expected


class CgroupWriteError(CgroupError):
    """The kernel rejected a write; the file keeps its old value."""

    def __init__(self, path: str, value: str, err: int) -> None:
        super().__init__(path, f"write {value!r} rejected: {os.strerror(err)} ({errno.errorcode.get(err, err)})")
        self.value = value
        self.errno = err
        self.strerror = os.strerror(err)


class CgroupValueError(CgroupError):
    """A value was refused by validation before anything was written."""

    def __init__(self, path: str, value: object, allowed: str) -> None:
        super().__init__(path, f"invalid value {value!r}: {allowed}")
        self.value = value


class Unsupported(CgroupError):
    """The operation has no equivalent on this cgroup version (e.g. memory.high on v1)."""


def classify_os_error(path: str, exc: OSError, *, cgroup_dir: str | None = None) -> CgroupError:
    """Turn an OSError from cgroupfs into the typed error callers act on."""
    if exc.errno in (errno.EACCES, errno.EPERM):
        return CgroupPermissionError(path, os.strerror(exc.errno))
    if exc.errno == errno.ENODEV:
        return CgroupGone(path, "cgroup removed")
    if exc.errno in (errno.EOPNOTSUPP, errno.ENOTSUP):
        return Unsupported(path, "the kernel does not support this file here (e.g. booted with psi=0)")
    if exc.errno == errno.ENOENT:
        if cgroup_dir is not None and os.path.isdir(cgroup_dir):
            return CgroupFileMissing(path, "no such file in an existing cgroup")
        return CgroupGone(path, "cgroup removed")
    return CgroupError(path, f"{os.strerror(exc.errno or 0)} ({exc.errno})")
