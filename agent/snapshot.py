"""What one sampling tick measured: the node, its QoS tiers, every pod and container, the network.

A snapshot is never changed once published; the exporter, the JSON API, capacity and enforcement all read
the same object, so they never see half a pass. The per-pod and per-container records are plain slotted
dataclasses (not frozen): a pass creates a thousand of them, and frozen ones cost twice as much to build.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from cgroup.kubelet_rules import BatchResources, pod_total

PodClass = Literal["online", "offline", "unknown"]


@dataclass(frozen=True, slots=True)
class CollectorRun:
    """How one collector did in a pass (agent/sense/pass_clock.py times it)."""

    name: str
    success: bool
    duration_seconds: float


@dataclass(frozen=True, slots=True)
class Pressure:
    """PSI 'some' and 'full' 10 s averages as ratios 0-1 (the kernel prints percent)."""

    some_avg10: float
    full_avg10: float | None


@dataclass(frozen=True, slots=True)
class RunQueue:
    """What a pod's threads felt since its previous reading (agent/sense/collectors/run_queue.py): seconds they
    waited for a CPU per second, summed over its threads (/proc schedstat, v1 and v2), the share of their
    runnable time spent waiting, and on the unified hierarchy where the kernel has PSI the pod cgroup's CPU
    and memory `some` stall, seconds per second. None: not known yet (the first reading) or not on this host."""

    delay: float | None
    wait_share: float | None
    cpu_some: float | None
    memory_some: float | None
    threads: int  # threads listed in the pod's cgroups
    at: float  # monotonic time of the reading (an online pod's stands between its turns)


@dataclass(frozen=True, slots=True)
class SloReading:
    """A pod's tail latency over the last scrape interval of its declared SLO histogram, and its slack against
    its objective, (SLO − p99) / SLO (agent/sense/slo_scrape.py). None: no figure for that interval (too few
    requests, or the scrape failed: `error`)."""

    p99_seconds: float | None
    slack: float | None
    at: float  # monotonic time of the scrape
    error: str | None = None


@dataclass(slots=True)
class ContainerSample:
    id: str
    cgroup: str
    cpu_cores: float | None  # None on the first sample or after a counter reset
    memory_working_set_bytes: int
    memory_anon_bytes: int
    memory_usage_bytes: int
    cpu_throttled_ratio: float | None  # throttled periods / periods over the tick


@dataclass(frozen=True, slots=True)
class ContainerBatch:
    """One container's `kubernetes.io/batch-*` values (milli-cores, bytes) and, while it runs, its ID."""

    name: str
    id: str | None
    resources: BatchResources


@dataclass(frozen=True, slots=True)
class PodBatch:
    """A pod's batch resources: per container in spec order (init containers first) and the pod totals
    (init containers and sidecars included as the scheduler counts them). The requests are what the
    scheduler places on the node's batch capacity: it adds `spec.overhead` per resource name, so a
    RuntimeClass's cpu/memory overhead counts against plain cpu/memory, never batch-*. The limits are the
    pod cgroup's, to which kubelet adds the overhead."""

    containers: tuple[ContainerBatch, ...]
    overhead_milli_cpu: int = 0
    overhead_memory: int = 0

    @property
    def has_cpu(self) -> bool:
        """Any container requests or limits batch-cpu (else kubelet's own cpu values stand)."""
        return any(c.resources.cpu_request is not None or c.resources.cpu_limit is not None for c in self.containers)

    @property
    def has_memory(self) -> bool:
        """Any container requests or limits batch-memory."""
        return any(
            c.resources.memory_request is not None or c.resources.memory_limit is not None for c in self.containers
        )

    def _total(self, values: list[int | None], overhead: int) -> int:
        return pod_total([c.resources for c in self.containers], values) + overhead

    @property
    def cpu_request_milli(self) -> int:
        """The pod's batch-cpu request as the scheduler allocates it (no overhead)."""
        return self._total([c.resources.cpu_request for c in self.containers], 0)

    @property
    def memory_request_bytes(self) -> int:
        """The pod's batch-memory request as the scheduler allocates it (no overhead)."""
        return self._total([c.resources.memory_request for c in self.containers], 0)

    @property
    def cpu_limit_milli(self) -> int | None:
        """None unless every container has a batch-cpu limit (as kubelet sets a pod quota)."""
        if not self.containers or not all(c.resources.cpu_limit for c in self.containers):
            return None
        return self._total([c.resources.cpu_limit for c in self.containers], self.overhead_milli_cpu)

    @property
    def memory_limit_bytes(self) -> int | None:
        """None unless every container has a batch-memory limit."""
        if not self.containers or not all(c.resources.memory_limit for c in self.containers):
            return None
        return self._total([c.resources.memory_limit for c in self.containers], self.overhead_memory)


@dataclass(frozen=True, slots=True)
class PodMeta:
    """What the API server says of a pod (standalone: only what the cgroup tree tells)."""

    uid: str
    namespace: str | None = None
    name: str | None = None
    pod_class: PodClass = "unknown"
    labels: dict[str, str] = field(default_factory=dict)
    priority: int | None = None
    cpu_request_cores: float = 0.0
    memory_request_bytes: int = 0
    cpu_limit_cores: float | None = None
    memory_limit_bytes: int | None = None
    creation_timestamp: float | None = None  # wall-clock seconds
    container_cpu_limits: dict[str, float | None] = field(default_factory=dict)  # by container ID
    batch: PodBatch | None = None  # the pod requests or limits kubernetes.io/batch-* (then it is offline)
    # the few annotations the agent acts on (contract.annotations.AGENT_POD_ANNOTATIONS), not all of them
    annotations: dict[str, str] = field(default_factory=dict)
    # memory request and limit (bytes; None: no limit) of each running container, by container ID
    container_memory: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    pod_ip: str | None = None  # status.podIP: where the opt-in SLO scrape finds the pod's metrics


@dataclass(frozen=True, slots=True)
class DiskRates:
    """One device's I/O rates of a pod or of the node (None on the first sample or after a reset)."""

    read_bytes_per_second: float | None
    write_bytes_per_second: float | None
    reads_per_second: float | None
    writes_per_second: float | None


@dataclass(frozen=True, slots=True)
class DiskSample:
    """A block device of the node (agent/sense/collectors/disk.py): its rates and the share of the time it was busy
    (/proc/diskstats io_ticks)."""

    name: str
    device: str  # 'MAJ:MIN'
    busy_ratio: float | None
    rates: DiskRates


def qos_label(qos: str) -> str:
    """A QoS class as labels and documents spell it: 'Guaranteed', 'BestEffort', 'best-effort' ->
    'guaranteed', 'besteffort' (whatever a pod source wrote; cgroup.normalize_qos refuses an unknown one)."""
    return qos.lower().replace("-", "").replace("_", "")


@dataclass(slots=True)
class PodSample:
    meta: PodMeta
    qos: str
    cgroup: str
    cpu_cores: float | None
    memory_working_set_bytes: int
    memory_anon_bytes: int
    memory_usage_bytes: int
    memory_file_bytes: int
    cpu_throttled_ratio: float | None
    containers: tuple[ContainerSample, ...]
    pressure: dict[str, Pressure] = field(default_factory=dict)
    # the pod cgroup's hard memory limit as read (kubelet's: overhead and sidecars included); None: unlimited
    # or unreadable. Memory QoS takes the pod's memory.high from it, never from the spec's sum of containers
    memory_limit_bytes: int | None = None
    # what the pod's own network namespace received and sent (collectors.pod_network; None: not read yet)
    network: NetworkRates | None = None
    disk: dict[str, DiskRates] | None = None  # by device 'MAJ:MIN'; None: the disk collector is off
    run_queue: RunQueue | None = None  # None: the run_queue collector is off, or has not read the pod yet

    @property
    def uid(self) -> str:
        return self.meta.uid


@dataclass(frozen=True, slots=True)
class NetworkRates:
    """A pod's interfaces together (loopback left out), bytes per second (None: the first reading);
    `host_network`: the pod has no namespace of its own, nothing is counted (the node's interfaces are)."""

    rx_bytes_per_second: float | None
    tx_bytes_per_second: float | None
    host_network: bool = False


@dataclass(frozen=True, slots=True)
class TierSample:
    qos: str
    cgroup: str
    cpu_cores: float | None
    memory_working_set_bytes: int


@dataclass(frozen=True, slots=True)
class NodeSample:
    cpu_capacity_cores: float
    cpu_cores: float | None  # busy cores: /proc/stat minus idle, iowait and steal
    memory_total_bytes: int
    memory_used_bytes: int  # MemTotal - MemAvailable
    memory_page_cache_bytes: int
    pressure: dict[str, Pressure] = field(default_factory=dict)

    @property
    def cpu_usage_ratio(self) -> float | None:
        return None if self.cpu_cores is None else min(1.0, self.cpu_cores / self.cpu_capacity_cores)

    @property
    def memory_usage_ratio(self) -> float:
        return self.memory_used_bytes / self.memory_total_bytes if self.memory_total_bytes else 0.0


@dataclass(frozen=True, slots=True)
class PodsTotal:
    """Every pod's cgroups together, read from the kubepods root each pass (its counters are hierarchical):
    the online pods' usage is this minus the offline pods', fresh each second while online pods' own
    readings are taken every few passes (agent/sense/collectors/pods.py)."""

    cpu_cores: float | None  # None on the first pass or after a counter reset
    memory_working_set_bytes: int


@dataclass(frozen=True, slots=True)
class InterfaceSample:
    name: str
    physical: bool
    rx_bytes_per_second: float | None
    tx_bytes_per_second: float | None


@dataclass(frozen=True, slots=True)
class Snapshot:
    seq: int
    mono: float  # time.monotonic() of the tick: windows and rates use it
    wall: float  # time.time(), for humans and persisted state only
    node: NodeSample
    tiers: dict[str, TierSample]
    pods: dict[str, PodSample]  # by UID
    interfaces: tuple[InterfaceSample, ...]
    duration_seconds: float  # how long the pass took
    collectors: tuple[CollectorRun, ...] = ()  # each collector's success and duration in this pass
    disks: tuple[DiskSample, ...] = ()  # the block devices (disk_devices collector; () when it is off)
    pods_total: PodsTotal | None = None  # the kubepods root; None when it cannot be read (then Σ pods stands)

    def network_total(self) -> tuple[float | None, float | None]:
        """rx/tx bytes per second summed over physical interfaces."""
        phys = [i for i in self.interfaces if i.physical]
        if not phys or any(i.rx_bytes_per_second is None for i in phys):
            return None, None
        rx = sum(i.rx_bytes_per_second or 0.0 for i in phys)
        tx = sum(i.tx_bytes_per_second or 0.0 for i in phys)
        return rx, tx
