"""The few parts of a Node object the controller reads, and the informer transform that keeps only them.

Why slim nodes: the node informer would otherwise hold every Node whole, `status.images` (often tens of
KB per node), conditions, capacity and everybody's annotations included, for a handful of fields. The
planner, the ScoreBoard and discovery read only what `slim_node` keeps; `LatestNodes` stores our own
PATCH responses slimmed the same way, so both sources of a node look alike.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from decimal import Decimal
from typing import Any

from contract.annotations import BATCH_CPU, BATCH_MEMORY
from kube.resources import quantity

#: The allocatable resources slim nodes keep: the bounds of the agent's capacity, and the batch resources
#: the controller floors for silent agents (controller/floor.py).
KEPT_ALLOCATABLE = ("cpu", "memory", BATCH_CPU, BATCH_MEMORY)


def node_name(node: Mapping[str, Any]) -> str | None:
    """metadata.name of a Node dict, or None."""
    meta = node.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) and name else None


def node_annotations(node: Mapping[str, Any]) -> Mapping[str, str]:
    """metadata.annotations of a Node dict ({} when missing or malformed)."""
    meta = node.get("metadata")
    if not isinstance(meta, Mapping):
        return {}
    anns = meta.get("annotations")
    return anns if isinstance(anns, Mapping) else {}


def allocatable_raw(node: Mapping[str, Any]) -> tuple[object, object]:
    """status.allocatable's CPU and memory as the Node has them (cheap to compare on every event)."""
    status = node.get("status")
    alloc = status.get("allocatable") if isinstance(status, Mapping) else None
    return (alloc.get("cpu"), alloc.get("memory")) if isinstance(alloc, Mapping) else (None, None)


def node_allocatable(node: Mapping[str, Any]) -> tuple[Decimal | None, Decimal | None]:
    """(CPU cores, memory bytes) of status.allocatable; None where absent or malformed."""
    status = node.get("status")
    alloc = status.get("allocatable") if isinstance(status, Mapping) else None
    if not isinstance(alloc, Mapping):
        return None, None
    return quantity(alloc.get("cpu")), quantity(alloc.get("memory"))


def slim_node(node: Mapping[str, Any], annotation_keys: Collection[str]) -> dict[str, Any]:
    """name, resourceVersion, the listed annotations, the InternalIP addresses and allocatable CPU and
    memory (bounds of the capacity the agent publishes) and batch resources: all the controller reads."""
    meta = node.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    anns = node_annotations(node)
    out_meta: dict[str, Any] = {k: meta[k] for k in ("name", "resourceVersion") if k in meta}
    out_meta["annotations"] = {k: anns[k] for k in annotation_keys if k in anns}
    status = node.get("status")
    addresses = status.get("addresses") if isinstance(status, Mapping) else None
    internal = [
        {"type": "InternalIP", "address": a.get("address")}
        for a in addresses or ()
        if isinstance(a, Mapping) and a.get("type") == "InternalIP"
    ]
    alloc = status.get("allocatable") if isinstance(status, Mapping) else None
    out_status: dict[str, Any] = {"addresses": internal}
    if isinstance(alloc, Mapping):
        out_status["allocatable"] = {k: alloc[k] for k in KEPT_ALLOCATABLE if isinstance(alloc.get(k), str)}
    return {"metadata": out_meta, "status": out_status}
