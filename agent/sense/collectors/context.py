"""What collectors are built from (`CollectorDeps`, once) and what a pass hands them (`PassContext`, one object
reused pass after pass: the pods collector points it at each pod in turn for the pod collectors)."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.sense.pass_clock import PassClock
from agent.sense.pod_source import PodSource
from agent.sense.procfs import HostProc
from agent.sense.rates import CounterRates, CpuRates
from agent.snapshot import PodMeta, PodsTotal
from cgroup import CgroupReader, Layout, PathModel, PodCgroup, PsiReading
from cgroup.reader import PSI_RESOURCES


@dataclass(slots=True)
class CollectorDeps:
    """The host's readers and the options collectors are built with; the rate memories are shared so that a
    vanished cgroup is forgotten in one place."""

    layout: Layout
    model: PathModel
    source: PodSource
    reader: CgroupReader
    host_root: str = "/"
    container_every: int = 1  # passes between two readings of one container (each on its own turn)
    container_stat_every: int = 1  # passes between two memory.stat readings of one container
    pod_memory_limits: bool = True  # only memory QoS reads them: not read while nothing does
    online_every: int = 1  # passes between two readings of one online pod (each on its own turn)
    proc: HostProc = field(init=False)
    cpu_rates: CpuRates = field(default_factory=CpuRates)
    counters: CounterRates = field(default_factory=CounterRates)
    psi_resources: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.proc = HostProc(self.host_root)
        # PSI only for resources the kernel reports at all (psi=0 kernels have no /proc/pressure)
        self.psi_resources = tuple(r for r in PSI_RESOURCES if self.proc.pressure(r) is not None)


@dataclass(slots=True)
class PassContext:
    """The pass being taken: its monotonic time and number, its clock, the cgroups read so far (so that the
    ones not read again are forgotten), for pod collectors the pod being visited and its pressure files read in
    this visit, and the pods' total."""

    clock: PassClock
    now: float = 0.0
    seq: int = 0  # passes taken before this one
    seen: set[str] = field(default_factory=set)
    meta: PodMeta | None = None
    pod: PodCgroup | None = None
    #: the visited pod's `<resource>.pressure` as the psi collector read it in this visit, by resource (None: no
    #: PSI to read): the run_queue collector takes its totals from here rather than reading the file again
    pod_psi: dict[str, PsiReading | None] = field(default_factory=dict)
    kubepods: tuple[int, int] | None = None  # the root's CPU usage (ns) and working set, if the tiers read it
    pods_total: PodsTotal | None = None  # the kubepods root, read by the pods collector

    def failed(self, name: str) -> None:
        self.clock.failed(name)
