"""Node-level usage from the host's /proc (pointed at the host's procfs when containerised): /proc/stat and the
files of the pass through descriptors kept open; psutil is pointed there too, for the rest of the agent."""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

from cgroup.errors import CgroupError
from cgroup.files import FileCache, parse_psi_avg10

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # /proc/stat counts in these (USER_HZ), as psutil divides by
STAT_HEAD = 1024  # more than the aggregate "cpu" line's ten counters ever take


@dataclass(frozen=True, slots=True)
class CpuTimes:
    busy_seconds: float  # all CPU time except idle, iowait and steal


@dataclass(frozen=True, slots=True)
class MemInfo:
    total_bytes: int
    available_bytes: int
    page_cache_bytes: int

    @property
    def used_bytes(self) -> int:
        return max(0, self.total_bytes - self.available_bytes)


class HostProc:
    """Reads /proc/stat, /proc/meminfo and /proc/pressure of the host (`host_root`/proc)."""

    def __init__(self, host_root: str = "/") -> None:
        self.proc = os.path.join(host_root, "proc")
        psutil.PROCFS_PATH = self.proc
        self._files = FileCache()
        self._stat_fd: int | None = None
        self.cpu_count = self._count_cpus()

    def _count_cpus(self) -> int:
        with open(os.path.join(self.proc, "stat"), "rb") as f:
            n = sum(1 for line in f if line.startswith(b"cpu") and line[3:4].isdigit())
        return n or (psutil.cpu_count() or 1)

    def cpu_times(self) -> CpuTimes:
        """The first line of /proc/stat, read every pass through one descriptor kept open and only as far as
        that line (the whole file, with a line per CPU and the interrupt counters, is many kilobytes on a big
        node); seconds as psutil.cpu_times computes them."""
        if self._stat_fd is None:
            self._stat_fd = os.open(os.path.join(self.proc, "stat"), os.O_RDONLY | os.O_CLOEXEC)
        head = os.pread(self._stat_fd, STAT_HEAD, 0)
        user, nice, system, idle, iowait, irq, softirq, steal = (
            float(x) / CLOCK_TICKS for x in head[: head.index(b"\n")].split()[1:9]
        )
        # guest time is already counted in user/nice by the kernel: leave it out of the total
        total = user + nice + system + idle + iowait + irq + softirq + steal
        return CpuTimes(total - idle - iowait - steal)

    def meminfo(self) -> MemInfo:
        """MemTotal, MemAvailable and Cached from /proc/meminfo (psutil's `cached` adds reclaimable slab,
        which is not page cache)."""
        path = os.path.join(self.proc, "meminfo")
        fields: dict[bytes, int] = {}
        for line in self._files.read(path).splitlines():
            key, _, rest = line.partition(b":")
            if key in (b"MemTotal", b"MemAvailable", b"Cached"):
                fields[key] = int(rest.split()[0]) * 1024
        if b"MemTotal" not in fields or b"MemAvailable" not in fields:
            raise CgroupError(path, "no MemTotal/MemAvailable (kernel older than 3.14?)")
        return MemInfo(fields[b"MemTotal"], fields[b"MemAvailable"], fields.get(b"Cached", 0))

    def pressure(self, resource: str) -> tuple[float, float | None] | None:
        """The node's PSI 'some'/'full' avg10 (percent); None on kernels without it."""
        path = os.path.join(self.proc, "pressure", resource)
        try:
            return parse_psi_avg10(path, self._files.read(path))
        except CgroupError:
            return None
