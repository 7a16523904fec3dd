"""Floor the batch capacity of nodes whose agent has gone silent (issue 22).

A node's `kubernetes.io/batch-*` allocatable and Volcano's `volcano.sh/oversubscription-*` annotations are
the agent's to publish. When the agent crashed, was deleted (uninstall) or cannot be reached, they keep
their last values: the scheduler goes on placing batch pods there, and nobody limits them. So when a node
that carries them has not answered `after` polling cycles in a row (its endpoint gone or not ready counts
too), the controller sets its batch allocatable (capacity and allocatable) to what is allocated there
(Σ batch requests of its pods that have not finished: free is 0, nothing new fits, and kubelet still
re-admits the running ones at a restart) and the oversubscription annotations to 0, records an Event on
the Node and counts it. Once the agent answers again the controller stops touching them: the agent
publishes its own values — and so when its values move after a floor without its answering (it runs and
publishes, but the controller cannot reach it: a NetworkPolicy, a certificate): the controller then leaves
the node to it (logged once, `colo_controller_nodes_unreachable_publishing`) instead of writing against it
every cycle, until it answers again. Only Colo's nodes: those polled this cycle, and those
the controller once scored (`colo.io/load-score`, which it writes on every node it polls) — never a node
another agent (koordlet, Volcano's) publishes on.

`SilentAgents` is the pure bookkeeping (tested as such); `Floorer` makes the writes through `kube/`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from contract.annotations import (
    BATCH_CPU,
    BATCH_MEMORY,
    LOAD_SCORE,
    OVERSUBSCRIPTION_CPU,
    OVERSUBSCRIPTION_MEMORY,
)
from controller.metrics import ControllerMetrics
from controller.nodes import node_annotations, node_name
from kube import Kube
from kube.resources import pod_batch_requests, quantity

log = logging.getLogger(__name__)

#: Where the pod informer's transform keeps a pod's batch requests: [milli-cores, bytes].
BATCH_KEY = "colo.io/batch-requests"
EVENT_COMPONENT = "colo-controller"


def batch_facts(pod: Mapping[str, Any]) -> list[int] | None:
    """What the pod informer keeps of a pod for the floor: its batch requests while it holds them."""
    held = pod_batch_requests(pod)
    return None if held is None else [held[0], held[1]]


def allocated_by_node(pods: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    """node -> Σ (batch-cpu milli-cores, batch-memory bytes) of the kept pods bound there."""
    out: dict[str, tuple[int, int]] = {}
    for pod in pods:
        held = pod.get(BATCH_KEY)
        node = (pod.get("spec") or {}).get("nodeName")
        if not isinstance(held, list) or not isinstance(node, str):
            continue
        cpu, memory = out.get(node, (0, 0))
        out[node] = (cpu + int(held[0]), memory + int(held[1]))
    return out


def publishes_batch(node: Mapping[str, Any]) -> bool:
    """The node carries what an agent publishes: the oversubscription annotations or batch allocatable."""
    anns = node_annotations(node)
    status = node.get("status")
    alloc = status.get("allocatable") if isinstance(status, Mapping) else None
    has_alloc = isinstance(alloc, Mapping) and (BATCH_CPU in alloc or BATCH_MEMORY in alloc)
    return has_alloc or OVERSUBSCRIPTION_CPU in anns or OVERSUBSCRIPTION_MEMORY in anns


@dataclass(frozen=True, slots=True)
class Silence:
    """What one cycle changes: nodes to floor now (silent `after` cycles or more) and nodes answering again."""

    floor: frozenset[str]
    answered: frozenset[str]


class SilentAgents:
    """Counts, per node that publishes batch capacity, the polling cycles in a row its agent did not answer."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.misses: dict[str, int] = {}
        self.floored: set[str] = set()

    def observe(self, publishing: Iterable[str], answered: Iterable[str]) -> Silence:
        """One cycle: `publishing` the nodes carrying batch capacity, `answered` those whose agent answered."""
        answered_set = set(answered)
        seen = set(publishing) | self.floored
        back = frozenset(self.floored & answered_set)
        self.floored -= back
        for name in list(self.misses):
            if name not in seen or name in answered_set:
                del self.misses[name]
        for name in seen - answered_set:
            self.misses[name] = self.misses.get(name, 0) + 1
        floor = frozenset(n for n, m in self.misses.items() if self.after > 0 and m >= self.after)
        return Silence(floor, back)

    def forget(self, name: str) -> None:
        """The node is gone."""
        self.misses.pop(name, None)
        self.floored.discard(name)

    def reset(self) -> None:
        """Leadership changed hands: count afresh."""
        self.misses.clear()
        self.floored.clear()


def batch_values(node: Mapping[str, Any]) -> tuple[str, str]:
    """The node's batch allocatable as written (cpu, memory), canonical integers where they parse."""
    status = node.get("status")
    alloc = status.get("allocatable") if isinstance(status, Mapping) else None
    alloc = alloc if isinstance(alloc, Mapping) else {}
    out = []
    for key in (BATCH_CPU, BATCH_MEMORY):
        q = quantity(alloc.get(key))
        out.append(str(int(q)) if q is not None and q == q.to_integral_value() else str(alloc.get(key)))
    return out[0], out[1]


def floor_writes(node: Mapping[str, Any], allocated: tuple[int, int]) -> tuple[dict[str, str], dict[str, str]]:
    """(status resources, annotations) still to write to floor `node` at `allocated`; both empty when it
    already is."""
    status = node.get("status")
    alloc = status.get("allocatable") if isinstance(status, Mapping) else None
    alloc = alloc if isinstance(alloc, Mapping) else {}
    resources: dict[str, str] = {}
    for key, want in ((BATCH_CPU, allocated[0]), (BATCH_MEMORY, allocated[1])):
        if quantity(alloc.get(key)) != want:
            resources[key] = str(want)
    anns = node_annotations(node)
    annotations = {k: "0" for k in (OVERSUBSCRIPTION_CPU, OVERSUBSCRIPTION_MEMORY) if anns.get(k) != "0"}
    if resources:  # both resources together: capacity and allocatable stay a consistent pair
        resources = {BATCH_CPU: str(allocated[0]), BATCH_MEMORY: str(allocated[1])}
    return resources, annotations


class Floorer:
    """Applies `SilentAgents`' verdicts: the writes, an Event per node when its floor starts and ends, the
    `colo_controller_nodes_floored` gauge. Called from one loop only."""

    def __init__(
        self,
        kube: Kube,
        after: int,
        metrics: ControllerMetrics,
        *,
        lease_time_left: Callable[[], float],
        request_timeout: float,
        on_written: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.kube = kube
        self.silent = SilentAgents(after)
        self._written: dict[str, tuple[str, str]] = {}  # floored node -> the batch values this controller wrote
        self.unreached: set[str] = set()  # nodes whose agent publishes without answering: left to it
        self.metrics = metrics
        self.lease_time_left = lease_time_left
        self.request_timeout = request_timeout
        self.on_written = on_written

    def leadership_changed(self, leading: bool) -> None:
        self.silent.reset()  # count silences afresh: another replica may have seen agents answer
        self._written.clear()
        self.unreached.clear()

    def run(
        self,
        nodes: Iterable[Mapping[str, Any]],
        answered: Iterable[str],
        pods: Iterable[Mapping[str, Any]],
        polled: Collection[str] = (),
    ) -> int:
        """One cycle; returns the number of writes made. `polled`: the nodes whose agent was asked this cycle."""
        by_name = {
            n: node
            for node in nodes
            if (n := node_name(node)) is not None and (n in polled or LOAD_SCORE in node_annotations(node))
        }
        answered = set(answered)
        for gone in set(self.silent.misses) | self.silent.floored | set(self._written) | self.unreached:
            if gone not in by_name:
                self.silent.forget(gone)
                self._written.pop(gone, None)
                self.unreached.discard(gone)
        self.unreached -= answered
        for name in sorted(self.silent.floored & set(self._written)):
            if batch_values(by_name[name]) != self._written[name]:  # someone else wrote: its agent publishes
                self.silent.forget(name)
                del self._written[name]
                self.unreached.add(name)
                log.warning(
                    "node %s: its agent publishes batch capacity but does not answer the controller; "
                    "left to it (check NetworkPolicies and certificates)",
                    name,
                )
        publishing = (n for n, node in by_name.items() if publishes_batch(node) and n not in self.unreached)
        verdict = self.silent.observe(publishing, answered)
        for name in sorted(verdict.answered):
            log.info("node %s: its agent answers again; its batch capacity is the agent's to publish", name)
            self._event(
                by_name.get(name),
                "BatchCapacityReleased",
                "Normal",
                "colo-agent answers again: it publishes the node's batch capacity itself",
            )
        writes = 0
        if verdict.floor:
            allocated = allocated_by_node(pods)
            for name in sorted(verdict.floor):
                writes += self._floor(by_name[name], allocated.get(name, (0, 0)))
        self.metrics.nodes_floored.set(len(self.silent.floored))
        self.metrics.nodes_unreachable_publishing.set(len(self.unreached))
        return writes

    def _timeout(self) -> float | None:
        left = self.lease_time_left()
        if left == float("inf"):
            return None
        return min(self.request_timeout, 0.8 * left) if left > 0.05 else 0.0

    def _floor(self, node: Mapping[str, Any], allocated: tuple[int, int]) -> int:
        name = node_name(node) or ""
        resources, annotations = floor_writes(node, allocated)
        writes = 0
        if resources or annotations:
            timeout = self._timeout()
            if timeout == 0.0:
                return 0  # the lease is (nearly) gone: a successor decides
            try:
                if resources:
                    updated = self.kube.patch_node_extended_resources(name, resources, timeout=timeout)
                    writes += 1
                    if self.on_written is not None:
                        self.on_written(updated)
                if annotations:
                    updated = self.kube.patch_node_annotations(name, annotations, timeout=timeout)
                    writes += 1
                    if self.on_written is not None:
                        self.on_written(updated)
            except Exception as err:
                self.metrics.floor_writes.labels("error").inc()
                log.warning("node %s: flooring its batch capacity failed: %s", name, err)
                return writes
            self.metrics.floor_writes.labels("ok").inc(writes)
        self._written[name] = (str(allocated[0]), str(allocated[1]))
        if name not in self.silent.floored:
            self.silent.floored.add(name)
            cpu, memory = allocated
            message = (
                f"colo-agent has not answered for {self.silent.after} polling cycles: {BATCH_CPU} and {BATCH_MEMORY} "
                f"held at the allocated amount ({cpu} milli-cores, {memory} bytes), {OVERSUBSCRIPTION_CPU} and "
                f"{OVERSUBSCRIPTION_MEMORY} set to 0 until it answers again"
            )
            log.warning("node %s: %s", name, message)
            self._event(node, "BatchCapacityFloored", "Warning", message)
        return writes

    def _event(self, node: Mapping[str, Any] | None, reason: str, event_type: str, message: str) -> None:
        if node is None:
            return
        meta = node.get("metadata") or {}
        try:
            self.kube.create_event(
                kind="Node",
                name=str(meta.get("name")),
                namespace="",
                uid=meta.get("uid"),
                reason=reason,
                message=message,
                event_type="Warning" if event_type == "Warning" else "Normal",
                component=EVENT_COMPONENT,
            )
        except Exception as err:
            log.debug("event %s on node %s not recorded: %s", reason, meta.get("name"), err)
