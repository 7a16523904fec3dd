"""The freshest Node object we know of: the informer's, or the API server's answer to our own last patch.

Why: the cycle plans each node's patch from what the node already carries. The informer only sees our
patch when its watch event arrives, which on a busy API server (or a busy controller) can be after the
next cycle; planning from the informer alone would then take our own annotations for missing or old and
write them again. The PATCH response is the node as the server stored it, so we keep it until the
informer has caught up, at no extra API call. Informer events are fed in as they are handled, so this
also holds what arrived after the cycle listed the nodes (it lists them before polling the agents).

Which of two versions of a node is newer is decided by `metadata.resourceVersion`:

- both parse as integers (every real API server: they are etcd revisions, and so are the tests' fake's):
  the larger one wins (a tie is the same object);
- otherwise (Kubernetes calls resource versions opaque) we only rely on the watch being ordered: our
  patched object stands until the informer delivers exactly its version, or another patch of ours
  replaces it. If the watch skipped that version (a relist after compaction), our object stands until
  our next write, the node's deletion, or `reset()` (called on every leadership change).

Objects are shared, never copied or mutated.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from controller.nodes import node_name
from kube import resource_version

Node = dict[str, Any]


def newer(a: str, b: str) -> bool | None:
    """Is resource version `a` newer than `b`? None when that cannot be told (not both integers)."""
    if a.isdigit() and b.isdigit():
        return int(a) > int(b)
    return None


@dataclass(frozen=True, slots=True)
class _Entry:
    node: Node
    ours: bool  # from one of our PATCH responses, not yet seen by the informer


class LatestNodes:
    """Per node, the newest object from either source; thread-safe.

    `on_change` is called with the new best object whenever it changes, under this class's lock, so
    a consumer (the ScoreBoard) never receives two versions out of order; `on_deleted` with the name of
    a node the informer saw deleted.
    """

    def __init__(
        self,
        on_change: Callable[[Node], None] | None = None,
        on_deleted: Callable[[str], None] | None = None,
    ) -> None:
        self._on_change = on_change
        self._on_deleted = on_deleted
        self._best: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def _set(self, name: str, node: Node, ours: bool) -> None:
        self._best[name] = _Entry(node, ours)
        if self._on_change is not None:
            self._on_change(node)

    def observed(self, node: Node) -> None:
        """An ADDED/MODIFIED object from the informer (its events arrive in resourceVersion order)."""
        name = node_name(node)
        if name is None:
            return
        rv = resource_version(node)
        with self._lock:
            cur = self._best.get(name)
            if cur is not None and cur.ours:
                mine = resource_version(cur.node)
                if rv != mine and not newer(rv, mine):
                    return  # the informer lags behind our own patch: keep what the server answered us
            self._set(name, node, ours=False)

    def wrote(self, node: Node) -> None:
        """The API server's response to one of our patches."""
        name = node_name(node)
        rv = resource_version(node)
        if name is None or not rv:
            return
        with self._lock:
            cur = self._best.get(name)
            if cur is None:
                return  # deleted meanwhile (or never listed): the informer decides which nodes exist
            cur_rv = resource_version(cur.node)
            if rv == cur_rv or newer(rv, cur_rv) is False:
                return  # the informer (or a later patch of ours) is already at least this fresh
            self._set(name, node, ours=True)

    def on_event(self, etype: str, node: Node) -> None:
        """The node informer's event handler."""
        if etype != "DELETED":
            self.observed(node)  # updates the consumer unless our own patch is newer
            return
        name = node_name(node)
        if name is not None:
            self.deleted(name)
            if self._on_deleted is not None:
                self._on_deleted(name)

    def deleted(self, name: str) -> None:
        with self._lock:
            self._best.pop(name, None)

    def reset(self, snapshot: Callable[[], Iterable[Node]]) -> None:
        """Forget our own writes and trust the informer's objects (`snapshot()`, taken under our lock) again."""
        with self._lock:
            self._best.clear()
            for node in snapshot():
                name = node_name(node)
                if name is not None:
                    self._best[name] = _Entry(node, ours=False)

    def get(self, node: Node) -> Node:
        """The freshest version of this node, given an informer snapshot of it.

        The snapshot may predate informer events handled since it was taken (a cycle lists the nodes
        before it polls), so the snapshot is used only when it is provably newer than what we hold.
        """
        name = node_name(node)
        if name is None:
            return node
        with self._lock:
            cur = self._best.get(name)
        if cur is None or newer(resource_version(node), resource_version(cur.node)):
            return node
        return cur.node

    def ahead_of_informer(self) -> int:
        """How many nodes are currently represented by our own patch (observability, tests)."""
        with self._lock:
            return sum(1 for e in self._best.values() if e.ours)
