"""List+watch one kind in a background thread and keep a local cache of it.

Polling the API server from every node does not scale; a watch costs the server almost nothing and gives
changes within milliseconds. This follows client-go's reflector contract: list once, then watch from the
list's resourceVersion, resume from the last version seen (bookmarks included) after any interruption,
relist only when the server says 410 Gone, and back off (with full jitter, honouring Retry-After) on
errors so a thousand agents do not stampede an API server that is recovering.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kube.client import LIST_PAGE_SIZE, Kube
from kube.errors import ApiError
from kube.failures import FailureLog
from kube.kinds import Kind
from kube.watch import WatchStream

log = logging.getLogger(__name__)

EventHandler = Callable[[str, dict[str, Any]], None]
#: What an informer keeps of each object (None: nothing, as if a selector had excluded it).
Transform = Callable[[dict[str, Any]], dict[str, Any] | None]

#: A watch that ends cleanly this quickly without delivering anything counts as a failure (backoff),
#: so a misbehaving proxy that closes every watch at once cannot make us spin.
_SHORT_WATCH = 1.0


def object_key(obj: dict[str, Any]) -> str:
    """The cache key: ``namespace/name``, or ``name`` for cluster-scoped objects."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    name = str(meta.get("name") or "")
    return f"{ns}/{name}" if ns else name


def resource_version(obj: Mapping[str, Any]) -> str:
    """``metadata.resourceVersion``, or "" when the object has none."""
    meta = obj.get("metadata")
    rv = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    return rv if isinstance(rv, str) else ""


class Informer:
    """List+watch one kind in a background thread and keep a cache.

    ``on_event`` runs on the informer thread with ("ADDED"|"MODIFIED"|"DELETED", obj); after a relist it
    also gets synthesized DELETED events for objects that vanished meanwhile. Cached objects are shared,
    not copied: treat what ``items()``/``get()``/``on_event`` hand out as read-only.

    ``transform`` (optional) runs on every listed or watched object before it is cached or handed to
    ``on_event``, so a caller that reads a few fields of a large kind need not hold whole objects: the
    cache keeps only what it returns (pages of a list are transformed as they arrive). It must keep
    ``metadata.name``, ``metadata.namespace`` and ``metadata.resourceVersion`` (the cache is keyed and
    diffed on them). Returning None leaves the object out, as a selector would: it is not cached, a cached
    version is dropped with a DELETED event, and a later version may bring it back as ADDED. A transform
    that raises is logged and counts as None. Without ``transform`` whole objects are kept. ``page_size``:
    objects per list request (see ``Kube.list``); with a transform, a page's whole objects are what a
    (re)list holds at most before they are cut down.
    """

    def __init__(
        self,
        kube: Kube,
        kind: Kind,
        *,
        namespace: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        on_event: EventHandler | None = None,
        transform: Transform | None = None,
        page_size: int = LIST_PAGE_SIZE,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        watch_timeout: int = 300,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.kube = kube
        self.kind: Kind = kind
        self.namespace = namespace
        self.field_selector = field_selector
        self.label_selector = label_selector
        self.on_event = on_event
        self.transform = transform
        self.page_size = page_size
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.watch_timeout = watch_timeout
        self._jitter = jitter
        self.synced = threading.Event()
        self.last_error: str | None = None
        #: HTTP status of the last failed list/watch (0: no answer, connection error or timeout); None after
        #: a success. Callers tell "API server unreachable" (0, >= 500) from "refused" (4xx) with it.
        self.last_status: int | None = None
        self._cache: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stream: WatchStream | None = None
        self._rv = ""
        self._failures = 0
        self._failure_log = FailureLog(log, f"informer {kind}")
        self.lists = 0  # how many (re)lists happened: observability and tests

    # ---- public API ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the background thread (idempotent)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.kind}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop promptly: cuts the open watch instead of waiting for it to time out."""
        self._stop.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.close()
        if self._thread is not None:
            self._thread.join(timeout)

    def is_alive(self) -> bool:
        """True while the background thread runs (from start() until stop())."""
        return self._thread is not None and self._thread.is_alive()

    def items(self) -> list[dict[str, Any]]:
        """A snapshot list of the cached objects."""
        with self._lock:
            return list(self._cache.values())

    def get(self, key: str) -> dict[str, Any] | None:
        """Look up by ``namespace/name`` (or ``name`` for cluster-scoped kinds)."""
        with self._lock:
            return self._cache.get(key)

    @property
    def resource_version(self) -> str:
        """The last resourceVersion seen (list, event or bookmark): where the next watch resumes."""
        return self._rv

    # ---- internals -------------------------------------------------------------------------------

    def _backoff(self, failures: int, retry_after: float | None) -> float:
        """Full-jitter exponential backoff, never shorter than the server's Retry-After."""
        cap = min(self.backoff_max, self.backoff_initial * 2.0 ** max(0, failures - 1))
        delay = cap * self._jitter()
        if retry_after is not None:
            delay = max(delay, retry_after)
        return delay

    def _emit(self, etype: str, obj: dict[str, Any]) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(etype, obj)
        except Exception:
            log.exception("informer %s: on_event handler failed for %s %s", self.kind, etype, object_key(obj))

    def _keep(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        if self.transform is None:
            return obj
        try:
            return self.transform(obj)
        except Exception:
            log.exception("informer %s: transform failed for %s; leaving it out", self.kind, object_key(obj))
            return None

    def _replace(self, items: list[dict[str, Any]]) -> None:
        """Swap in a fresh list and tell the handler what changed since the previous cache."""
        fresh = {object_key(o): o for o in items}
        with self._lock:
            old, self._cache = self._cache, fresh
        for key, obj in fresh.items():
            prev = old.get(key)
            if prev is None:
                self._emit("ADDED", obj)
            elif resource_version(prev) != resource_version(obj):
                self._emit("MODIFIED", obj)
        for key, obj in old.items():
            if key not in fresh:
                self._emit("DELETED", obj)

    def _apply(self, etype: str, raw: dict[str, Any]) -> None:
        rv = resource_version(raw)
        if rv:
            self._rv = rv
        if etype == "BOOKMARK":
            return
        if etype not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("informer %s: ignoring unknown watch event type %r", self.kind, etype)
            return
        key = object_key(raw)
        obj = self._keep(raw)
        with self._lock:
            prev = self._cache.pop(key, None) if etype == "DELETED" or obj is None else self._cache.get(key)
            if etype != "DELETED" and obj is not None:
                self._cache[key] = obj
        if etype == "DELETED":
            gone = obj if obj is not None else prev
        elif obj is None:
            gone = prev  # no longer of interest: gone as far as the handler is concerned
        else:
            self._emit("MODIFIED" if prev is not None else "ADDED", obj)
            return
        if gone is not None:
            self._emit("DELETED", gone)

    def _list(self) -> None:
        items, rv = self.kube.list(
            self.kind,
            namespace=self.namespace,
            field_selector=self.field_selector,
            label_selector=self.label_selector,
            page_size=self.page_size,
            transform=self._keep if self.transform is not None else None,
        )
        self.lists += 1
        self._replace(items)
        self._rv = rv
        self.synced.set()

    def _watch(self) -> bool:
        """Follow one watch until it ends; True if it was useful (lasted or delivered something)."""
        started = time.monotonic()
        stream = self.kube.watch(
            self.kind,
            resource_version=self._rv,
            namespace=self.namespace,
            field_selector=self.field_selector,
            label_selector=self.label_selector,
            timeout_seconds=self.watch_timeout,
        )
        with self._lock:
            self._stream = stream
        try:
            if self._stop.is_set():
                return True
            delivered = False
            for etype, obj in stream:
                if not delivered:
                    # The watch works: whatever failed before is over.
                    delivered = True
                    self._failures = 0
                    self.last_error = None
                    self.last_status = None
                    self._failure_log.succeeded()
                self._apply(etype, obj)
            return delivered or time.monotonic() - started >= _SHORT_WATCH
        finally:
            stream.close()
            with self._lock:
                self._stream = None

    def _run(self) -> None:
        need_list = True
        while not self._stop.is_set():
            retry_after: float | None = None
            try:
                if need_list:
                    self._list()
                    need_list = False
                    self._failures = 0
                    self.last_error = None
                    self.last_status = None
                    self._failure_log.succeeded()  # after the state readers see: logging takes time
                if self._watch():
                    self._failures = 0
                    self._failure_log.succeeded()
                    continue
                self._failures += 1
                self.last_error = "watch closed immediately"
            except ApiError as e:
                if e.status == 410:
                    log.info("informer %s: %s; relisting", self.kind, e)
                    self.last_error = str(e)
                    need_list = True
                    continue
                self._failures += 1
                self.last_error = str(e)
                self.last_status = e.status
                retry_after = e.retry_after
                self._failure_log.failed(e.status, str(e))
            except Exception as e:  # keep the cache alive whatever happens; the error is visible
                self._failures += 1
                self.last_error = f"{type(e).__name__}: {e}"
                log.exception("informer %s: unexpected error", self.kind)
            self._stop.wait(self._backoff(self._failures, retry_after))
