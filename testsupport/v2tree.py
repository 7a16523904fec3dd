"""cgroup v2 trees on disk whose files reproduce the kernel's (6.x) byte for byte.

Only for what the real v2 kernel of tests/v2kernel (user-mode Linux: one CPU, no PSI, no cpuset
controller) cannot show: same file names, same key order, same spacing as kernel 6.x.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from cgroup import Layout, Mount

# memory.stat keys in the order kernel 6.x prints them (mm/memcontrol.c memory_stats[] then events)
MEMORY_STAT_KEYS = (
    "anon", "file", "kernel", "kernel_stack", "pagetables", "sec_pagetables", "percpu", "sock", "vmalloc",
    "shmem", "zswap", "zswapped", "file_mapped", "file_dirty", "file_writeback", "swapcached", "anon_thp",
    "file_thp", "shmem_thp", "inactive_anon", "active_anon", "inactive_file", "active_file", "unevictable",
    "slab_reclaimable", "slab_unreclaimable", "slab", "workingset_refault_anon", "workingset_refault_file",
    "workingset_activate_anon", "workingset_activate_file", "workingset_restore_anon",
    "workingset_restore_file", "workingset_nodereclaim", "pgscan", "pgsteal", "pgscan_kswapd",
    "pgscan_direct", "pgscan_khugepaged", "pgsteal_kswapd", "pgsteal_direct", "pgsteal_khugepaged",
    "pgfault", "pgmajfault", "pgrefill", "pgactivate", "pgdeactivate", "pglazyfree", "pglazyfreed",
    "zswpin", "zswpout", "zswpwb", "thp_fault_alloc", "thp_collapse_alloc", "thp_swpout",
    "thp_swpout_fallback",
)  # fmt: skip


def psi_text(some: tuple[float, float, float, int], full: tuple[float, float, float, int] | None) -> str:
    def line(kind: str, v: tuple[float, float, float, int]) -> str:
        return f"{kind} avg10={v[0]:.2f} avg60={v[1]:.2f} avg300={v[2]:.2f} total={v[3]}\n"

    return line("some", some) + (line("full", full) if full is not None else "")


@dataclass
class V2Cgroup:
    """What one v2 cgroup's files say. Counters in the kernel's units (µs, bytes)."""

    usage_usec: int = 0
    user_usec: int = 0
    system_usec: int = 0
    nr_periods: int = 0
    nr_throttled: int = 0
    throttled_usec: int = 0
    memory_current: int = 0
    memory_stat: dict[str, int] = field(default_factory=dict)
    memory_max: int | None = None
    memory_high: int | None = None
    cpu_max: tuple[int | None, int] = (None, 100000)
    cpu_max_burst: int = 0
    memory_min: int = 0
    memory_low: int = 0
    cpu_weight: int = 100
    cpu_idle: int = 0
    cpuset_cpus: str = ""
    cpuset_effective: str = "0-1"
    procs: tuple[int, ...] = ()
    cpu_pressure: tuple[float, float, float, int] = (0.0, 0.0, 0.0, 0)
    memory_pressure: tuple[float, float, float, int] = (0.0, 0.0, 0.0, 0)
    io_pressure: tuple[float, float, float, int] = (0.0, 0.0, 0.0, 0)

    def files(self, controllers: str = "cpuset cpu io memory hugetlb pids rdma misc") -> dict[str, str]:
        stat = {k: self.memory_stat.get(k, 0) for k in MEMORY_STAT_KEYS}
        quota, period = self.cpu_max
        return {
            "cgroup.controllers": controllers + "\n",
            "cgroup.subtree_control": controllers + "\n",
            "cgroup.procs": "".join(f"{p}\n" for p in self.procs),
            "cgroup.type": "domain\n",
            "cpu.stat": (
                f"usage_usec {self.usage_usec}\nuser_usec {self.user_usec}\nsystem_usec {self.system_usec}\n"
                f"nice_usec 0\ncore_sched.force_idle_usec 0\nnr_periods {self.nr_periods}\n"
                f"nr_throttled {self.nr_throttled}\nthrottled_usec {self.throttled_usec}\n"
                "nr_bursts 0\nburst_usec 0\n"
            ),
            "cpu.max": f"{'max' if quota is None else quota} {period}\n",
            "cpu.max.burst": f"{self.cpu_max_burst}\n",
            "cpu.weight": f"{self.cpu_weight}\n",
            "cpu.weight.nice": "0\n",
            "cpu.idle": f"{self.cpu_idle}\n",
            "cpu.pressure": psi_text(self.cpu_pressure, self.cpu_pressure),
            "cpuset.cpus": f"{self.cpuset_cpus}\n",
            "cpuset.cpus.effective": f"{self.cpuset_effective}\n",
            "memory.current": f"{self.memory_current}\n",
            "memory.stat": "".join(f"{k} {v}\n" for k, v in stat.items()),
            "memory.max": f"{'max' if self.memory_max is None else self.memory_max}\n",
            "memory.high": f"{'max' if self.memory_high is None else self.memory_high}\n",
            "memory.low": f"{self.memory_low}\n",
            "memory.min": f"{self.memory_min}\n",
            "memory.pressure": psi_text(self.memory_pressure, self.memory_pressure),
            "io.pressure": psi_text(self.io_pressure, self.io_pressure),
        }


class V2Tree:
    """A v2 hierarchy rooted at `<base>/sys/fs/cgroup` with a matching mountinfo under `<base>/proc/1`."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.mount = os.path.join(base, "sys/fs/cgroup")
        os.makedirs(self.mount, exist_ok=True)
        self.put("/", V2Cgroup())
        os.makedirs(os.path.join(base, "proc/1"), exist_ok=True)
        with open(os.path.join(base, "proc/1/mountinfo"), "w") as f:
            f.write(
                "22 28 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"
                "24 28 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
                "28 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw\n"
                "30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
                "rw,nsdelegate,memory_recursiveprot\n"
            )

    @property
    def layout(self) -> Layout:
        return Layout("v2", {}, Mount(self.mount), self.base)

    def dir(self, cgroup: str) -> str:
        return self.mount + (cgroup.rstrip("/") if cgroup != "/" else "")

    def put(self, cgroup: str, state: V2Cgroup) -> str:
        d = self.dir(cgroup)
        os.makedirs(d, exist_ok=True)
        for name, text in state.files().items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        return d

    def read(self, cgroup: str, name: str) -> bytes:
        with open(os.path.join(self.dir(cgroup), name), "rb") as f:
            return f.read()
