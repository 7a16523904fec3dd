"""Write CPU and memory limits safely: validate first, write in the kernel's format, order multi-level
changes so no intermediate state is rejected (loosen parents before children, tighten children first).
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cgroup.errors import (
    CgroupError,
    CgroupFileMissing,
    CgroupGone,
    CgroupValueError,
    CgroupWriteError,
    Unsupported,
)
from cgroup.files import format_cpuset, parse_cpu_max, parse_int, read_once, write_value
from cgroup.layout import Layout
from cgroup.reader import CgroupReader

MIN_QUOTA_US = 1000  # the kernel refuses CFS quotas under 1 ms
MIN_PERIOD_US, MAX_PERIOD_US = 1000, 1_000_000
MIN_SHARES, MAX_SHARES = 2, 262144
MIN_WEIGHT, MAX_WEIGHT = 1, 10000
MAX_CFS_US = (1 << 44) - 1  # the kernel's max_cfs_runtime in µs; quota + burst must stay under it


def shares_to_weight(shares: int) -> int:
    """cgroup v1 cpu.shares to v2 cpu.weight, the conversion runc and kubelet use."""
    shares = min(max(shares, MIN_SHARES), MAX_SHARES)
    return 1 + ((shares - 2) * 9999) // 262142


def weight_to_shares(weight: int) -> int:
    """Inverse of `shares_to_weight` (exact at the ends, rounded down between)."""
    weight = min(max(weight, MIN_WEIGHT), MAX_WEIGHT)
    return 2 + ((weight - 1) * 262142) // 9999


def _check_range(path: str, value: int, lo: int, hi: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise CgroupValueError(path, value, f"{what} must be an integer in [{lo}, {hi}]")


class CgroupWriter:
    """The only code that changes cgroup files. Online pods never reach it (the enforcer decides)."""

    def __init__(self, layout: Layout, reader: CgroupReader | None = None) -> None:
        self.layout = layout
        self.reader = reader if reader is not None else CgroupReader(layout)

    def _file(self, controller: str, cgroup: str, name: str) -> str:
        return f"{self.layout.dir(controller, cgroup)}/{name}"

    # -- CPU ---------------------------------------------------------------------------------------
    def set_cpu_quota(self, cgroup: str, quota_us: int | None, period_us: int = 100_000) -> None:
        """CFS bandwidth: `quota_us` per `period_us`; None removes the limit."""
        path = self._file("cpu", cgroup, "cpu.max" if self.layout.is_v2 else "cpu.cfs_quota_us")
        _check_range(path, period_us, MIN_PERIOD_US, MAX_PERIOD_US, "CFS period (µs)")
        if quota_us is not None:
            _check_range(path, quota_us, MIN_QUOTA_US, 1 << 44, "CFS quota (µs)")
        if self.layout.is_v2:
            write_value(path, f"{'max' if quota_us is None else quota_us} {period_us}")
            return
        period_path = self._file("cpu", cgroup, "cpu.cfs_period_us")
        current_period = int(read_once(period_path))
        if current_period == period_us:
            write_value(path, "-1" if quota_us is None else str(quota_us))
            return
        # a new period must not make the current quota invalid: lift the quota, change the period, set the
        # quota; if any step is refused, put the old pair back so a failed write never leaves it unlimited
        old_quota = read_once(path).decode().strip()
        try:
            write_value(path, "-1")
            write_value(period_path, str(period_us))
            write_value(path, "-1" if quota_us is None else str(quota_us))
        except CgroupWriteError:
            with contextlib.suppress(CgroupError):
                write_value(period_path, str(current_period))
                write_value(path, old_quota)
            raise

    def _current_quota(self, cgroup: str) -> int | None:
        if self.layout.is_v2:
            path = self._file("cpu", cgroup, "cpu.max")
            return parse_cpu_max(path, read_once(path))[0]
        path = self._file("cpu", cgroup, "cpu.cfs_quota_us")
        quota = parse_int(path, read_once(path))
        return None if quota < 0 else quota

    def set_cpu_burst(self, cgroup: str, burst_us: int) -> None:
        """CFS burst (v1 cpu.cfs_burst_us, v2 cpu.max.burst): unused quota saved up to `burst_us` may be spent
        in a later period. The kernel refuses a burst above the quota, so that is refused here first;
        `Unsupported` where the kernel has no burst (before 5.14)."""
        path = self.reader.cpu_burst_file(cgroup)
        _check_range(path, burst_us, 0, MAX_CFS_US, "CFS burst (µs)")
        quota = self._current_quota(cgroup)
        if quota is not None and burst_us > quota:
            raise CgroupValueError(path, burst_us, f"the kernel refuses a burst above the quota ({quota} µs)")
        try:
            write_value(path, str(burst_us))
        except CgroupFileMissing:
            raise self.reader.no_burst(cgroup) from None

    def set_cpu_shares(self, cgroup: str, shares: int) -> None:
        """v1 cpu.shares; on v2 the equivalent cpu.weight."""
        path = self._file("cpu", cgroup, "cpu.weight" if self.layout.is_v2 else "cpu.shares")
        _check_range(path, shares, MIN_SHARES, MAX_SHARES, "cpu.shares")
        write_value(path, str(shares_to_weight(shares) if self.layout.is_v2 else shares))

    def set_cpu_weight(self, cgroup: str, weight: int) -> None:
        """v2 cpu.weight; on v1 the equivalent cpu.shares."""
        path = self._file("cpu", cgroup, "cpu.weight" if self.layout.is_v2 else "cpu.shares")
        _check_range(path, weight, MIN_WEIGHT, MAX_WEIGHT, "cpu.weight")
        write_value(path, str(weight if self.layout.is_v2 else weight_to_shares(weight)))

    def set_cpu_idle(self, cgroup: str, idle: bool) -> bool:
        """SCHED_IDLE for the whole cgroup; False when this kernel has no cpu.idle."""
        path = self._file("cpu", cgroup, "cpu.idle")
        try:
            write_value(path, "1" if idle else "0")
        except CgroupFileMissing:
            return False
        return True

    def set_cpuset(self, cgroup: str, cpus: frozenset[int] | set[int]) -> None:
        path = self._file("cpuset", cgroup, "cpuset.cpus")
        if not cpus or any((not isinstance(c, int)) or c < 0 for c in cpus):
            raise CgroupValueError(path, sorted(cpus), "a non-empty set of CPU numbers >= 0")
        write_value(path, format_cpuset(cpus))

    # -- memory ------------------------------------------------------------------------------------
    def set_memory_limit(self, cgroup: str, limit_bytes: int | None) -> None:
        """Hard limit; None removes it. Refused below current usage: v2 would OOM-kill to get there and v1
        reclaims at length before failing with EBUSY."""
        path = self._file("memory", cgroup, "memory.max" if self.layout.is_v2 else "memory.limit_in_bytes")
        if limit_bytes is not None:
            _check_range(path, limit_bytes, 4096, 1 << 62, "memory limit (bytes)")
            usage = self.reader.memory(cgroup).usage_bytes
            if limit_bytes < usage:
                raise CgroupValueError(path, limit_bytes, f"a limit must not be below current usage {usage}")
        value = ("max" if self.layout.is_v2 else "-1") if limit_bytes is None else str(limit_bytes)
        write_value(path, value)

    def set_memory_high(self, cgroup: str, high_bytes: int | None) -> None:
        """v2 memory.high (reclaim and throttle above it, no OOM kill); v1 has no equivalent."""
        if not self.layout.is_v2:
            raise Unsupported(self._file("memory", cgroup, "memory.high"), "memory.high needs cgroup v2")
        path = self._file("memory", cgroup, "memory.high")
        if high_bytes is not None:
            _check_range(path, high_bytes, 4096, 1 << 62, "memory.high (bytes)")
        write_value(path, "max" if high_bytes is None else str(high_bytes))

    def _set_protection(self, cgroup: str, name: str, value: int) -> None:
        if not self.layout.is_v2:
            raise Unsupported(self._file("memory", cgroup, name), "memory QoS needs cgroup v2")
        path = self._file("memory", cgroup, name)
        _check_range(path, value, 0, 1 << 62, f"{name} (bytes)")
        limit = self.reader.memory_limit(cgroup)
        if limit is not None and value > limit:
            raise CgroupValueError(path, value, f"protection above the hard limit {limit} protects nothing more")
        write_value(path, str(value))

    def set_memory_min(self, cgroup: str, min_bytes: int) -> None:
        """v2 memory.min: memory the kernel never reclaims (0: none); v1 has no equivalent."""
        self._set_protection(cgroup, "memory.min", min_bytes)

    def set_memory_low(self, cgroup: str, low_bytes: int) -> None:
        """v2 memory.low: reclaimed only when nothing unprotected is left (0: none); v1 has no equivalent."""
        self._set_protection(cgroup, "memory.low", low_bytes)

    # -- processes ---------------------------------------------------------------------------------
    def set_oom_score_adj(self, cgroup: str, score: int, *, proc_root: str = "/proc") -> int:
        """Set oom_score_adj of every process in the cgroup and its children; returns how many changed.

        Processes that exit meanwhile are skipped; the caller re-applies each pass for new processes.
        """
        _check_range(f"{cgroup}/oom_score_adj", score, -1000, 1000, "oom_score_adj")
        changed = 0
        for pid in self.reader.procs_recursive(cgroup):
            path = f"{proc_root}/{pid}/oom_score_adj"
            try:
                if int(read_once(path)) == score:
                    continue
            except (ValueError, CgroupError):  # the process ended meanwhile
                continue
            try:
                write_value(path, str(score))
                changed += 1
            except (OSError, ValueError, CgroupGone, CgroupFileMissing):
                continue
            except CgroupWriteError as exc:
                if exc.errno == errno.ESRCH:
                    continue
                raise
        return changed

    def kill_all(self, cgroup: str, sig: int) -> int:
        """Signal every process of the cgroup tree (last resort when the API server is away)."""
        sent = 0
        for pid in self.reader.procs_recursive(cgroup):
            try:
                os.kill(pid, sig)
                sent += 1
            except ProcessLookupError:
                continue
        return sent


@dataclass(frozen=True, slots=True)
class LimitChange:
    """One limit to set on one cgroup; `loosens` says whether the new value allows more than the old."""

    cgroup: str
    loosens: bool
    apply: Callable[[], None]


def apply_in_safe_order(changes: Sequence[LimitChange]) -> None:
    """Loosen parents before children, then tighten children before parents.

    The kernel refuses a child limit above its parent's (v1 CFS) and a parent limit below what its
    children hold, so this order never passes through a state it would reject.
    """

    def depth(c: LimitChange) -> int:
        return c.cgroup.rstrip("/").count("/")

    for change in sorted((c for c in changes if c.loosens), key=depth):
        change.apply()
    for change in sorted((c for c in changes if not c.loosens), key=depth, reverse=True):
        change.apply()
