"""What the informers keep of Nodes and Pods (their transforms), so a replica's memory grows with the
number of nodes and of recent bindings, not with whole API objects.

A Node: its slim form (controller.nodes.slim_node) plus, when rebalancing is on, its rebalance traits. A
Pod: the binding stub the hot value counts, plus its rebalance traits and the batch requests it holds (the
floor of silent agents' nodes) when those are on; None (not cached) when nothing reads it."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from controller.floor import BATCH_KEY, batch_facts
from controller.hotvalue import BindingRecords
from controller.nodes import slim_node
from controller.rebalance.rebalancer import Rebalancer
from controller.rebalance.traits import TRAITS


class CachedObjects:
    """The node and pod informers' transforms, and the transform of our own PATCH responses (`node`)."""

    def __init__(
        self,
        annotation_keys: Collection[str],
        bindings: BindingRecords,
        rebalancer: Rebalancer | None,
        *,
        floor: bool,
    ) -> None:
        self.annotation_keys = annotation_keys
        self.bindings = bindings
        self.rebalancer = rebalancer
        self.floor = floor

    def node(self, node: dict[str, Any]) -> dict[str, Any]:
        """Only what the controller reads of a Node."""
        slim = slim_node(node, self.annotation_keys)
        if self.rebalancer is not None:
            slim[TRAITS] = self.rebalancer.node_traits(node)
        return slim

    def pod(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        """The binding stub, plus what rebalancing reads when it is on and the batch requests a pod holds
        (the floor of silent agents' nodes) when that is on."""
        kept = self.bindings.keep(pod)
        traits = self.rebalancer.pod_traits(pod) if self.rebalancer is not None else None
        held = batch_facts(pod) if self.floor else None
        if traits is None and held is None:
            return kept
        if kept is None:  # bound too long ago to count for the hot value: the informer's keys and the traits
            meta = pod.get("metadata") or {}
            kept = {"metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion") if k in meta}}
        if traits is not None:
            kept[TRAITS] = traits
        if held is not None:
            kept[BATCH_KEY] = held
            kept.setdefault("spec", {"nodeName": (pod.get("spec") or {}).get("nodeName")})
        return kept
