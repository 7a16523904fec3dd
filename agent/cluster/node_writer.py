"""Writes this node's annotations (and optional extended resources) from one thread, off the sampling path.

Each owner (capacity, the evicting state) says which of its keys should change now; the publisher batches
them into at most two JSON merge patches: one on metadata.annotations (the Node), one on the batch resources
(its status subresource), each only when something in it changes. A failed write is not replayed: the next round
asks the owners again, so what reaches the API server is always the latest value. While the API server is
away nothing else stops: sampling, exporting and enforcement go on. At shutdown one last round can withdraw
what must not outlive the agent (capacity).

`ApiHealth` is the agent's one answer to "is the API server reachable?".
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from common.logs import OnChange, Repeats, repeated
from kube import ApiError, Kube

log = logging.getLogger(__name__)


@dataclass
class Changes:
    annotations: dict[str, str | None] = field(default_factory=dict)
    extended_resources: dict[str, str | None] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.annotations or self.extended_resources)


class ApiHealth:
    """The API server is unreachable when the last API call of any component got no answer (status 0:
    connection error, timeout) or a server error (>= 500); any successful call clears it. A refusal (403,
    422, 429...) is an answer: the server is there.

    Components that make their own calls `note()` each result; informers, which only expose the status of
    their last list/watch, are `observe()`d, and a change of that status counts as a new call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.last_status: int | None = None  # None: the last call succeeded
        self._seen: dict[str, int | None] = {}

    @staticmethod
    def unreachable(status: int | None) -> bool:
        return status is not None and (status == 0 or status >= 500)

    def note(self, status: int | None) -> None:
        """One API call's result: None for success, else the HTTP status (0: no answer)."""
        with self._lock:
            self.last_status = status

    def observe(self, source: str, status: int | None) -> None:
        """The status a component reports for its last call; only a change is news."""
        with self._lock:
            if self._seen.get(source) == status:
                return
            self._seen[source] = status
            self.last_status = status

    def reachable(self) -> bool:
        with self._lock:
            return not self.unreachable(self.last_status)


class AnnotationOwner(Protocol):
    name: str

    def changes(self, node: dict[str, Any], now: float) -> Changes:
        """What to write now (only keys that should change), given the node as last seen."""

    def committed(self, changes: Changes, now: float) -> None:
        """The write succeeded."""


class NodePublisher:
    """A thread that polls its owners every `period` seconds (or at once when poked) and patches the node."""

    def __init__(
        self,
        kube: Kube,
        node_name: str,
        get_node: Callable[[], dict[str, Any] | None],
        owners: list[AnnotationOwner],
        *,
        period: float = 1.0,
        backoff_max: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        dry_run: bool = False,
        health: ApiHealth | None = None,
        wake: threading.Event | None = None,
    ) -> None:
        """`wake`, set by anyone (the evictor, when its state changes), runs a round now."""
        self.kube, self.node_name, self.get_node, self.owners = kube, node_name, get_node, owners
        self.dry_run = dry_run
        self.period, self.backoff_max, self.clock = period, backoff_max, clock
        self.health = health if health is not None else ApiHealth()
        self.name = "publisher"
        self.writes = 0
        self.failures = 0
        self.last_error: str | None = None
        self.last_status: int | None = None  # HTTP status of the last failed write (0: no answer); None: success
        self._wake = wake if wake is not None else threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="colo-publisher", daemon=True)
        self._failed_in_row = 0
        self._retry_after: float | None = None
        self._intents = OnChange()
        self._failures = Repeats()

    def start(self) -> None:
        self._thread.start()

    def poke(self) -> None:
        """Run a round now (the evicting state changed)."""
        self._wake.set()

    def stop(self, timeout: float = 5.0, *, final: list[AnnotationOwner] | None = None) -> None:
        """Stop the thread; with `final`, then run one last round for those owners (what they withdraw at
        shutdown reaches the node even though the thread is gone)."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if final is not None:
            try:
                self.run_once(final, fresh=True)
            except Exception:
                log.exception("last publisher round failed")

    def run_once(self, owners: list[AnnotationOwner] | None = None, *, fresh: bool = False) -> bool:
        """One round (for all owners, or the given ones); True when nothing failed. `fresh` decides on the
        node as the API server has it now, not on the informer's copy, which may not show the last writes
        yet: the last round at shutdown must not skip a value it believes already withdrawn."""
        node = self._fresh_node() if fresh else self.get_node()
        if node is None:
            return True
        now = self.clock()
        per_owner = [(o, o.changes(node, now)) for o in (self.owners if owners is None else owners)]
        merged = Changes()
        for _, ch in per_owner:
            merged.annotations.update(ch.annotations)
            merged.extended_resources.update(ch.extended_resources)
        if not merged:
            return True
        if self.dry_run:
            intent = (sorted(merged.annotations.items()), sorted(merged.extended_resources.items()))
            if self._intents.changed("patch", intent):  # the same intention every period is no news
                log.info("dry-run: would patch node %s: %s", self.node_name, merged)
            for owner, ch in per_owner:
                if ch:
                    owner.committed(ch, now)
            return True
        try:
            if merged.annotations:
                self.kube.patch_node_annotations(self.node_name, merged.annotations)
            if merged.extended_resources:
                self.kube.patch_node_extended_resources(self.node_name, merged.extended_resources)
        except ApiError as exc:
            self.failures += 1
            self.last_error, self.last_status = str(exc), exc.status
            self.health.note(exc.status)
            self._retry_after = exc.retry_after
            held = self._failures.occurred("patch")
            if held is not None:
                log.warning(
                    "node %s: annotation patch failed, will retry with the latest values: %s%s",
                    self.node_name,
                    exc,
                    repeated(held),
                )
            return False
        if (failed := self._failures.ended("patch")) is not None:
            log.info("node %s: annotation patch succeeded after %d failed attempts", self.node_name, failed)
        self.writes += 1
        self.last_error = self.last_status = None
        self.health.note(None)
        for owner, ch in per_owner:
            if ch:
                owner.committed(ch, now)
        return True

    def _fresh_node(self) -> dict[str, Any] | None:
        """The node read from the API server; the informer's copy when that read fails."""
        if not self.dry_run:
            try:
                return self.kube.get_node(self.node_name)
            except ApiError as exc:
                self.health.note(exc.status)
                log.warning(
                    "node %s: cannot read the node for the last round, using the watched copy: %s", self.node_name, exc
                )
        return self.get_node()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._retry_after = None
            try:
                ok = self.run_once()
            except Exception:
                log.exception("publisher round failed")
                ok = False
            if ok:
                self._failed_in_row = 0
                delay = self.period
            else:
                self._failed_in_row += 1
                cap = min(self.backoff_max, self.period * 2.0**self._failed_in_row)
                delay = max(self.period, cap * random.random(), self._retry_after or 0.0)
            self._wake.wait(delay)
            self._wake.clear()
