"""Read a cgroup's counters and settings, each cgroup version from its own files.

Every method takes a relative cgroup path ('/kubepods/burstable/pod<uid>') and raises `CgroupGone` when
the cgroup vanished, so a sampling pass can skip it and go on.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

from cgroup.counters import CounterFiles
from cgroup.errors import (
    CgroupError,
    CgroupFileMissing,
    CgroupGone,
    CgroupParseError,
    CgroupPermissionError,
    Unsupported,
    classify_os_error,
)
from cgroup.files import (
    FileCache,
    parse_cpu_max,
    parse_cpuset,
    parse_int,
    parse_int_or_max,
    parse_psi_avg10,
    parse_psi_some_total,
    read_all,
    read_once,
)
from cgroup.layout import Layout

# v1 reports "no limit" as PAGE_COUNTER_MAX * PAGE_SIZE (9223372036854771712 on x86_64)
V1_UNLIMITED = 1 << 62
MAX_BYTES = 1 << 62  # what a v2 memory.min/low of 'max' stands for in `MemoryProtection`
PSI_RESOURCES = ("cpu", "memory", "io")


@dataclass(slots=True, frozen=True)
class PsiReading:
    """One read of a cgroup's `<resource>.pressure`: the 'some' and 'full' avg10 (percent) and the 'some' total
    (µs stalled since the cgroup was created); each None when its part of the file does not parse."""

    avg10: tuple[float, float | None] | None
    some_total_us: int | None


@dataclass(slots=True)
class CpuUsage:
    """Cumulative counters: usage and CFS throttling, nanoseconds."""

    usage_ns: int
    nr_periods: int
    nr_throttled: int
    throttled_ns: int


@dataclass(slots=True)
class MemoryUsage:
    """Bytes. working_set is kubelet's: usage minus inactive file pages, floored at zero."""

    usage_bytes: int
    working_set_bytes: int
    anon_bytes: int
    file_bytes: int
    inactive_file_bytes: int


@dataclass(frozen=True, slots=True)
class MemoryProtection:
    """v2 memory.min, memory.low (bytes, 0 = none) and memory.high (None = 'max')."""

    min_bytes: int
    low_bytes: int
    high_bytes: int | None


@dataclass(slots=True)
class CpuSettings:
    quota_us: int | None  # None: unlimited
    period_us: int
    shares: int | None  # v1 cpu.shares
    weight: int | None  # v2 cpu.weight
    idle: bool | None  # None: the kernel has no cpu.idle


SETTINGS_PATHS_KEPT = 8192  # cgroups whose cpu_settings paths are kept (enforcement reads them every pass)
LISTINGS_KEPT = 8192  # directories whose subdirectories `tree` keeps


class CgroupReader:
    """Reads through a `FileCache`: descriptors stay open between passes, dropped when a cgroup goes."""

    def __init__(self, layout: Layout, files: FileCache | None = None) -> None:
        self.layout = layout
        self.files = files if files is not None else FileCache()
        self._counters: dict[str, CounterFiles] = {}
        self._v2 = layout.is_v2
        self._no_cfs_stat = False
        self._settings: dict[str, tuple[str, str, str, str]] = {}  # cpu_settings' file paths per cgroup
        self._procs_memo: dict[str, list[tuple[str, list[int] | CgroupError]]] | None = None
        self._no_cpu_idle = False
        self._listed: dict[str, tuple[int, tuple[str, ...]]] = {}  # directory -> (link count, subdirectories)

    # -- helpers -----------------------------------------------------------------------------------
    def _read(self, controller: str, cgroup: str, name: str) -> tuple[str, bytes]:
        path = f"{self.layout.dir(controller, cgroup)}/{name}"
        return path, self.files.read(path)

    def counters(self, cgroup: str) -> CounterFiles:
        """The cgroup's hot counter files (kept until `forget`): a sampling pass holds them per pod."""
        c = self._counters.get(cgroup)
        if c is None:
            c = self._counters[cgroup] = CounterFiles(self.layout, self.files, cgroup)
        return c

    def exists(self, cgroup: str, controller: str = "cpu") -> bool:
        return os.path.isdir(self.layout.dir(controller, cgroup))

    def forget(self, cgroup: str) -> None:
        """Close descriptors of a cgroup that is gone or no longer watched."""
        self._counters.pop(cgroup, None)
        self._settings.pop(cgroup, None)
        with contextlib.suppress(CgroupError):
            self._listed.pop(self.layout.dir("cpu", cgroup), None)
        for ctrl in ("cpu", "cpuacct", "memory", "cpuset") if not self.layout.is_v2 else ("cpu",):
            with contextlib.suppress(CgroupError):
                self.files.forget(self.layout.dir(ctrl, cgroup))
        uni = self.layout.unified_dir(cgroup)
        if uni is not None:
            self.files.forget(uni)

    # -- counters ----------------------------------------------------------------------------------
    def cpu(self, cgroup: str) -> CpuUsage:
        """Usage and CFS throttling counters, read together."""
        return CpuUsage(*self.cpu_counters(self.counters(cgroup)))

    def cpu_counters(self, files: CounterFiles) -> tuple[int, int, int, int]:
        """`CounterFiles.cpu`, with zeros for the CFS counters on a v1 kernel without CFS bandwidth control
        (never throttled: cpu.stat is not looked for again)."""
        try:
            return files.cpu(self._no_cfs_stat)
        except CgroupFileMissing:
            if self._v2:
                raise
            self._no_cfs_stat = True
            return files.cpu_usage_ns(), 0, 0, 0

    def memory(self, cgroup: str) -> MemoryUsage:
        """Usage, working set, anon and file pages (memory.stat read each time: see `CounterFiles`)."""
        files = self.counters(cgroup)
        usage = files.memory_usage()
        inactive, anon, file = files.memory_stat()
        return MemoryUsage(usage, max(0, usage - inactive), anon, file, inactive)

    def psi(self, cgroup: str, resource: str) -> PsiReading | None:
        """Both figures of one read of the cgroup's `<resource>.pressure` (the sampling hot path reads it once
        for the psi and run_queue collectors); None when there is no PSI to read, a figure None when its part
        of the file does not parse.

        Raises CgroupGone when the cgroup itself is gone (v2), like every other reader."""
        base = self.layout.unified_dir(cgroup)
        if base is None:
            return None
        path = f"{base}/{resource}.pressure"
        try:
            data = self.files.read(path)
        except (CgroupFileMissing, CgroupGone):
            if self._v2 and not os.path.isdir(base):
                raise
            return None
        except (Unsupported, CgroupPermissionError):
            return None
        try:
            avg10: tuple[float, float | None] | None = parse_psi_avg10(path, data)
        except CgroupParseError:
            avg10 = None
        try:
            some_total_us: int | None = parse_psi_some_total(path, data)
        except CgroupParseError:
            some_total_us = None
        return PsiReading(avg10, some_total_us)

    # -- settings ----------------------------------------------------------------------------------
    def memory_limit(self, cgroup: str) -> int | None:
        """The hard limit in bytes, None when unlimited."""
        if self.layout.is_v2:
            path, data = self._read("memory", cgroup, "memory.max")
            return parse_int_or_max(path, data)
        path, data = self._read("memory", cgroup, "memory.limit_in_bytes")
        value = parse_int(path, data)
        return None if value >= V1_UNLIMITED else value

    def memory_high(self, cgroup: str) -> int | None:
        """v2 memory.high (None when 'max'); v1 has no such file and always answers None."""
        if not self.layout.is_v2:
            return None
        path, data = self._read("memory", cgroup, "memory.high")
        return parse_int_or_max(path, data)

    def cpu_settings(self, cgroup: str) -> CpuSettings:
        paths = self._settings.get(cgroup)
        if paths is None:
            if len(self._settings) >= SETTINGS_PATHS_KEPT:  # cgroups never forgotten: a bound, not a leak
                self._settings.clear()
            d = self.layout.dir("cpu", cgroup)
            names = (
                ("cpu.max", "cpu.weight", "") if self._v2 else ("cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.shares")
            )
            first, second, third = (f"{d}/{n}" for n in names)
            paths = self._settings[cgroup] = (first, second, third, f"{d}/cpu.idle")
        read = self.files.read
        if self._v2:
            quota, period = parse_cpu_max(paths[0], read(paths[0]))
            weight: int | None = parse_int(paths[1], read(paths[1]))
            shares = None
        else:
            raw_quota = parse_int(paths[0], read(paths[0]))
            quota = None if raw_quota < 0 else raw_quota
            period = parse_int(paths[1], read(paths[1]))
            shares, weight = parse_int(paths[2], read(paths[2])), None
        idle: bool | None = None
        if not self._no_cpu_idle:  # enforcement reads this every pass: a cached descriptor, like the counters
            idle_path = paths[3]
            try:
                idle = parse_int(idle_path, self.files.read(idle_path)) == 1
            except CgroupFileMissing:
                self._no_cpu_idle = True  # a kernel older than 5.15 has no cpu.idle anywhere
        return CpuSettings(quota, period, shares, weight, idle)

    def cpu_burst_file(self, cgroup: str) -> str:
        """The CFS burst file: v1 cpu.cfs_burst_us, v2 cpu.max.burst (kernel 5.14+ for both)."""
        return f"{self.layout.dir('cpu', cgroup)}/{'cpu.max.burst' if self.layout.is_v2 else 'cpu.cfs_burst_us'}"

    def supports_cpu_burst(self, cgroup: str) -> bool:
        """Whether this kernel has CFS burst, asked of an existing cgroup with a quota file (v2's root has
        none: ask of the kubepods cgroup). A kernel older than 5.14 has no burst file anywhere."""
        return os.path.exists(self.cpu_burst_file(cgroup))

    def cpu_burst(self, cgroup: str) -> int:
        """The CFS burst in µs (0: none); `Unsupported` where the kernel has no burst."""
        path = self.cpu_burst_file(cgroup)
        try:
            return parse_int(path, read_once(path))
        except CgroupFileMissing:
            raise self.no_burst(cgroup) from None

    def no_burst(self, cgroup: str) -> CgroupError:
        """Why a cgroup has no burst file: the kernel lacks burst (its quota file is there), or the cgroup has
        no CPU controller at all (v2 without cpu in the parent's subtree_control)."""
        path = self.cpu_burst_file(cgroup)
        quota = f"{self.layout.dir('cpu', cgroup)}/{'cpu.max' if self.layout.is_v2 else 'cpu.cfs_quota_us'}"
        if os.path.exists(quota):
            return Unsupported(path, "this kernel has no CFS burst (needs Linux 5.14+)")
        return CgroupFileMissing(path, "no CPU bandwidth files in this cgroup (cpu controller not enabled)")

    def memory_protection(self, cgroup: str) -> MemoryProtection:
        """v2 memory.min/low/high; `Unsupported` on v1, which has no memory protection files."""
        if not self.layout.is_v2:
            raise Unsupported(f"{self.layout.dir('memory', cgroup)}/memory.min", "memory QoS needs cgroup v2")
        # through the descriptor cache: memory QoS compares these every pass while it is on
        floor, low, high = (
            parse_int_or_max(*self._read("memory", cgroup, name))
            for name in ("memory.min", "memory.low", "memory.high")
        )
        # min/low read 'max' only when set to it (protect everything), which the writers never do
        return MemoryProtection(MAX_BYTES if floor is None else floor, MAX_BYTES if low is None else low, high)

    def cpuset(self, cgroup: str, effective: bool = False) -> frozenset[int]:
        name = "cpuset.cpus.effective" if self.layout.is_v2 and effective else "cpuset.cpus"
        if effective and not self.layout.is_v2:
            name = "cpuset.effective_cpus"
        path = f"{self.layout.dir('cpuset', cgroup)}/{name}"
        return parse_cpuset(path, read_once(path))

    def procs(self, cgroup: str) -> list[int]:
        """PIDs in the cgroup itself (not its children)."""
        path = f"{self.layout.dir('cpu', cgroup)}/cgroup.procs"
        data = read_once(path)
        return [int(x) for x in data.split()]

    def procs_recursive(self, cgroup: str) -> list[int]:
        """PIDs in the cgroup and every descendant (a pod's processes live in its containers)."""
        pids: list[int] = []
        for _dirpath, found in self.procs_tree(cgroup):
            if isinstance(found, CgroupError):
                if isinstance(found, (CgroupGone, CgroupFileMissing)):
                    continue
                raise found
            pids.extend(found)
        return pids

    def procs_tree(self, cgroup: str) -> list[tuple[str, list[int] | CgroupError]]:
        """Each directory of the cgroup's tree (`tree`) with the PIDs in it, or why they could not be read.
        Inside `one_procs_reading()` a tree is read once: the enforcement pass records kubelet's
        oom_score_adj of a pod's processes and writes its own from one walk of the pod's cgroups."""
        memo = self._procs_memo
        if memo is not None and (hit := memo.get(cgroup)) is not None:
            return hit
        out: list[tuple[str, list[int] | CgroupError | None]] = []
        path = self.layout.dir("cpu", cgroup)
        if not self._walk_kept(path, out):
            out.clear()
            self._walk(path, None, None, out, True)
        found = cast(list[tuple[str, list[int] | CgroupError]], out)
        if memo is not None:
            memo[cgroup] = found
        return found

    @contextlib.contextmanager
    def one_procs_reading(self) -> Iterator[None]:
        """Within it `procs_tree` (and `procs_recursive`) read each cgroup tree once."""
        self._procs_memo = {}
        try:
            yield
        finally:
            self._procs_memo = None

    def tree(self, cgroup: str, controller: str = "cpu") -> list[str]:
        """The directories of the cgroup and of every descendant, in `os.walk`'s top-down order. A directory
        whose link count says it has no subdirectory (2) is not listed: a cgroup directory holds dozens of
        files, and the enforcement pass walks every offline pod every few seconds. Nor is one listed again
        while its link count is the one it had when listed and every subdirectory it had is still there:
        with as many subdirectories as then, none of them gone, it has the same ones (kernfs counts a
        directory's subdirectories in its link count), so the walk is a stat per directory."""
        out: list[tuple[str, list[int] | CgroupError | None]] = []
        self._walk(self.layout.dir(controller, cgroup), None, None, out, False)
        return [path for path, _ in out]

    def _walk_kept(self, path: str, out: list[tuple[str, list[int] | CgroupError | None]]) -> bool:
        """`_walk` with its PIDs from the directory's kept descriptor (`FileCache.directory`: the enforcement
        pass walks each offline pod every few seconds); False, nothing kept, when the descriptor's directory
        is gone (removed, and maybe made again under the same name: the caller walks afresh)."""
        try:
            fd = self.files.directory(path)
            nlink = os.fstat(fd).st_nlink
        except OSError:
            self.files.drop_directory(path)
            return False
        pids = _pids(path, "cgroup.procs", fd)
        if isinstance(pids, CgroupError):
            self.files.drop_directory(path)
            return False
        out.append((path, pids))
        if nlink != 2 and not self._below(path, fd, nlink, out, True):
            self.files.drop_directory(path)
            return False
        return True

    def _walk(
        self,
        path: str,
        parent: int | None,
        name: str | None,
        out: list[tuple[str, list[int] | CgroupError | None]],
        procs: bool,
    ) -> bool:
        """Add `path` and its descendant directories to `out`, parents first, each with its PIDs when `procs`;
        False (and nothing added) when it is gone. What vanishes meanwhile is left out, symbolic links are not
        followed (as `os.walk`). Below the top, names are looked up relative to the parent's descriptor:
        a cgroup path is long, and a lookup costs by the component."""
        rel = path if parent is None else name
        assert rel is not None
        try:
            nlink = os.stat(rel, dir_fd=parent).st_nlink
        except OSError:
            self._listed.pop(path, None)
            return False
        if nlink == 2:  # no subdirectory: no descriptor of its own needed
            out.append((path, _pids(path, f"{rel}/cgroup.procs", parent) if procs else None))
            return True
        try:
            fd = os.open(rel, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=parent)
        except OSError:
            self._listed.pop(path, None)
            return False
        try:
            mark = len(out)
            out.append((path, _pids(path, "cgroup.procs", fd) if procs else None))
            if not self._below(path, fd, nlink, out, procs):
                del out[mark:]
                return False
            return True
        finally:
            os.close(fd)

    def _below(
        self, path: str, fd: int, nlink: int, out: list[tuple[str, list[int] | CgroupError | None]], procs: bool
    ) -> bool:
        """The subdirectories of the directory open as `fd`, walked; False when it cannot be listed (gone)."""
        if len(self._listed) >= LISTINGS_KEPT:  # directories never forgotten: a bound, not a leak
            self._listed.clear()
        mark = len(out)
        held = self._listed.get(path)
        if held is not None and held[0] == nlink:
            for sub in held[1]:
                if not self._walk(f"{path}/{sub}", fd, sub, out, procs):
                    break  # one it had is gone: list it again
            else:
                return True
            del out[mark:]
        try:
            with os.scandir(fd) as entries:
                subdirs = tuple(e.name for e in entries if e.is_dir() and not e.is_symlink())
        except OSError:
            self._listed.pop(path, None)
            return False
        self._listed[path] = (nlink, subdirs)
        for sub in subdirs:
            self._walk(f"{path}/{sub}", fd, sub, out, procs)
        return True


def _pids(path: str, rel: str, parent: int | None) -> list[int] | CgroupError:
    """The PIDs of a cgroup.procs file (a fresh descriptor each time: v1 serves a listing for a second to a
    descriptor that read it), or why they could not be read."""
    try:
        fd = os.open(rel, os.O_RDONLY | os.O_CLOEXEC, dir_fd=parent)
    except OSError as exc:
        return classify_os_error(f"{path}/cgroup.procs", exc, cgroup_dir=path)
    try:
        data = read_all(fd)
    except OSError as exc:
        return classify_os_error(f"{path}/cgroup.procs", exc, cgroup_dir=path)
    finally:
        os.close(fd)
    return [int(x) for x in data.split()]
