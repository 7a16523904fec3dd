"""Step 6: could a low node take this pod? Requests, node selector, required node affinity, taints, usage.

The check mirrors what kube-scheduler would ask of the node (resource requests against allocatable
minus what is already requested; nodeSelector and required node affinity; NoSchedule/NoExecute taints
tolerated; not cordoned) plus the load rule of rebalancing: the node's usage plus the pod's stays at or
under the node's high thresholds. A planned move reserves both on the chosen node for the rest of the
cycle (`DestinationPool.reserve`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from controller.rebalance.node_affinity import affinity_holds
from controller.rebalance.traits import Amounts, NodeTraits, PodTraits, Taint, Toleration

#: Taint effects that keep a pod off a node (PreferNoSchedule only prefers).
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(slots=True)
class Destination:
    """A low node as this cycle sees it; `usage` and `requested` grow with each move planned onto it."""

    name: str
    traits: NodeTraits
    allocatable: Amounts
    usage: Amounts
    high: Amounts  # absolute high thresholds (cores, bytes)
    requested: Amounts

    def reserve(self, requests: Amounts, usage: Amounts) -> None:
        self.requested = self.requested + requests
        self.usage = self.usage + usage


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Kubernetes' Toleration.ToleratesTaint."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.operator == "Exists":
        return not toleration.key or toleration.key == taint.key
    return toleration.key == taint.key and toleration.value == taint.value


def taints_tolerated(taints: Sequence[Taint], tolerations: Sequence[Toleration]) -> bool:
    return all(any(tolerates(t, taint) for t in tolerations) for taint in taints if taint.effect in BLOCKING_EFFECTS)


def static_misfit(pod: PodTraits, dest: Destination) -> str | None:
    """The checks that cannot change within a cycle: cordon, node selector, required affinity, taints."""
    traits = dest.traits
    if traits.unschedulable:
        return "unschedulable"
    if any(traits.labels.get(k) != v for k, v in pod.node_selector.items()):
        return "node_selector"
    if not affinity_holds(pod.affinity_terms, traits.labels, dest.name):
        return "node_affinity"
    if not taints_tolerated(traits.taints, pod.tolerations):
        return "taints"
    return None


def dynamic_misfit(pod: PodTraits, usage: Amounts, dest: Destination) -> str | None:
    """The checks that change as moves are planned: requests against allocatable, usage against high."""
    req, alloc = dest.requested + pod.requests, dest.allocatable
    if req.cpu > alloc.cpu or req.memory > alloc.memory:
        return "requests"
    after = dest.usage + usage
    if after.cpu > dest.high.cpu or after.memory > dest.high.memory:
        return "usage"
    return None


def misfit(pod: PodTraits, usage: Amounts, dest: Destination) -> str | None:
    """Why `dest` cannot take the pod, or None when it can."""
    if dest.name == pod.node:
        return "same_node"
    return static_misfit(pod, dest) or dynamic_misfit(pod, usage, dest)


def room(dest: Destination) -> float:
    """The smaller share of allocatable left below the high threshold: most room first."""
    return min(
        (dest.high.cpu - dest.usage.cpu) / dest.allocatable.cpu,
        (dest.high.memory - dest.usage.memory) / dest.allocatable.memory,
    )


Signature = tuple[object, ...]


def signature(pod: PodTraits) -> Signature:
    """Pods with equal scheduling constraints (replicas of one workload) share the static checks."""
    return (tuple(sorted(pod.node_selector.items())), pod.affinity_terms, pod.tolerations)


@dataclass(slots=True)
class _Group:
    """The destinations that pass the static checks for one signature, in a max-heap by room."""

    heap: list[tuple[float, int, int]]  # (-room, index, version of the destination when pushed)
    reason: str  # why none passes, when the heap is empty
    bound: tuple[float, float, float, float] = (math.inf, math.inf, math.inf, math.inf)


class DestinationPool:
    """First fit over the low nodes, most room first, without scanning all of them for every pod.

    The static checks are done once per scheduling signature; the dynamic ones walk a heap by room
    (entries of destinations that took a move since they were pushed are re-keyed when they surface:
    room only shrinks within a cycle). When a pod fits nowhere, the largest room and free requests
    seen are remembered per signature, so a later pod needing more is refused without a walk.
    """

    def __init__(self, destinations: Sequence[Destination]) -> None:
        self.destinations = list(destinations)
        self._version = [0] * len(self.destinations)
        self._index = {d.name: i for i, d in enumerate(self.destinations)}
        self._groups: dict[Signature, _Group] = {}

    def _group(self, pod: PodTraits) -> _Group:
        sig = signature(pod)
        group = self._groups.get(sig)
        if group is None:
            heap: list[tuple[float, int, int]] = []
            reasons: list[str] = []
            for i, d in enumerate(self.destinations):
                why = static_misfit(pod, d)
                if why is None:
                    heap.append((-room(d), i, self._version[i]))
                else:
                    reasons.append(why)
            heapq.heapify(heap)
            reason = reasons[0] if reasons else "no_low_node"
            group = self._groups[sig] = _Group(heap, reason)
        return group

    def find(self, pod: PodTraits, usage: Amounts) -> tuple[Destination | None, str]:
        """A destination that can take the pod now (not yet reserved), or None and why not."""
        group = self._group(pod)
        if not group.heap:
            return None, group.reason
        cpu_room, mem_room, cpu_free, mem_free = group.bound
        if pod.requests.cpu > cpu_free or pod.requests.memory > mem_free:
            return None, "requests"
        if usage.cpu > cpu_room or usage.memory > mem_room:
            return None, "usage"
        heap, popped = group.heap, []
        found: Destination | None = None
        reason = ""
        seen = [-math.inf] * 4
        while heap:
            key, i, version = heapq.heappop(heap)
            d = self.destinations[i]
            if version != self._version[i]:
                heapq.heappush(heap, (-room(d), i, self._version[i]))
                continue
            popped.append((key, i, version))
            if d.name == pod.node:
                continue
            why = dynamic_misfit(pod, usage, d)
            if why is None:
                found = d
                break
            reason = reason or why
            seen = [
                max(seen[0], d.high.cpu - d.usage.cpu),
                max(seen[1], d.high.memory - d.usage.memory),
                max(seen[2], d.allocatable.cpu - d.requested.cpu),
                max(seen[3], d.allocatable.memory - d.requested.memory),
            ]
        for entry in popped:
            heapq.heappush(heap, entry)
        if found is None:
            group.bound = (seen[0], seen[1], seen[2], seen[3])
            return None, reason or "same_node"
        return found, ""

    def reserve(self, dest: Destination, requests: Amounts, usage: Amounts) -> None:
        """Charge a planned move to `dest` for the rest of the cycle."""
        dest.reserve(requests, usage)
        self._version[self._index[dest.name]] += 1
