"""ExtenderArgs from an untrusted body: JSON decoded and every field the extender reads checked for its
type, so a malformed request of any shape is a one-line 400, never an exception inside the scoring.

Go decodes keys case-insensitively, so `Pod`, `pod` and `POD` are all accepted. `Nodes` is a NodeList
(an object with `items`) or null; `NodeNames` a list of strings or null; at least one is present.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from serving.limits import clip


class BadRequest(Exception):
    """The request body is not ExtenderArgs (the message is one line, untrusted parts clipped)."""


def _field(doc: Mapping[str, Any], name: str) -> Any:
    lname = name.lower()
    for key, value in doc.items():
        if key.lower() == lname:
            return value
    return None


def _object(value: Any, where: str) -> Mapping[str, Any]:
    """An optional JSON object ({} when null or absent)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(f"{where} must be an object, not {type(value).__name__}")
    return value


def _string_map(value: Any, where: str) -> None:
    for key, item in _object(value, where).items():
        if not isinstance(item, str):
            raise BadRequest(f"{where}[{clip(repr(key), 60)}] must be a string, not {type(item).__name__}")


def _optional(value: Any, kind: type, where: str) -> None:
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        raise BadRequest(f"{where} must be a {kind.__name__}, not {type(value).__name__}")


def check_pod(pod: Any) -> dict[str, Any]:
    """The fields the classifier and the DaemonSet check read, each of the type the API gives it."""
    if not isinstance(pod, dict):
        raise BadRequest("ExtenderArgs.Pod is missing or not an object")
    meta = _object(pod.get("metadata"), "Pod.metadata")
    for key in ("name", "namespace", "uid"):
        _optional(meta.get(key), str, f"Pod.metadata.{key}")
    _string_map(meta.get("labels"), "Pod.metadata.labels")
    _string_map(meta.get("annotations"), "Pod.metadata.annotations")
    refs = meta.get("ownerReferences")
    if refs is not None and (not isinstance(refs, list) or not all(isinstance(r, dict) for r in refs)):
        raise BadRequest("Pod.metadata.ownerReferences must be a list of objects")
    spec = _object(pod.get("spec"), "Pod.spec")
    _optional(spec.get("priority"), int, "Pod.spec.priority")
    _optional(spec.get("priorityClassName"), str, "Pod.spec.priorityClassName")
    return pod


def check_node(node: Any, index: int) -> None:
    where = f"Nodes.items[{index}]"
    if not isinstance(node, dict):
        raise BadRequest(f"{where} must be a Node object")
    meta = _object(node.get("metadata"), f"{where}.metadata")
    if not isinstance(meta.get("name"), str) or not meta["name"]:
        raise BadRequest(f"{where}.metadata.name is missing")
    _string_map(meta.get("annotations"), f"{where}.metadata.annotations")


def parse_args(body: bytes) -> tuple[dict[str, Any], list[dict[str, Any]] | None, list[str] | None]:
    """(pod, nodes or None, node names or None) from an ExtenderArgs body."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as err:
        raise BadRequest(f"body is not JSON: {clip(str(err), 120)}") from None
    if not isinstance(doc, dict):
        raise BadRequest("ExtenderArgs must be a JSON object")
    pod = check_pod(_field(doc, "Pod"))
    nodes_raw = _field(doc, "Nodes")
    names_raw = _field(doc, "NodeNames")
    nodes: list[dict[str, Any]] | None = None
    names: list[str] | None = None
    if nodes_raw is not None:
        items = _object(nodes_raw, "ExtenderArgs.Nodes").get("items")
        if items is None:
            items = []
        if not isinstance(items, list):
            raise BadRequest("ExtenderArgs.Nodes.items must be a list of Node objects")
        for i, node in enumerate(items):
            check_node(node, i)
        nodes = items
    if names_raw is not None:
        if not isinstance(names_raw, list) or not all(isinstance(n, str) for n in names_raw):
            raise BadRequest("ExtenderArgs.NodeNames must be a list of strings")
        names = names_raw
    if nodes is None and names is None:
        raise BadRequest("ExtenderArgs has neither Nodes nor NodeNames")
    return pod, nodes, names
