"""Patch semantics: the three PATCH content types and what each does to the stored object.

* ``application/merge-patch+json``: RFC 7386, maps merge recursively, ``null`` deletes;
* ``application/json-patch+json``: RFC 6902 (add, remove, replace, move, copy, test); a failing operation
  is 422 with the cause, as on the real server;
* ``application/strategic-merge-patch+json``: as a merge patch (below).

The patched object then goes through the same tail as a PUT (`writes.commit_update`): status subresource
rules, resourceVersion precondition, no-op detection.

Deliberate simplifications (documented so nobody relies on them):

* strategic-merge-patch is applied as a JSON merge patch: maps merge, lists are replaced wholesale (no
  merge keys), and directives (``$patch``, ``$retainKeys``, any ``$`` key) are rejected with 400 rather
  than half-implemented.
"""

from __future__ import annotations

import copy
from typing import Any

from testsupport.kubeapi.failures import ApiFailure
from testsupport.kubeapi.resource_types import JSON, ResourceType
from testsupport.kubeapi.store import ObjectStore
from testsupport.kubeapi.writes import commit_update

PATCH_TYPES = {
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/json-patch+json",
}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class PatchError(Exception):
    """A JSON patch that cannot be applied (the server answers 422)."""


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer must start with '/': {path!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _walk(doc: Any, tokens: list[str], path: str) -> Any:
    for tok in tokens:
        if isinstance(doc, dict) and tok in doc:
            doc = doc[tok]
        elif isinstance(doc, list) and tok.isdigit() and int(tok) < len(doc):
            doc = doc[int(tok)]
        else:
            raise PatchError(f"path {path!r} does not exist")
    return doc


def _get(doc: Any, path: str) -> Any:
    return _walk(doc, _pointer(path), path)


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _walk(doc, tokens[:-1], path)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise PatchError(f"unable to remove nonexistent key: {last}: missing value")


def _add(doc: Any, path: str, value: Any, replace: bool = False) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return copy.deepcopy(value)
    parent = _walk(doc, tokens[:-1], path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise PatchError(f"replace operation does not apply: doc is missing key: {path}")
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(copy.deepcopy(value))
        elif last.isdigit() and int(last) <= len(parent) - (1 if replace else 0):
            if replace:
                parent[int(last)] = copy.deepcopy(value)
            else:
                parent.insert(int(last), copy.deepcopy(value))
        else:
            raise PatchError(f"index out of range: {path}")
    else:
        raise PatchError(f"doc is missing path: {path}")
    return doc


def json_patch(doc: Any, ops: list[Any]) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test) on a copy of ``doc``."""
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"malformed operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "add":
            doc = _add(doc, path, op.get("value"))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            doc = _add(doc, path, op.get("value"), replace=True)
        elif kind == "move":
            value = _remove(doc, op["from"])
            doc = _add(doc, path, value)
        elif kind == "copy":
            doc = _add(doc, path, _get(doc, op["from"]))
        elif kind == "test":
            try:
                actual = _get(doc, path)
            except PatchError:
                raise PatchError(f"testing value {path} failed: path does not exist") from None
            if actual != op.get("value"):
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchError(f"Unexpected kind: {kind}")
    return doc


def _has_smp_directives(patch: Any) -> bool:
    if isinstance(patch, dict):
        return any(str(k).startswith("$") or _has_smp_directives(v) for k, v in patch.items())
    if isinstance(patch, list):
        return any(_has_smp_directives(v) for v in patch)
    return False


def patch_object(
    store: ObjectStore,
    rt: ResourceType,
    ns: str | None,
    name: str,
    sub: str | None,
    ctype: str | None,
    body: Any,
    manager: str = "",
) -> JSON:
    """PATCH an object (or its status) with the body's content type; the stored result."""
    media = (ctype or "").split(";")[0].strip().lower()
    if media not in PATCH_TYPES:
        raise ApiFailure(
            415,
            message="the body of the request was in an unknown format - accepted media types include: "
            + ", ".join(sorted(PATCH_TYPES)),
        )
    if media == "application/json-patch+json":
        if not isinstance(body, list):
            raise ApiFailure(400, message="json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    elif not isinstance(body, dict):
        raise ApiFailure(400, message="json: cannot unmarshal array into Go value of type map[string]interface {}")
    elif media == "application/strategic-merge-patch+json" and _has_smp_directives(body):
        raise ApiFailure(400, message="fake API server: strategic merge directives are not supported")
    with store.cond:
        cur = store.current(rt, ns, name)
        if media == "application/json-patch+json":
            try:
                new = json_patch(cur, body)
            except PatchError as e:
                raise ApiFailure(
                    422,
                    "Invalid",
                    "the server rejected our request due to an error in our request",
                    {"causes": [{"reason": "UnexpectedServerResponse", "message": str(e)}]},
                ) from None
        else:
            new = merge_patch(cur, body)
        if not isinstance(new, dict):
            raise ApiFailure(422, message="patch did not produce an object")
        return commit_update(store, rt, name, cur, new, sub, manager)
