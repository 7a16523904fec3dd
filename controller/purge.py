"""`colo-controller --purge-node-state`: remove for good what Colo wrote on the nodes, after an uninstall.

Run once the workloads are gone (deploy/uninstall.sh, docs/uninstall.md): a running agent or controller
would write it all again. With the operator's credentials (the controller's RBAC is gone by then). Per node,
only what is there is written, so a second run sends nothing:

- annotations: Volcano's `volcano.sh/oversubscription-{cpu,memory}` and `volcano.sh/offline-job-evicting`
  (the agent's), crane's load metrics (the policy's syncPolicy names, crane's defaults without a policy) and
  `node_hot_value`, Colo's `colo.io/load-score` and the deprecated `colo.io/oversubscription`: one PATCH;
- the agent's NoSchedule taint `volcano.sh/offline-job-evicting` (set with eviction.taint): read, then
  removed with a guarded JSON patch, other taints untouched;
- `kubernetes.io/batch-cpu` and `batch-memory` from status capacity and allocatable: one status PATCH — but
  not while batch pods that have not finished still request them there (kubelet re-admits running pods
  against allocatable at a restart: it would reject them); such a node is named, and a later run removes them.

What the operator set is left alone: the `volcano.sh/oversubscription` label, `volcano.sh/oversubscription-types`
and the eviction watermark annotations.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contract import annotations as keys
from controller.floor import BATCH_KEY, allocated_by_node, batch_facts
from controller.nodes import node_annotations, node_name
from kube import Kube

log = logging.getLogger(__name__)

#: The taint the agent sets while evicting (agent/evict/kube_actions.py), key and effect.
EVICTING_TAINT = (keys.OFFLINE_JOB_EVICTING, "NoSchedule")
BATCH_RESOURCES = (keys.BATCH_CPU, keys.BATCH_MEMORY)


def colo_annotations(metric_names: Iterable[str]) -> tuple[str, ...]:
    """Every node annotation Colo's agent or controller writes, given the crane metrics synced."""
    return (
        keys.OVERSUBSCRIPTION_CPU, keys.OVERSUBSCRIPTION_MEMORY, keys.OFFLINE_JOB_EVICTING,
        *metric_names, keys.HOT_VALUE, keys.LOAD_SCORE, keys.LEGACY_OVERSUBSCRIPTION,
    )  # fmt: skip


@dataclass(slots=True)
class NodePurge:
    """What was (or, dry, would be) removed from one node, and what failed."""

    node: str
    annotations: list[str] = field(default_factory=list)
    taint: bool = False
    resources: list[str] = field(default_factory=list)
    held: tuple[int, int] = (0, 0)  # Σ batch requests (milli-cores, bytes) of its pods that have not finished
    error: str | None = None

    @property
    def changed(self) -> bool:
        return bool(self.annotations or self.taint or self.resources)

    def describe(self) -> str:
        parts = []
        if self.annotations:
            parts.append(f"annotations {', '.join(self.annotations)}")
        if self.taint:
            parts.append(f"taint {EVICTING_TAINT[0]}:{EVICTING_TAINT[1]}")
        if self.resources:
            parts.append(f"status {', '.join(self.resources)}")
        if any(self.held):
            parts.append(f"kept {', '.join(BATCH_RESOURCES)}: batch pods still request {self.held[0]}m cpu, "
                         f"{self.held[1]} bytes there (run again once they finish)")  # fmt: skip
        what = "; ".join(parts) or "nothing to remove"
        return f"{self.node}: {what}" + (f" (failed: {self.error})" if self.error else "")


def plan(node: Mapping[str, Any], annotation_keys: Collection[str], held: tuple[int, int] = (0, 0)) -> NodePurge:
    """What `node` carries of Colo's (pure); `held`: what its batch pods request (its batch resources stay)."""
    purge = NodePurge(node_name(node) or "")
    anns = node_annotations(node)
    purge.annotations = [k for k in annotation_keys if k in anns]
    taints = (node.get("spec") or {}).get("taints") or []
    purge.taint = any(t.get("key") == EVICTING_TAINT[0] and t.get("effect") == EVICTING_TAINT[1] for t in taints)
    status = node.get("status") or {}
    present = set(status.get("capacity") or {}) | set(status.get("allocatable") or {})
    if any(held):
        purge.held = held
    else:
        purge.resources = [r for r in BATCH_RESOURCES if r in present]
    return purge


def purge_node_state(
    kube: Kube, metric_names: Iterable[str], *, label_selector: str | None = None, dry_run: bool = False
) -> list[NodePurge]:
    """Remove Colo's annotations, taint and batch resources from every node (of `label_selector`)."""
    annotation_keys = colo_annotations(metric_names)
    nodes, _ = kube.list("nodes", label_selector=label_selector or None)
    pods, _ = kube.list("pods")
    held = allocated_by_node({**pod, BATCH_KEY: batch_facts(pod)} for pod in pods)
    out: list[NodePurge] = []
    for node in nodes:
        purge = plan(node, annotation_keys, held.get(node_name(node) or "", (0, 0)))
        out.append(purge)
        if dry_run or not purge.changed:
            continue
        try:
            if purge.annotations:
                kube.patch_node_annotations(purge.node, dict.fromkeys(purge.annotations))
            if purge.taint:
                kube.set_node_taint(purge.node, EVICTING_TAINT[0], "", EVICTING_TAINT[1], present=False)
            if purge.resources:
                kube.patch_node_extended_resources(purge.node, dict.fromkeys(purge.resources))
        except Exception as err:
            purge.error = str(err).splitlines()[0][:300] if str(err) else type(err).__name__
            log.warning("node %s: purge failed: %s", purge.node, purge.error)
    return out
