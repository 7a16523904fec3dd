"""One cgroup's hot counters, what a sampling pass reads of every pod each second: paths built once, each file
read with one pread on the descriptor the `FileCache` keeps."""

from __future__ import annotations

import os

from cgroup.errors import CgroupParseError
from cgroup.files import FileCache, keyed_value, parse_int, parse_keyed
from cgroup.layout import Layout

INT_READ = 64  # a file holding one integer (cpuacct.usage, memory.usage_in_bytes, memory.current)


class CounterFiles:
    """One cgroup's hot counters — what a sampling pass reads of every pod each second — with their paths
    built once and read in one Python call each: the descriptor is looked up in the `FileCache`'s table and
    read with one pread (a descriptor is never kept here: the cache owns it, so one the cache closed is
    never read again). Any error falls back to the cache's read, which classifies it (`CgroupGone`, ...).

    v1 reads cpuacct.usage (one small file) for the usage and cpu.stat for the CFS counters; v2 has both in
    cpu.stat."""

    __slots__ = ("_fds", "_files", "_v2", "cpu_stat", "cpu_usage", "mem_stat", "mem_usage")

    def __init__(self, layout: Layout, files: FileCache, cgroup: str) -> None:
        self._files, self._fds, self._v2 = files, files.fds, layout.is_v2
        if layout.is_v2:
            d = layout.dir("cpu", cgroup)
            self.cpu_usage = self.cpu_stat = f"{d}/cpu.stat"
            self.mem_usage = f"{d}/memory.current"
            self.mem_stat = f"{d}/memory.stat"
        else:
            self.cpu_usage = f"{layout.dir('cpuacct', cgroup)}/cpuacct.usage"
            self.cpu_stat = f"{layout.dir('cpu', cgroup)}/cpu.stat"
            mem = layout.dir("memory", cgroup)
            self.mem_usage = f"{mem}/memory.usage_in_bytes"
            self.mem_stat = f"{mem}/memory.stat"

    def cpu_usage_ns(self) -> int:
        """Cumulative CPU usage, nanoseconds."""
        if self._v2:
            data = self._files.read(self.cpu_usage)
            return keyed_value(self.cpu_usage, data, b"usage_usec") * 1000
        try:
            return int(os.pread(self._fds[self.cpu_usage], INT_READ, 0))
        except (KeyError, OSError, ValueError):  # not open yet, or an error the cache's read classifies
            return parse_int(self.cpu_usage, self._files.read(self.cpu_usage))

    def memory_usage(self) -> int:
        """Bytes charged to the cgroup (v1 memory.usage_in_bytes, v2 memory.current)."""
        try:
            return int(os.pread(self._fds[self.mem_usage], INT_READ, 0))
        except (KeyError, OSError, ValueError):
            return parse_int(self.mem_usage, self._files.read(self.mem_usage))

    def cpu(self, no_cfs: bool = False) -> tuple[int, int, int, int]:
        """(usage ns, nr_periods, nr_throttled, throttled ns): v2 from one read of cpu.stat; v1 from
        cpuacct.usage and cpu.stat (zeros for the CFS counters with `no_cfs`; CgroupFileMissing where the
        kernel has no CFS bandwidth control)."""
        path = self.cpu_stat
        if self._v2:
            data = self._files.read(path)
            st = parse_keyed(path, data)
            if "usage_usec" not in st:
                raise CgroupParseError(path, data, "a line 'usage_usec <integer>'")
            periods, throttled = st.get("nr_periods", 0), st.get("nr_throttled", 0)
            return st["usage_usec"] * 1000, periods, throttled, st.get("throttled_usec", 0) * 1000
        usage = self.cpu_usage_ns()
        if no_cfs:
            return usage, 0, 0, 0
        data = self._files.read(path)
        t = data.split()
        if len(t) >= 6 and t[0] == b"nr_periods" and t[2] == b"nr_throttled" and t[4] == b"throttled_time":
            try:
                return usage, int(t[1]), int(t[3]), int(t[5])
            except ValueError:
                raise CgroupParseError(path, data, "integers in cpu.stat") from None
        return (
            usage,
            keyed_value(path, data, b"nr_periods"),
            keyed_value(path, data, b"nr_throttled"),
            keyed_value(path, data, b"throttled_time"),
        )

    def memory_stat(self) -> tuple[int, int, int]:
        """(inactive file, anon, file) bytes from memory.stat, the costliest counter file (the kernel
        flushes per-CPU counters to print it): v1's hierarchical totals, v2's own."""
        path = self.mem_stat
        data = self._files.read(path)
        if self._v2:
            return (
                keyed_value(path, data, b"inactive_file"),
                keyed_value(path, data, b"anon"),
                keyed_value(path, data, b"file"),
            )
        inactive, anon, file = _v1_memory_stat(path, data)
        return inactive, anon, file


def _v1_memory_stat(path: str, data: bytes) -> tuple[int, int, int]:
    """(inactive_file, anon, cache) from v1 memory.stat, hierarchical totals.

    anon is total_rss (anonymous pages without shmem, which v1 counts as cache), so it means what v2's
    `anon` means. The kernel prints `total_cache` then `total_rss`, so one short split reads both; the
    inactive file pages are one more search.
    """
    pos = data.find(b"\ntotal_cache ")
    t = data[pos + 1 : pos + 80].split(maxsplit=4) if pos >= 0 else []
    try:
        if len(t) < 4 or t[0] != b"total_cache" or t[2] != b"total_rss":
            raise ValueError
        cache, rss = int(t[1]), int(t[3])
    except ValueError:
        cache, rss = keyed_value(path, data, b"total_cache"), keyed_value(path, data, b"total_rss")
    return keyed_value(path, data, b"total_inactive_file"), rss, cache
