"""Storage and watch: the objects, their history by resourceVersion, compaction, paged lists and watches.

Like etcd behind an apiserver: every write gets the next resourceVersion and is appended to a history that
watches follow and lists page through; `ObjectStore.compact` forgets history, and asking for a forgotten
version is 410 Gone. One condition (shared with the server's other state) guards it all and wakes watches.

Deliberate simplifications (documented so nobody relies on them):

* ``put()`` stores objects verbatim apart from system metadata (uid, creationTimestamp, resourceVersion):
  it is the test's way of being the kubelet or the scheduler, so no admission, defaulting or validation;
* lists page like etcd-backed ones (``limit``/``continue``, every page from the first page's snapshot,
  410 once that snapshot is compacted away), also with ``resourceVersion=0``, which a real server may
  answer unpaged from its watch cache;
* a watch bookmark is sent every ``bookmark_interval`` seconds (real servers: about once a minute).
"""

from __future__ import annotations

import base64
import binascii
import bisect
import copy
import itertools
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import NamedTuple

from testsupport.kubeapi.failures import ApiFailure, not_found, status_object
from testsupport.kubeapi.resource_types import JSON, RESOURCES, ResourceType, resource_type
from testsupport.kubeapi.selection import Predicate


def now_timestamp() -> str:
    """A creationTimestamp as the server writes it (seconds, UTC)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def object_key(rt: ResourceType, namespace: str | None, name: str) -> tuple[str, str]:
    """Where an object is stored: (namespace, name); cluster-scoped kinds have no namespace."""
    return ((namespace or "default") if rt.namespaced else "", name)


def _encode_continue(rv: int, after: tuple[str, str]) -> str:
    """An opaque continue token: the snapshot's resourceVersion and the last key served (like etcd's)."""
    doc = {"v": "meta.k8s.io/v1", "rv": rv, "start": list(after)}
    return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode()


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        doc = json.loads(base64.urlsafe_b64decode(token.encode()))
        rv, start = doc["rv"], doc["start"]
        if doc.get("v") != "meta.k8s.io/v1" or not isinstance(rv, int) or len(start) != 2:
            raise ValueError(token)
        return rv, (str(start[0]), str(start[1]))
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise ApiFailure(400, message="continue key is not valid: incorrect encoded start resourceVersion") from None


def expired(asked: int, compacted: int) -> JSON:
    """The Status a watch gets (as an ERROR event) when its resourceVersion was compacted away."""
    return status_object(410, "Expired", f"too old resource version: {asked} ({compacted})")


class Change(NamedTuple):
    """One write in the history: the object after it (``old``: before it; None when it was created)."""

    rv: int
    plural: str
    type: str
    obj: JSON
    old: JSON | None


class WatchStart(NamedTuple):
    """Where a new watch begins, read in one go under the store's lock."""

    epoch: int
    too_old: bool
    initial: list[JSON]  # the synthetic ADDED events of a watch without a resourceVersion
    cursor: int
    compacted: int


class ObjectStore:
    """The objects of every kind and their history; all access under ``cond``."""

    def __init__(self, cond: threading.Condition) -> None:
        self.cond = cond
        self.by_plural: dict[str, dict[tuple[str, str], JSON]] = {p: {} for p in RESOURCES}
        # Never "0": that value means "any version" to list and watch, like on a real cluster.
        self.rv = 100
        self.log: list[Change] = []
        self.log_rvs: list[int] = []
        self.compacted = 0
        self.blocked: dict[tuple[str, str], str] = {}  # (namespace, pod) -> the PDB that blocks its eviction
        self.epoch = 0  # bumped by `cut_watches`: open watches of older epochs end abruptly

    # ---- the test's helpers ----------------------------------------------------------------------

    def put(self, kind: str, obj: JSON) -> JSON:
        """Create or overwrite an object verbatim (apart from system metadata); emits ADDED/MODIFIED."""
        rt = resource_type(kind)
        new = copy.deepcopy(obj)
        meta = new.setdefault("metadata", {})
        if not meta.get("name"):
            raise ValueError("put() needs metadata.name")
        if rt.namespaced:
            meta["namespace"] = meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        new["kind"] = rt.kind
        new["apiVersion"] = rt.api_version
        key = object_key(rt, meta.get("namespace"), meta["name"])
        with self.cond:
            old = self.by_plural[rt.plural].get(key)
            if old is not None:
                meta.setdefault("uid", old["metadata"].get("uid"))
                meta.setdefault("creationTimestamp", old["metadata"].get("creationTimestamp"))
            else:
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", now_timestamp())
            stored = self.write(rt, "MODIFIED" if old is not None else "ADDED", new, old)
            return copy.deepcopy(stored)

    def get(self, kind: str, namespace: str | None, name: str) -> JSON | None:
        rt = resource_type(kind)
        with self.cond:
            obj = self.by_plural[rt.plural].get(object_key(rt, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def delete(self, kind: str, namespace: str | None, name: str) -> JSON | None:
        """Remove an object (emits DELETED); returns it, or None if it did not exist."""
        rt = resource_type(kind)
        with self.cond:
            old = self.by_plural[rt.plural].get(object_key(rt, namespace, name))
            if old is None:
                return None
            return copy.deepcopy(self.write(rt, "DELETED", copy.deepcopy(old), old))

    def objects(self, kind: str) -> list[JSON]:
        rt = resource_type(kind)
        with self.cond:
            return [copy.deepcopy(o) for _, o in sorted(self.by_plural[rt.plural].items())]

    def compact(self, resource_version: int | None = None) -> int:
        """Forget history up to ``resource_version`` (default: now), as etcd compaction does."""
        with self.cond:
            target = self.rv if resource_version is None else min(resource_version, self.rv)
            self.compacted = max(self.compacted, target)
            cut = bisect.bisect_right(self.log_rvs, self.compacted)
            del self.log[:cut]
            del self.log_rvs[:cut]
            self.cond.notify_all()
            return self.compacted

    def block_eviction(self, namespace: str, name: str, pdb: str, blocked: bool) -> None:
        with self.cond:
            if blocked:
                self.blocked[(namespace, name)] = pdb
            else:
                self.blocked.pop((namespace, name), None)

    def cut_watches(self) -> None:
        """End every open watch abruptly (the server stops, or a test drops them)."""
        with self.cond:
            self.epoch += 1
            self.cond.notify_all()

    # ---- reads and writes of the verbs -----------------------------------------------------------

    def write(self, rt: ResourceType, etype: str, obj: JSON, old: JSON | None) -> JSON:
        """Store a change under a new resourceVersion and wake watchers. Caller holds the lock."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        key = object_key(rt, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if etype == "DELETED":
            self.by_plural[rt.plural].pop(key, None)
        else:
            self.by_plural[rt.plural][key] = obj
        self.log.append(Change(self.rv, rt.plural, etype, copy.deepcopy(obj), old))
        self.log_rvs.append(self.rv)
        self.cond.notify_all()
        return obj

    def current(self, rt: ResourceType, ns: str | None, name: str) -> JSON:
        """A copy of the stored object; 404 when there is none."""
        with self.cond:
            obj = self.by_plural[rt.plural].get(object_key(rt, ns, name))
            if obj is None:
                raise not_found(rt, name)
            return copy.deepcopy(obj)

    def state_at(self, rt: ResourceType, rv: int) -> dict[tuple[str, str], JSON]:
        """The kind's objects as of ``rv`` (>= the compaction point): now, with later changes undone."""
        state = dict(self.by_plural[rt.plural])
        for change in reversed(self.log[bisect.bisect_right(self.log_rvs, rv) :]):
            if change.plural != rt.plural:
                continue
            meta = change.obj["metadata"]
            key = object_key(rt, meta.get("namespace"), meta["name"])
            if change.old is None:
                state.pop(key, None)
            else:
                state[key] = change.old
        return state

    # ---- list ------------------------------------------------------------------------------------

    def list_page(self, rt: ResourceType, match: Predicate, query: dict[str, str]) -> JSON:
        """The ``<Kind>List`` a list request gets: one page of a consistent snapshot, selected by ``match``."""
        asked = query.get("resourceVersion", "")
        token = query.get("continue", "")
        raw_limit = query.get("limit", "")
        if raw_limit and not raw_limit.lstrip("-").isdigit():
            raise ApiFailure(400, message=f"invalid limit: {raw_limit}")
        limit = max(0, int(raw_limit or 0))
        after: tuple[str, str] | None = None
        with self.cond:
            if token:
                if asked not in ("", "0"):
                    raise ApiFailure(400, message="specifying resource version is not allowed when using continue")
                snapshot, after = _decode_continue(token)
                if snapshot < self.compacted:
                    raise ApiFailure(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent list result. "
                        "You can start a new list without the continue parameter.",
                    )
            else:
                if asked not in ("", "0"):
                    if not asked.isdigit():
                        raise ApiFailure(400, message=f"invalid resource version: {asked}")
                    if int(asked) < self.compacted:
                        raise ApiFailure(410, "Expired", "The resourceVersion for the provided list is too old.")
                snapshot = self.rv
            state = self.state_at(rt, snapshot)
            keys = sorted(k for k in state if after is None or k > after)
            items: list[JSON] = []
            last: tuple[str, str] | None = None
            rest = iter(keys)
            for key in rest:
                obj = state[key]
                if not match(obj):
                    continue
                if limit and len(items) == limit:
                    rest = itertools.chain([key], rest)
                    break
                item = copy.deepcopy(obj)
                item.pop("kind", None)
                item.pop("apiVersion", None)
                items.append(item)
                last = key
            else:
                last = None  # nothing left: no continue token
            meta: JSON = {"resourceVersion": str(snapshot)}
            if last is not None:
                meta["continue"] = _encode_continue(snapshot, last)
                if not query.get("labelSelector") and not query.get("fieldSelector"):
                    # As the real server: only an unfiltered list knows how many items remain.
                    meta["remainingItemCount"] = sum(1 for k in rest if match(state[k]))
        return {"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": meta, "items": items}

    # ---- watch -----------------------------------------------------------------------------------

    def watch_start(self, rt: ResourceType, match: Predicate, asked: str) -> WatchStart:
        """Where a watch from ``asked`` (a validated resourceVersion, or "" / "0": now) begins."""
        initial: list[JSON] = []
        with self.cond:
            epoch = self.epoch
            too_old = asked not in ("", "0") and int(asked) < self.compacted
            if asked in ("", "0"):
                initial = [copy.deepcopy(o) for _, o in sorted(self.by_plural[rt.plural].items()) if match(o)]
                cursor = self.rv
            else:
                cursor = int(asked)
            return WatchStart(epoch, too_old, initial, cursor, self.compacted)

    def follow(
        self,
        rt: ResourceType,
        match: Predicate,
        cursor: int,
        epoch: int,
        deadline: float,
        next_bookmark: float | None,
        bookmark_interval: Callable[[], float],
    ) -> Iterator[JSON]:
        """Yield watch events after ``cursor`` until the deadline, a cut (new epoch), or a compaction past it."""
        while True:
            with self.cond:
                while True:
                    if self.epoch != epoch:
                        return
                    if cursor < self.compacted:
                        yield {"type": "ERROR", "object": expired(cursor, self.compacted)}
                        return
                    pos = bisect.bisect_right(self.log_rvs, cursor)
                    changes = self.log[pos:]
                    now = time.monotonic()
                    due = next_bookmark is not None and now >= next_bookmark
                    if changes or due or now >= deadline:
                        break
                    wake = deadline if next_bookmark is None else min(deadline, next_bookmark)
                    self.cond.wait(max(0.0, wake - now))
                current = self.rv
            for change in changes:
                event = _seen_by(rt, match, change)
                cursor = change.rv
                if event is not None:
                    yield event
            if due and next_bookmark is not None:
                cursor = max(cursor, current)
                yield {
                    "type": "BOOKMARK",
                    "object": {
                        "kind": rt.kind,
                        "apiVersion": rt.api_version,
                        "metadata": {"resourceVersion": str(cursor)},
                    },
                }
                next_bookmark = time.monotonic() + bookmark_interval()
            if time.monotonic() >= deadline:
                return


def _seen_by(rt: ResourceType, match: Predicate, change: Change) -> JSON | None:
    """What a filtered watcher sees: objects entering/leaving the selection appear ADDED/DELETED."""
    if change.plural != rt.plural:
        return None
    new_match = match(change.obj)
    if change.type == "MODIFIED":
        old_match = change.old is not None and match(change.old)
        if new_match and old_match:
            etype = "MODIFIED"
        elif new_match:
            etype = "ADDED"
        elif old_match:
            etype = "DELETED"
        else:
            return None
    elif new_match:
        etype = change.type
    else:
        return None
    return {"type": etype, "object": copy.deepcopy(change.obj)}
