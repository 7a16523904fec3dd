"""`colo-controller --purge-node-state`: remove for good what Colo wrote on the nodes, after an uninstall.

Run once the workloads are gone (deploy/uninstall.sh, docs/uninstall.md): a running agent or controller
would write it all again. With the operator's credentials (the controller's RBAC is gone by then). Per node,
only what is there is written, so a second run sends nothing:

- annotations: Volcano's `volcano.sh/oversubscription-{cpu,memory}` and `volcano.sh/offline-job-evicting`
  (the agent's), crane's load metrics (the policy's syncPolicy names, crane's defaults without a policy) and
  `node_hot_value`, Colo's `colo.io/load-score` and the deprecated `colo.io/oversubscription`: one PATCH;
- the agent's NoSchedule taint `volcano.sh/offline-job-evicting` (set with eviction.taint): read, then
  removed with a guarded JSON patch, other taints untouched;
- `kubernetes.io/batch-cpu` and `batch-memory` in status capacity and allocatable: one status PATCH that
  sets each to exactly what the node's batch pods that have not finished still request, and removes it
  where they request none. Never more: with no agent left, capacity beyond what running pods hold would
  admit new batch pods that nothing limits. Never less: kubelet re-admits running pods against allocatable
  at a restart and would reject them.

`follow_batch_pods` (`--follow SECONDS`) then watches the pods and lowers each node's batch resources as its
remaining batch pods finish, until no node carries any, or the time is up.

What the operator set is left alone: the `volcano.sh/oversubscription` label, `volcano.sh/oversubscription-types`
and the eviction watermark annotations.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contract import annotations as keys
from controller.nodes import node_annotations, node_name
from kube import ApiError, Kube
from kube.resources import pod_batch_requests, quantity

log = logging.getLogger(__name__)

#: The taint the agent sets while evicting (agent/evict/kube_actions.py), key and effect.
EVICTING_TAINT = (keys.OFFLINE_JOB_EVICTING, "NoSchedule")
BATCH_RESOURCES = (keys.BATCH_CPU, keys.BATCH_MEMORY)
UNITS = ("m cpu", " bytes")  # how each batch resource's integer reads
#: Longest single watch while following (the server ends it; the follow watches again).
WATCH_SECONDS = 60


def colo_annotations(metric_names: Iterable[str]) -> tuple[str, ...]:
    """Every node annotation Colo's agent or controller writes, given the crane metrics synced."""
    return (
        keys.OVERSUBSCRIPTION_CPU,
        keys.OVERSUBSCRIPTION_MEMORY,
        keys.OFFLINE_JOB_EVICTING,
        *metric_names,
        keys.HOT_VALUE,
        keys.LOAD_SCORE,
        keys.LEGACY_OVERSUBSCRIPTION,
    )


def carried_batch(node: Mapping[str, Any]) -> dict[str, list[object]]:
    """The batch resources the node carries, each with its values in status.capacity and status.allocatable."""
    status = node.get("status") or {}
    out: dict[str, list[object]] = {}
    for part in ("capacity", "allocatable"):
        for key, value in (status.get(part) or {}).items():
            if key in BATCH_RESOURCES:
                out.setdefault(key, []).append(value)
    return out


def batch_writes(node: Mapping[str, Any], held: tuple[int, int]) -> dict[str, str | None]:
    """The status values that bring the node's batch resources to `held` (pure): each resource it carries is
    set to what its batch pods still request, or removed where they request none; {} when it already holds
    exactly that. A resource the node does not carry is not added (nothing of Colo's is there)."""
    carried = carried_batch(node)
    out: dict[str, str | None] = {}
    for resource, want in zip(BATCH_RESOURCES, held, strict=True):
        values = carried.get(resource)
        if not values:
            continue
        if want <= 0:
            out[resource] = None
        elif len(values) != 2 or any(quantity(v) != want for v in values):
            out[resource] = str(want)
    return out


def held_by_node(pods: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    """node -> Σ (batch-cpu milli-cores, batch-memory bytes) its pods that have not finished request."""
    out: dict[str, tuple[int, int]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        held = pod_batch_requests(pod)
        if held is None or not isinstance(node, str):
            continue
        cpu, memory = out.get(node, (0, 0))
        out[node] = (cpu + held[0], memory + held[1])
    return out


@dataclass(slots=True)
class NodePurge:
    """What was (or, dry, would be) removed from or lowered on one node, and what failed."""

    node: str
    annotations: list[str] = field(default_factory=list)
    taint: bool = False
    resources: list[str] = field(default_factory=list)  # batch resources removed
    lowered: dict[str, str] = field(default_factory=dict)  # batch resource -> the value it was set to
    held: tuple[int, int] = (0, 0)  # Σ batch requests (milli-cores, bytes) of its pods that have not finished
    kept: list[str] = field(default_factory=list)  # batch resources left at what its batch pods request
    error: str | None = None

    @property
    def changed(self) -> bool:
        return bool(self.annotations or self.taint or self.resources or self.lowered)

    @property
    def carried(self) -> bool:
        """The node carried something of Colo's: written now, or batch resources its batch pods still hold."""
        return self.changed or bool(self.kept)

    def describe(self) -> str:
        removed = []
        if self.annotations:
            removed.append(f"annotations {', '.join(self.annotations)}")
        if self.taint:
            removed.append(f"taint {EVICTING_TAINT[0]}:{EVICTING_TAINT[1]}")
        if self.resources:
            removed.append(f"status {', '.join(self.resources)}")
        parts = [f"removed {'; '.join(removed)}"] if removed else []
        if self.lowered:
            parts.append(held_text("set", self.lowered, self.held))
        if self.kept:
            parts.append(held_text("kept", dict.fromkeys(self.kept, ""), self.held))
        what = "; ".join(parts) or "nothing of Colo's"
        return f"{self.node}: {what}" + (f" (failed: {self.error})" if self.error else "")


def held_text(verb: str, resources: Mapping[str, str], held: tuple[int, int]) -> str:
    """'set kubernetes.io/batch-cpu to 100m cpu: what batch pods that have not finished still request there'."""
    named = ", ".join(
        f"{r} to {held[i]}{UNITS[i]}" if verb == "set" else f"{r} at {held[i]}{UNITS[i]}"
        for i, r in enumerate(BATCH_RESOURCES)
        if r in resources
    )
    return f"{verb} {named}: what batch pods that have not finished still request there"


def plan(node: Mapping[str, Any], annotation_keys: Collection[str], held: tuple[int, int] = (0, 0)) -> NodePurge:
    """What `node` carries of Colo's (pure); `held`: what its batch pods that have not finished request."""
    purge = NodePurge(node_name(node) or "", held=held)
    anns = node_annotations(node)
    purge.annotations = [k for k in annotation_keys if k in anns]
    taints = (node.get("spec") or {}).get("taints") or []
    purge.taint = any(t.get("key") == EVICTING_TAINT[0] and t.get("effect") == EVICTING_TAINT[1] for t in taints)
    writes = batch_writes(node, held)
    purge.resources = [r for r, v in writes.items() if v is None]
    purge.lowered = {r: v for r, v in writes.items() if v is not None}
    purge.kept = [r for r in carried_batch(node) if r not in writes]
    return purge


def purge_node_state(
    kube: Kube, metric_names: Iterable[str], *, label_selector: str | None = None, dry_run: bool = False
) -> tuple[list[NodePurge], BatchHolds]:
    """Remove Colo's annotations and taint from every node (of `label_selector`) and bring its batch
    resources to what its batch pods still request; the holds left, for `follow_batch_pods`."""
    annotation_keys = colo_annotations(metric_names)
    nodes, _ = kube.list("nodes", label_selector=label_selector or None)
    holds = BatchHolds.listed(kube)
    out: list[NodePurge] = []
    for node in nodes:
        name = node_name(node) or ""
        purge = plan(node, annotation_keys, holds.held(name))
        out.append(purge)
        if purge.kept or purge.lowered:
            holds.nodes.add(name)
        if dry_run or not purge.changed:
            continue
        try:
            if purge.annotations:
                kube.patch_node_annotations(purge.node, dict.fromkeys(purge.annotations))
            if purge.taint:
                kube.set_node_taint(purge.node, EVICTING_TAINT[0], "", EVICTING_TAINT[1], present=False)
            if purge.resources or purge.lowered:
                kube.patch_node_extended_resources(purge.node, {**dict.fromkeys(purge.resources), **purge.lowered})
        except Exception as err:
            purge.error = str(err).splitlines()[0][:300] if str(err) else type(err).__name__
            log.warning("node %s: purge failed: %s", purge.node, purge.error)
    return out, holds


@dataclass(slots=True)
class BatchHolds:
    """The batch requests of every pod that has not finished, by uid, kept current from a pod watch; and the
    nodes that still carry batch resources because of them."""

    pods: dict[str, tuple[str, int, int]]  # uid -> (node, batch-cpu milli-cores, batch-memory bytes)
    resource_version: str
    nodes: set[str] = field(default_factory=set)

    @classmethod
    def listed(cls, kube: Kube) -> BatchHolds:
        pods, rv = kube.list("pods")
        holds = cls({}, rv)
        for pod in pods:
            holds.update("ADDED", pod)
        return holds

    def update(self, event: str, pod: Mapping[str, Any]) -> set[str]:
        """Apply one watch event; the nodes whose holds it changed."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
        before = self.pods.pop(uid, None)
        node = (pod.get("spec") or {}).get("nodeName")
        held = None if event == "DELETED" else pod_batch_requests(pod)
        if held is not None and isinstance(node, str) and node:
            self.pods[uid] = (node, held[0], held[1])
        after = self.pods.get(uid)
        if before == after:
            return set()
        return {n for n in (before[0] if before else None, after[0] if after else None) if n}

    def held(self, node: str) -> tuple[int, int]:
        cpu = sum(c for n, c, _ in self.pods.values() if n == node)
        memory = sum(m for n, _, m in self.pods.values() if n == node)
        return cpu, memory


def follow_batch_pods(
    kube: Kube,
    holds: BatchHolds,
    seconds: float,
    report: Callable[[str], None],
    *,
    clock: Callable[[], float] = time.monotonic,
) -> set[str]:
    """Watch the pods and keep each node of `holds.nodes` at what its remaining batch pods request, until no
    such node carries batch resources or `seconds` have passed; the nodes that still do (none: done)."""
    deadline = clock() + seconds
    for name in sorted(holds.nodes):
        settle(kube, holds, name, report)  # what finished between the list and now
    while holds.nodes and clock() < deadline:
        wait = max(1, min(WATCH_SECONDS, int(deadline - clock() + 0.999)))
        try:
            stream = kube.watch("pods", resource_version=holds.resource_version, timeout_seconds=wait)
            with contextlib.closing(stream):
                for event, pod in stream:
                    rv = str((pod.get("metadata") or {}).get("resourceVersion") or "")
                    holds.resource_version = rv or holds.resource_version
                    if event == "BOOKMARK":
                        continue
                    for name in sorted(holds.update(event, pod) & holds.nodes):
                        settle(kube, holds, name, report)
                    if not holds.nodes or clock() >= deadline:
                        break
        except ApiError as err:
            if err.status == 410:  # the watch's version was compacted: list again
                fresh = BatchHolds.listed(kube)
                holds.pods, holds.resource_version = fresh.pods, fresh.resource_version
                for name in sorted(holds.nodes):
                    settle(kube, holds, name, report)
            else:
                log.warning("watching pods failed (%s); watching again", err)
                time.sleep(1.0)
    return set(holds.nodes)


def settle(kube: Kube, holds: BatchHolds, name: str, report: Callable[[str], None]) -> None:
    """Bring one node's batch resources to what its batch pods still request; forget it once it carries none."""
    try:
        node = kube.get_node(name)
    except ApiError as err:
        if err.status == 404:
            holds.nodes.discard(name)
            return
        log.warning("node %s: reading it failed: %s", name, err)
        return
    held = holds.held(name)
    writes = batch_writes(node, held)
    if writes:
        try:
            kube.patch_node_extended_resources(name, writes)
        except ApiError as err:
            log.warning("node %s: lowering its batch resources failed: %s", name, err)
            return
    removed = [r for r, v in writes.items() if v is None]
    lowered = {r: v for r, v in writes.items() if v is not None}
    said = [f"removed status {', '.join(removed)}"] if removed else []
    if lowered:
        said.append(held_text("set", lowered, held))
    if said:
        report(f"{name}: " + "; ".join(said))
    if not set(carried_batch(node)) - set(removed):
        holds.nodes.discard(name)
