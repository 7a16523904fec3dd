"""The node as the decisions of one pass see it: every derived quantity computed once, in one place.

    pods' usage   = the kubepods root's (all pods' cgroups together, read each pass), else Σ pods' usage
    online usage  = pods' usage − Σ offline pods' usage (floored at 0), else Σ online pods' usage
    system usage  = the node's usage − pods' usage (floored at 0)
    allocatable   = the Node's status.allocatable, else the machine's capacity (standalone, or no Node yet)

The root's figures stand for the online pods because an online pod's own readings are taken every few
passes (agent/sense/collectors/pods.py): their sum would lag, the root's does not; they also count what a pod
not (yet) known to the agent uses as online, not as system.

Capacity, eviction and enforcement all read one `NodeState` built from one snapshot, so no two of them can
disagree on what "online usage" or "allocatable" meant in a pass. Pods of unknown class count as online:
never give away, nor throttle for, what might belong to a latency-sensitive pod. A CPU rate that is not
known yet (the first pass after a start) stays None: unknown is never read as idle.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from agent.snapshot import PodMeta, PodSample, SloReading, Snapshot

Resource = Literal["cpu", "memory"]


def pod_usage(pod: PodSample, resource: Resource) -> float:
    """Cores or working-set bytes; a CPU rate not known yet counts 0."""
    return (pod.cpu_cores or 0.0) if resource == "cpu" else float(pod.memory_working_set_bytes)


def pod_request(pod: PodSample, resource: Resource) -> float:
    return pod.meta.cpu_request_cores if resource == "cpu" else float(pod.meta.memory_request_bytes)


def batch_request(pod: PodSample, resource: Resource) -> float:
    """The pod's kubernetes.io/batch-cpu (cores) or batch-memory (bytes) request: what the scheduler placed
    on the node's batch capacity, beside its `cpu`/`memory` request."""
    batch = pod.meta.batch
    if batch is None:
        return 0.0
    return batch.cpu_request_milli / 1000 if resource == "cpu" else float(batch.memory_request_bytes)


def watermark_usage(pod: PodSample, resource: Resource) -> float:
    """An offline pod's usage as eviction's watermarks count it. Memory: all of it (it is given back only by
    eviction). CPU: only what it uses above its kubernetes.io/batch-cpu request. Within that request it uses
    what the node lent it (the capacity computation left the online and system peaks out of it), with the
    lowest CFS weight (kubelet gives a pod without a cpu request 2 shares: online pods take the CPU back at
    once) and held to the CPU budget within two passes. Counted, it turned a node whose batch pods used what
    they were lent (up to 0.95 of allocatable) into an evicting node at the 80 % watermark, which stops lending."""
    usage = pod_usage(pod, resource)
    return usage if resource == "memory" else max(0.0, usage - batch_request(pod, "cpu"))


@dataclass(frozen=True, slots=True)
class BatchRequests:
    """Σ of the batch requests of the node's pods that have not finished, as the scheduler counts them."""

    pods: int = 0
    cpu_milli: int = 0
    memory_bytes: int = 0


def batch_requests(metas: Iterable[PodMeta]) -> BatchRequests:
    """Σ of the pods' batch requests (the caller passes the pods that have not finished)."""
    pods = cpu = memory = 0
    for meta in metas:
        if meta.batch is None:
            continue
        pods += 1
        cpu += meta.batch.cpu_request_milli
        memory += meta.batch.memory_request_bytes
    return BatchRequests(pods, cpu, memory)


@dataclass(frozen=True, slots=True)
class Usage:
    """One resource in one pass, in cores or bytes."""

    allocatable: float
    node: float | None  # the whole node's usage; None while not known (CPU on the first pass)
    pods: float
    online: float
    offline: float
    # offline pods' usage within their batch requests, which the watermarks do not count (`watermark_usage`)
    offline_lent: float = 0.0

    @property
    def known(self) -> bool:
        return self.node is not None

    @property
    def system(self) -> float | None:
        """The node's usage outside every pod."""
        return None if self.node is None else max(0.0, self.node - self.pods)

    def percent(self) -> float | None:
        """What eviction's watermarks compare, as a percentage of allocatable: the node's usage but for
        batch pods' CPU within their batch-cpu requests (`watermark_usage`)."""
        return None if self.node is None else 100.0 * max(0.0, self.node - self.offline_lent) / self.allocatable

    def online_and_system_ratio(self) -> float | None:
        """(online + system) / allocatable: how busy the node is with everything but offline pods."""
        if self.node is None or self.allocatable <= 0:
            return None
        return (self.online + (self.system or 0.0)) / self.allocatable


@dataclass(frozen=True, slots=True)
class NodeState:
    snapshot: Snapshot
    cpu: Usage
    memory: Usage
    online: tuple[PodSample, ...]  # every pod that is not offline (unknown class included)
    offline: tuple[PodSample, ...]
    allocatable_from_node: bool  # False: the machine's capacity stands in for a missing allocatable
    # the node's usage in percent of allocatable, averaged over the last smoothing_seconds (eviction's
    # watermarks compare this); a resource not measured in this pass (CPU on the first) is absent
    smoothed_percent: Mapping[Resource, float] = field(default_factory=dict)
    # what protection did as this pass began (the previous pass's outcome): the node is evicting offline pods,
    # and enforcement holds offline pods below their own limits (quota or cpuset); online QoS gives nothing then
    evicting: bool = False
    offline_suppressed: bool = False
    # read for the enforcement stage's strategies (agent/enforce/inputs.py) before they plan:
    memory_high_percent: float = 80.0  # the high memory watermark (eviction's, from the Node's annotations)
    exclusive_cpus: frozenset[int] = frozenset()  # CPUs kubelet's CPU manager gave containers for themselves
    parent_cpus: Mapping[str, frozenset[int]] = field(default_factory=dict)  # pod's parent cgroup -> effective CPUs
    # a ceiling on the offline CPU budget set by a strategy earlier in the pass (agent/enforce/actions.py `Plan`)
    offline_cpu_cap: float | None = None
    # the latest SLO readings of online pods that declare one (agent/sense/slo_scrape.py), by UID
    slo: Mapping[str, SloReading] = field(default_factory=dict)

    def usage(self, resource: Resource) -> Usage:
        return self.cpu if resource == "cpu" else self.memory


def node_state(snap: Snapshot, allocatable: tuple[float | None, float | None]) -> NodeState:
    """The pass's state from its snapshot and the Node's allocatable (cores, bytes; None when absent)."""
    on: list[PodSample] = []
    off: list[PodSample] = []
    for p in snap.pods.values():  # one look at each pod's class (hundreds of pods, every second)
        (off if p.meta.pod_class == "offline" else on).append(p)
    alloc_cpu, alloc_mem = allocatable
    node, total = snap.node, snap.pods_total
    # each sum over a list, in the pods' order (as `pod_usage` would give it): no call per pod and resource
    off_cpu = sum([p.cpu_cores or 0.0 for p in off])
    off_mem = sum([float(p.memory_working_set_bytes) for p in off])
    if total is not None and total.cpu_cores is not None:
        pods_cpu = max(total.cpu_cores, off_cpu)
        on_cpu = pods_cpu - off_cpu
    else:  # no root, or its rate not known yet
        on_cpu = sum([p.cpu_cores or 0.0 for p in on])
        pods_cpu = on_cpu + off_cpu
    if total is not None:
        pods_mem = max(float(total.memory_working_set_bytes), off_mem)
        on_mem = pods_mem - off_mem
    else:
        on_mem = sum([float(p.memory_working_set_bytes) for p in on])
        pods_mem = on_mem + off_mem
    # eviction's watermarks leave offline pods' CPU within their requests out (`watermark_usage`)
    lent_cpu = sum([min(p.cpu_cores or 0.0, batch_request(p, "cpu")) for p in off if p.meta.batch is not None])
    # a missing (or zero) allocatable: the machine's capacity stands in
    cpu = Usage(alloc_cpu or node.cpu_capacity_cores, node.cpu_cores, pods_cpu, on_cpu, off_cpu, lent_cpu)
    memory = Usage(
        float(alloc_mem or node.memory_total_bytes), float(node.memory_used_bytes), pods_mem, on_mem, off_mem
    )
    return NodeState(snap, cpu, memory, tuple(on), tuple(off), bool(alloc_cpu) and bool(alloc_mem))


class Smoother:
    """Mean of the samples of the last `seconds` (monotonic time)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._samples: collections.deque[tuple[float, float]] = collections.deque()

    def add(self, t: float, value: float) -> float:
        self._samples.append((t, value))
        while self._samples and self._samples[0][0] <= t - self.seconds:
            self._samples.popleft()
        return sum(v for _, v in self._samples) / len(self._samples)


class StateBuilder:
    """Builds each pass's NodeState; keeps what spans passes (the smoothing of usage) so the record is whole."""

    def __init__(self, smoothing_seconds: float) -> None:
        self._smoothers: dict[Resource, Smoother] = {r: Smoother(smoothing_seconds) for r in ("cpu", "memory")}

    def build(
        self,
        snap: Snapshot,
        allocatable: tuple[float | None, float | None],
        *,
        evicting: bool = False,
        offline_suppressed: bool = False,
    ) -> NodeState:
        state = node_state(snap, allocatable)
        smoothed: dict[Resource, float] = {}
        for resource, smoother in self._smoothers.items():
            raw = state.usage(resource).percent()
            if raw is not None:
                smoothed[resource] = smoother.add(snap.mono, raw)
        return dataclasses.replace(
            state, smoothed_percent=smoothed, evicting=evicting, offline_suppressed=offline_suppressed
        )
