"""What a cgroup's tasks felt: time they waited on a run queue (/proc/<tid>/schedstat, v1 and v2). The cgroup's
own PSI stall totals, where the unified hierarchy has them, are `CgroupReader.psi` (cgroup/reader.py).

`/proc/<tid>/schedstat` holds three numbers per thread: nanoseconds on a CPU, nanoseconds runnable but waiting
for one (the run-queue delay), timeslices. A pod's threads are listed in its cgroups' thread files (v1 the cpu
controller's `tasks`, v2 `cgroup.threads`, the pod's own and each container's: opened for each listing, as
v1 serves a kept descriptor a listing up to a second old), and each thread's schedstat is read through a
descriptor kept open while the thread lives (pread at offset 0 re-renders it).

The work is bounded: one read visits at most `max_tasks` threads of a cgroup set, the next read continues
where it stopped (a cursor over the sorted thread IDs), so a pod with thousands of threads costs `max_tasks`
preads per turn and every thread is still visited every ceil(threads / max_tasks) turns. The thread files
are listed every `relist_every` reads of a set (and at once after a thread exited), not on every read: opening
them is most of a small pod's cost. Each thread's wait
and run times are differences from its own previous reading, so a thread read every third turn contributes
three turns' worth when read: over a few turns the sum is whole, never counted twice. A thread first seen
contributes nothing until its second reading (its history before the agent saw it is not this interval's);
a thread that exits loses its last, unread interval.
"""

from __future__ import annotations

import bisect
import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass

from cgroup.errors import (
    CgroupError,
    CgroupFileMissing,
    CgroupPermissionError,
    Unsupported,
)
from cgroup.files import FileCache, read_once
from cgroup.layout import Layout

MAX_TASKS = 64  # schedstat reads per cgroup set and turn
RELIST_EVERY = 12  # reads of a set between two listings of its threads (sooner when one of them exits)


@dataclass(frozen=True, slots=True)
class TaskDelay:
    """Sums over the threads read, since each one's previous reading: ns waited for a CPU and ns on one."""

    wait_ns: int
    run_ns: int
    tasks: int  # threads listed in the cgroups
    read: int  # threads whose schedstat was read this time


class _Set:
    """One cgroup set's threads: each one's last (run, wait) reading, where the next read starts, and its
    thread list with the reads left before it is listed again."""

    __slots__ = ("cursor", "last", "stale_in", "tids")

    def __init__(self) -> None:
        self.last: dict[int, tuple[int, int]] = {}
        self.cursor = 0
        self.tids: list[int] = []
        self.stale_in = 0


def parse_schedstat(data: bytes) -> tuple[int, int]:
    """(ns on a CPU, ns waiting on a run queue) from a schedstat line."""
    fields = data.split()
    return int(fields[0]), int(fields[1])


class RunDelayReader:
    """Run-queue delay of cgroup sets (a pod: its own cgroup and its containers') from their threads'
    schedstat, bounded per read (module docstring)."""

    def __init__(
        self,
        layout: Layout,
        files: FileCache,
        proc_root: str = "/proc",
        max_tasks: int = MAX_TASKS,
        relist_every: int = RELIST_EVERY,
    ) -> None:
        self.layout, self.files, self.proc, self.max_tasks = layout, files, proc_root.rstrip("/"), max_tasks
        self.relist_every = relist_every
        self._threads_file = "cgroup.threads" if layout.is_v2 else "tasks"
        self._sets: dict[str, _Set] = {}
        self._fds: dict[int, int] = {}  # thread ID -> its schedstat descriptor
        self._users: dict[int, int] = {}  # thread ID -> how many sets list it (a thread is in one cgroup)

    def tasks(self, cgroups: Sequence[str]) -> list[int]:
        """Thread IDs in the cgroups themselves (not their children), sorted; a cgroup gone lists none."""
        tids: list[int] = []
        for cg in cgroups:
            path = f"{self.layout.dir('cpu', cg)}/{self._threads_file}"
            try:
                tids.extend(int(x) for x in read_once(path).split())  # a kept descriptor lists stale (v1)
            except (CgroupFileMissing, CgroupPermissionError, Unsupported):
                continue
            except CgroupError:
                if cg == cgroups[0]:
                    raise  # the set's own cgroup is gone: the caller forgets it
                continue  # a container that just went
        tids.sort()
        return tids

    def read(self, key: str, cgroups: Sequence[str]) -> TaskDelay:
        """Wait and run time of the threads of `cgroups` (the set named `key`) since their previous readings,
        visiting at most `max_tasks` of them (from the cursor on). The threads are listed again every
        `relist_every` reads, or at once after one of them exited: a thread started in between is counted
        from the next listing on."""
        st = self._sets.get(key)
        if st is None:
            st = self._sets[key] = _Set()
        if st.stale_in <= 0:
            st.tids, st.stale_in = self.tasks(cgroups), self.relist_every
            gone = [t for t in st.last if not _contains(st.tids, t)]
            for t in gone:
                del st.last[t]
                self._release(t)
        st.stale_in -= 1
        tids = st.tids
        n = len(tids)
        if n <= self.max_tasks:
            chosen = tids
        else:
            start = bisect.bisect_left(tids, st.cursor)
            chosen = (tids[start:] + tids[:start])[: self.max_tasks]
            st.cursor = chosen[-1] + 1
        wait = run = read = 0
        last, fds, pread = st.last, self._fds, os.pread
        for tid in chosen:
            fd = fds.get(tid)
            try:  # the hot path inline: one pread of a kept descriptor per thread
                fields = (pread(fd, 128, 0) if fd is not None else self._open_read(tid)).split()
                now = (int(fields[0]), int(fields[1]))
            except (OSError, ValueError, IndexError):  # the thread exited (or its ID is reused elsewhere)
                self._close(tid)
                if tid in last:
                    del last[tid]
                    self._release(tid)
                st.stale_in = 0  # list them again on the next read
                continue
            read += 1
            before = last.get(tid)
            if before is None:
                self._users[tid] = self._users.get(tid, 0) + 1
            else:
                if now[0] > before[0]:
                    run += now[0] - before[0]
                if now[1] > before[1]:
                    wait += now[1] - before[1]
            last[tid] = now
        return TaskDelay(wait, run, n, read)

    def forget(self, key: str) -> None:
        """Drop a set (its pod is gone) and the descriptors only it held."""
        st = self._sets.pop(key, None)
        if st is not None:
            for t in st.last:
                self._release(t)

    def close(self) -> None:
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()
        self._users.clear()
        self._sets.clear()

    def _open_read(self, tid: int) -> bytes:
        fd = self._fds[tid] = os.open(f"{self.proc}/{tid}/schedstat", os.O_RDONLY | os.O_CLOEXEC)
        return os.pread(fd, 128, 0)

    def _release(self, tid: int) -> None:
        left = self._users.get(tid, 0) - 1
        if left > 0:
            self._users[tid] = left
            return
        self._users.pop(tid, None)
        self._close(tid)

    def _close(self, tid: int) -> None:
        fd = self._fds.pop(tid, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def _contains(ordered: Sequence[int], value: int) -> bool:
    i = bisect.bisect_left(ordered, value)
    return i < len(ordered) and ordered[i] == value
