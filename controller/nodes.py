"""The few parts of a Node object the controller reads, and the informer transform that keeps only them.

Why slim nodes: the node informer would otherwise hold every Node whole, `status.images` (often tens of
KB per node), conditions, capacity and everybody's annotations included, for a handful of fields. The
planner, the ScoreBoard and discovery read only what `slim_node` keeps; `LatestNodes` stores our own
PATCH responses slimmed the same way, so both sources of a node look alike.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any


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


def slim_node(node: Mapping[str, Any], annotation_keys: Collection[str]) -> dict[str, Any]:
    """name, resourceVersion, the listed annotations and the InternalIP addresses: all the controller reads."""
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
    return {"metadata": out_meta, "status": {"addresses": internal}}
