"""A cgroup's disk files: its per-device throttle limits and its I/O counters, v1 (`blkio.throttle.*`) and v2
(`io.max`, `io.stat`). Devices are 'MAJ:MIN' strings, as the kernel prints them.

v1 throttling is flat (a limit on a pod cgroup does not hold the processes of its container cgroups: only
v2 throttles a whole subtree), so a v1 caller writes every cgroup it means to hold. v1 removes a rule with a
value of 0, v2 with `max`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

from cgroup.errors import CgroupError, CgroupParseError
from cgroup.files import write_value
from cgroup.reader import CgroupReader
from cgroup.writer import CgroupWriter

#: the four limits, in io.max's order and with its keys
KEYS = ("rbps", "wbps", "riops", "wiops")
V1_FILES = {
    "rbps": "blkio.throttle.read_bps_device",
    "wbps": "blkio.throttle.write_bps_device",
    "riops": "blkio.throttle.read_iops_device",
    "wiops": "blkio.throttle.write_iops_device",
}
V1_BYTES, V1_IOS = "blkio.throttle.io_service_bytes_recursive", "blkio.throttle.io_serviced_recursive"


@dataclass(frozen=True, slots=True)
class IoLimit:
    """Bytes per second and I/O operations per second of one device; None: no limit."""

    rbps: int | None = None
    wbps: int | None = None
    riops: int | None = None
    wiops: int | None = None

    def values(self) -> tuple[int | None, ...]:
        return (self.rbps, self.wbps, self.riops, self.wiops)


NO_LIMIT = IoLimit()


@dataclass(frozen=True, slots=True)
class IoCounters:
    """Cumulative bytes and operations of one device."""

    read_bytes: int
    write_bytes: int
    reads: int
    writes: int


def _dir(layout_dir: str, name: str) -> str:
    return f"{layout_dir}/{name}"


def _parse_v1_device_values(path: str, data: bytes) -> dict[str, int]:
    """'MAJ:MIN value' lines (v1 throttle rules)."""
    out: dict[str, int] = {}
    try:
        for line in data.splitlines():
            if line.strip():
                dev, value = line.split()
                out[dev.decode()] = int(value)
    except ValueError:
        raise CgroupParseError(path, data, "lines of 'MAJ:MIN integer'") from None
    return out


def parse_io_max(path: str, data: bytes) -> dict[str, IoLimit]:
    """v2 io.max: 'MAJ:MIN rbps=N wbps=max riops=max wiops=max' per device with a rule."""
    out: dict[str, IoLimit] = {}
    try:
        for line in data.splitlines():
            fields = line.split()
            if not fields:
                continue
            kv = dict(f.decode().split("=", 1) for f in fields[1:])
            values = [None if kv.get(k, "max") == "max" else int(kv[k]) for k in KEYS]
            out[fields[0].decode()] = IoLimit(*values)
    except ValueError:
        raise CgroupParseError(path, data, "lines of 'MAJ:MIN rbps=.. wbps=.. riops=.. wiops=..'") from None
    return out


def io_limits(reader: CgroupReader, cgroup: str, keys: Sequence[str] = KEYS) -> dict[str, IoLimit]:
    """Every device the cgroup has a throttle rule for, with its limits (v1: only the files of `keys` are
    read, the others come back None). Descriptors stay open: the enforcement pass compares every second."""
    layout, read = reader.layout, reader.files.read
    if layout.is_v2:
        path = _dir(layout.dir("io", cgroup), "io.max")
        return parse_io_max(path, read(path))
    d = layout.dir("blkio", cgroup)
    per_key: dict[str, dict[str, int]] = {}
    for key in keys:
        path = _dir(d, V1_FILES[key])
        per_key[key] = _parse_v1_device_values(path, read(path))
    devices = {dev for values in per_key.values() for dev in values}
    return {dev: IoLimit(*((per_key.get(k) or {}).get(dev) or None for k in KEYS)) for dev in devices}


def set_io_limit(writer: CgroupWriter, cgroup: str, device: str, limit: IoLimit, keys: Sequence[str] = KEYS) -> None:
    """The device's limits of `keys` as `limit` says (None removes that rule); the others are left alone."""
    values = {k: getattr(limit, k) for k in keys}
    for value in values.values():
        if value is not None and (isinstance(value, bool) or value <= 0):
            raise CgroupError(cgroup, f"disk limit {value} of {device}: must be a positive integer")
    layout = writer.layout
    if layout.is_v2:
        text = " ".join(f"{k}={'max' if v is None else v}" for k, v in values.items())
        write_value(_dir(layout.dir("io", cgroup), "io.max"), f"{device} {text}")
        return
    d = layout.dir("blkio", cgroup)
    for key, value in values.items():
        write_value(_dir(d, V1_FILES[key]), f"{device} {value or 0}")


def _parse_v1_stat(path: str, data: bytes) -> dict[str, tuple[int, int]]:
    """(Read, Write) per device of a v1 throttle counter file ('MAJ:MIN Read N' lines, then 'Total N')."""
    out: dict[str, list[int]] = {}
    try:
        for line in data.splitlines():
            fields = line.split()
            if len(fields) == 3 and fields[1] in (b"Read", b"Write"):
                pair = out.setdefault(fields[0].decode(), [0, 0])
                pair[0 if fields[1] == b"Read" else 1] = int(fields[2])
    except ValueError:
        raise CgroupParseError(path, data, "lines of 'MAJ:MIN Read|Write integer'") from None
    return {dev: (r, w) for dev, (r, w) in out.items()}


def parse_io_stat(path: str, data: bytes) -> dict[str, IoCounters]:
    """v2 io.stat: 'MAJ:MIN rbytes=N wbytes=N rios=N wios=N dbytes=N dios=N' per device."""
    out: dict[str, IoCounters] = {}
    try:
        for line in data.splitlines():
            fields = line.split()
            if not fields:
                continue
            kv = dict(f.split(b"=", 1) for f in fields[1:])
            out[fields[0].decode()] = IoCounters(
                int(kv.get(b"rbytes", 0)), int(kv.get(b"wbytes", 0)), int(kv.get(b"rios", 0)), int(kv.get(b"wios", 0))
            )
    except ValueError:
        raise CgroupParseError(path, data, "lines of 'MAJ:MIN key=integer ...'") from None
    return out


def io_counters(reader: CgroupReader, cgroup: str) -> dict[str, IoCounters]:
    """The cgroup's bytes and operations per device, its whole subtree (v1: the recursive throttle counters)."""
    layout, read = reader.layout, reader.files.read
    if layout.is_v2:
        path = _dir(layout.dir("io", cgroup), "io.stat")
        return parse_io_stat(path, read(path))
    d = layout.dir("blkio", cgroup)
    bytes_path, ios_path = _dir(d, V1_BYTES), _dir(d, V1_IOS)
    nbytes = _parse_v1_stat(bytes_path, read(bytes_path))
    ios = _parse_v1_stat(ios_path, read(ios_path))
    return {dev: IoCounters(*nbytes.get(dev, (0, 0)), *ios.get(dev, (0, 0))) for dev in nbytes.keys() | ios.keys()}


def forget_io(reader: CgroupReader, cgroup: str) -> None:
    """Close the descriptors of a cgroup that is gone (v1: the blkio hierarchy's; v2 shares the cpu one's)."""
    if not reader.layout.is_v2:
        with contextlib.suppress(CgroupError):
            reader.files.forget(reader.layout.dir("blkio", cgroup))
