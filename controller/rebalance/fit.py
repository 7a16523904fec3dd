"""Step 6: could a low node take this pod? Requests, node selector, required node affinity, taints, usage.

The check mirrors what kube-scheduler would ask of the node (resource requests against allocatable
minus what is already requested; nodeSelector and required node affinity; NoSchedule/NoExecute taints
tolerated; not cordoned) plus the load rule of rebalancing: the node's usage plus the pod's stays at or
under the node's high thresholds. A planned move reserves both on the chosen node for the rest of the
cycle (`Destination.reserve`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from controller.rebalance.facts import Amounts, NodeFacts, PodFacts, Taint, Toleration
from controller.rebalance.selectors import affinity_holds

#: Taint effects that keep a pod off a node (PreferNoSchedule only prefers).
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(slots=True)
class Destination:
    """A low node as this cycle sees it; `usage` and `requested` grow with each move planned onto it."""

    name: str
    facts: NodeFacts
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


def misfit(pod: PodFacts, usage: Amounts, dest: Destination) -> str | None:
    """Why `dest` cannot take the pod, or None when it can."""
    if dest.name == pod.node:
        return "same_node"
    facts = dest.facts
    if facts.unschedulable:
        return "unschedulable"
    if any(facts.labels.get(k) != v for k, v in pod.node_selector.items()):
        return "node_selector"
    if not affinity_holds(pod.affinity_terms, facts.labels, dest.name):
        return "node_affinity"
    if not taints_tolerated(facts.taints, pod.tolerations):
        return "taints"
    req, alloc = dest.requested + pod.requests, dest.allocatable
    if req.cpu > alloc.cpu or req.memory > alloc.memory:
        return "requests"
    after = dest.usage + usage
    if after.cpu > dest.high.cpu or after.memory > dest.high.memory:
        return "usage"
    return None


def first_fit(pod: PodFacts, usage: Amounts, destinations: Sequence[Destination]) -> tuple[Destination | None, str]:
    """The first destination (they come most room first) that can take the pod, else None and the reason
    the best-placed one gave."""
    first_reason = "no_low_node"
    for i, dest in enumerate(destinations):
        reason = misfit(pod, usage, dest)
        if reason is None:
            return dest, ""
        if i == 0 or first_reason == "same_node":
            first_reason = reason
    return None, first_reason
