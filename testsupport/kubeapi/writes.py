"""The write verbs on the store: create, update (PUT), delete and the pod eviction subresource.

Each answers as the real server does where Colo can tell: ``generateName``, 409 AlreadyExists, the name in
the body against the URL, the resourceVersion precondition (409 Conflict), the status subresource that
writes only ``status`` while the main resource ignores it, no-op writes that keep the resourceVersion,
``dryRun=All``, and evictions refused with 429 while a PodDisruptionBudget (`ObjectStore.blocked`) allows none.
PATCH has its own module (`patch`) and ends in `commit_update` here.

Each write that changes an object records its manager in ``metadata.managedFields`` (`record_manager`).

Deliberate simplifications (documented so nobody relies on them):

* no admission, no defaulting, no validation beyond names;
* managedFields: one ``Update`` entry per manager and subresource (the ``fieldManager`` parameter, else the
  User-Agent's product, as the real server derives it), but no ``fieldsV1`` (which fields it owns);
* deletion is immediate (no graceful ``deletionTimestamp`` phase, no finalizers); an eviction deletes the
  pod at once.
"""

from __future__ import annotations

import copy
import random
import string
import uuid
from typing import Any

from testsupport.kubeapi.failures import ApiFailure, conflict, not_found
from testsupport.kubeapi.resource_types import JSON, ResourceType
from testsupport.kubeapi.store import ObjectStore, now_timestamp, object_key


def check_body(rt: ResourceType, body: Any, kind: str | None = None) -> JSON:
    """A copy of the request's object, which must be a JSON object of the kind (or without a kind)."""
    if not isinstance(body, dict):
        raise ApiFailure(400, message="the body of the request must be a JSON object")
    want = kind or rt.kind
    if body.get("kind") not in (None, want):
        raise ApiFailure(
            400, message=f"the object provided is unrecognized (must be of type {want}): {body.get('kind')}"
        )
    return copy.deepcopy(body)


def record_manager(rt: ResourceType, obj: JSON, manager: str, sub: str | None) -> None:
    """The writer `manager` in obj's managedFields: one Update entry per manager and subresource."""
    if not manager:
        return
    meta = obj["metadata"]
    mine = (manager, "Update", sub or "")
    kept = [e for e in meta.get("managedFields") or []
            if (e.get("manager"), e.get("operation"), e.get("subresource", "")) != mine]  # fmt: skip
    entry: JSON = {"manager": manager, "operation": "Update", "apiVersion": rt.api_version, "time": now_timestamp(),
                   "fieldsType": "FieldsV1"}  # fmt: skip
    if sub:
        entry["subresource"] = sub
    meta["managedFields"] = [*kept, entry]


def create_object(
    store: ObjectStore, rt: ResourceType, ns: str | None, query: dict[str, str], body: Any, manager: str = ""
) -> JSON:
    """POST to a collection; the created object (not stored under ``dryRun=All``)."""
    obj = check_body(rt, body)
    meta = obj.setdefault("metadata", {})
    if rt.namespaced:
        if meta.get("namespace") not in (None, "", ns):
            raise ApiFailure(
                400, message="the namespace of the provided object does not match the namespace sent on the request"
            )
        meta["namespace"] = ns
    if not meta.get("name"):
        if meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
        else:
            raise ApiFailure(
                422,
                message=f'{rt.kind} "" is invalid: metadata.name: Required value: name or generateName is required',
                details={"kind": rt.kind},
            )
    obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = now_timestamp()
    with store.cond:
        key = object_key(rt, meta.get("namespace"), meta["name"])
        if key in store.by_plural[rt.plural]:
            raise ApiFailure(
                409, "AlreadyExists", f'{rt.qualified} "{meta["name"]}" already exists', rt.details(meta["name"])
            )
        if query.get("dryRun") == "All":
            meta["resourceVersion"] = ""
            return obj
        record_manager(rt, obj, manager, None)
        return copy.deepcopy(store.write(rt, "ADDED", obj, None))


def commit_update(
    store: ObjectStore, rt: ResourceType, name: str, cur: JSON, new: JSON, sub: str | None, manager: str = ""
) -> JSON:
    """Shared tail of PUT and PATCH: subresource rules, precondition, no-op detection, write.

    Callers hold the store lock from reading ``cur`` to here, so "current" really is current: a
    request delayed by a fault sees every write that happened meanwhile, as with a real server.
    """
    asked_rv = str((new.get("metadata") or {}).get("resourceVersion") or "")
    if sub == "status":
        merged = copy.deepcopy(cur)
        merged["status"] = new.get("status")
        if merged["status"] is None:
            merged.pop("status")
        new = merged
    else:
        if not isinstance(new.get("metadata"), dict):
            raise ApiFailure(422, message=f'{rt.kind} "{name}" is invalid: metadata: Required value')
        for keep in ("uid", "creationTimestamp", "namespace", "name"):
            if keep in cur["metadata"]:
                new["metadata"][keep] = cur["metadata"][keep]
        if rt.has_status:
            if "status" in cur:
                new["status"] = copy.deepcopy(cur["status"])
            else:
                new.pop("status", None)
    new["kind"], new["apiVersion"] = rt.kind, rt.api_version
    cur_rv = cur["metadata"]["resourceVersion"]
    if asked_rv and asked_rv != cur_rv:
        raise conflict(rt, name)
    new["metadata"]["resourceVersion"] = cur_rv
    if new == cur:
        return cur  # no-op writes do not bump resourceVersion or notify watchers
    record_manager(rt, new, manager, sub)
    return copy.deepcopy(store.write(rt, "MODIFIED", new, cur))


def update_object(
    store: ObjectStore, rt: ResourceType, ns: str | None, name: str, sub: str | None, body: Any, manager: str = ""
) -> JSON:
    """PUT an object (or its status); the stored result."""
    obj = check_body(rt, body)
    body_name = (obj.get("metadata") or {}).get("name")
    if body_name != name:
        raise ApiFailure(
            400, message=f"the name of the object ({body_name}) does not match the name on the URL ({name})"
        )
    with store.cond:
        cur = store.current(rt, ns, name)
        return commit_update(store, rt, name, cur, obj, sub, manager)


def delete_object(store: ObjectStore, rt: ResourceType, ns: str | None, name: str) -> JSON:
    """DELETE an object, at once; the object as it was."""
    with store.cond:
        old = store.by_plural[rt.plural].get(object_key(rt, ns, name))
        if old is None:
            raise not_found(rt, name)
        return copy.deepcopy(store.write(rt, "DELETED", copy.deepcopy(old), old))


def evict_pod(store: ObjectStore, rt: ResourceType, ns: str, name: str, query: dict[str, str], body: Any) -> JSON:
    """POST an Eviction for a pod: 429 while its PDB is blocked (unless the pod is not running), else delete it."""
    eviction = check_body(rt, body, kind="Eviction")
    if (eviction.get("metadata") or {}).get("name") != name:
        raise ApiFailure(400, message="name in URL does not match name in Eviction object")
    dry_run = query.get("dryRun") == "All" or "All" in ((eviction.get("deleteOptions") or {}).get("dryRun") or [])
    with store.cond:
        key = (ns, name)
        pod = store.by_plural["pods"].get(key)
        if pod is None:
            raise not_found(rt, name)
        phase = (pod.get("status") or {}).get("phase")
        pdb = store.blocked.get(key)
        if pdb is not None and phase not in ("Succeeded", "Failed", "Pending"):
            raise ApiFailure(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
                {
                    "causes": [
                        {
                            "reason": "DisruptionBudget",
                            "message": f"The disruption budget {pdb} needs 1 healthy pods and has 1 currently",
                        }
                    ]
                },
            )
        if not dry_run:
            store.write(rt, "DELETED", copy.deepcopy(pod), pod)
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
