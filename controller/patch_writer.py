"""Send node annotation patches: one merge patch per node, coalesced, rate limited, leader-gated.

Pending work is a map node -> patch, so a newer plan for a node replaces the older one: memory is bounded
by the number of nodes however slow the API server is, and we never send outdated values. A failed patch
is dropped, not retried: the next cycle plans it again from the node's real annotations, which is a
natural backoff of one polling interval.

Leader-gated means more than "checked when queued": a patch may wait in the queue and then on a slow API
server, and one that lands after the lease passed to another replica would overwrite the new leader's
values. So leadership is asked right before sending, as the time the lease is still ours
(`LeaderElector.lease_time_left`), and the patch gets a deadline inside that time: it is applied before
a successor could take over, or not at all (see `Kube.patch_node_annotations`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from controller.metrics import ControllerMetrics

log = logging.getLogger(__name__)

#: Share of the lease time left that one write may use; the rest absorbs connection-retry backoff and
#: the moments between reading the clock and the request leaving.
LEASE_SHARE = 0.8
#: Below this much time a write is not attempted (it would only time out).
MIN_WRITE_SECONDS = 0.05


class PatchFn(Protocol):
    """`Kube.patch_node_annotations`: applied within `timeout` seconds or not at all."""

    def __call__(
        self, name: str, annotations: Mapping[str, str | None], *, timeout: float | None = None
    ) -> dict[str, Any]: ...


class TokenBucket:
    """Classic token bucket; `take` blocks until a token is available or `stop` is set."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.tokens = float(burst)
        self.clock = clock
        self.last = clock()
        self._lock = threading.Lock()

    def take(self, stop: threading.Event) -> bool:
        while not stop.is_set():
            with self._lock:
                now = self.clock()
                self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
                self.last = now
                if self.tokens >= 1.0:
                    self.tokens -= 1.0
                    return True
                wait = (1.0 - self.tokens) / self.rate
            stop.wait(min(wait, 0.5))
        return False


class AnnotationWriter:
    """Worker threads draining the per-node patch map."""

    def __init__(
        self,
        patch: PatchFn,
        *,
        qps: float,
        burst: int,
        workers: int,
        metrics: ControllerMetrics,
        lease_time_left: Callable[[], float] = lambda: math.inf,
        request_timeout: float = 10.0,
        on_written: Callable[[str, Mapping[str, str | None], dict[str, Any]], None] | None = None,
    ) -> None:
        """`lease_time_left`: seconds a write started now may take and still land while we lead (0: we do
        not lead; inf without leader election). `request_timeout` caps the deadline of a leader's write."""
        self._patch = patch
        self._bucket = TokenBucket(qps, burst)
        self._n_workers = workers
        self._metrics = metrics
        self._lease_time_left = lease_time_left
        self._request_timeout = request_timeout
        self._on_written = on_written
        self._pending: OrderedDict[str, dict[str, str | None]] = OrderedDict()
        self._in_flight = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for i in range(self._n_workers):
            t = threading.Thread(target=self._run, name=f"colo-writer-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def alive(self) -> bool:
        """Every worker thread runs (False before start() and after stop())."""
        return bool(self._threads) and all(t.is_alive() for t in self._threads)

    def dead(self) -> list[str]:  # controller.liveness.Watched
        return [] if self.alive() else ["colo-writer"]

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout)

    def submit(self, node: str, patch: Mapping[str, str | None]) -> None:
        """Queue (or replace) the node's patch (None removes an annotation)."""
        if not patch:
            return
        with self._cond:
            self._pending[node] = dict(patch)
            self._metrics.write_queue.set(len(self._pending))
            self._cond.notify()

    def clear(self) -> None:
        """Drop everything pending (we lost the lease)."""
        with self._cond:
            self._pending.clear()
            self._metrics.write_queue.set(0)

    def leadership_changed(self, leading: bool) -> None:
        """A follower writes nothing: what was queued while leading is dropped."""
        if not leading:
            self.clear()

    def pending(self) -> int:
        with self._cond:
            return len(self._pending) + self._in_flight

    def wait_idle(self, timeout: float) -> bool:
        """Block until nothing is pending or in flight (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
        return True

    def _next(self) -> tuple[str, dict[str, str | None]] | None:
        with self._cond:
            while not self._pending and not self._stop.is_set():
                self._cond.wait(0.5)
            if self._stop.is_set():
                return None
            node, patch = self._pending.popitem(last=False)
            self._in_flight += 1
            self._metrics.write_queue.set(len(self._pending))
            return node, patch

    def _done(self) -> None:
        with self._cond:
            self._in_flight -= 1
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            node, patch = item
            try:
                if not self._bucket.take(self._stop):
                    return
                # Asked only now, after any wait for a token: the lease may have moved on meanwhile.
                left = self._lease_time_left()
                timeout: float | None = None  # no lease to outlive: the client's own request timeout
                if math.isfinite(left):
                    timeout = min(self._request_timeout, LEASE_SHARE * left)
                    if timeout < MIN_WRITE_SECONDS:
                        self._metrics.patches.labels("not_leader").inc()
                        continue
                try:
                    updated = self._patch(node, patch, timeout=timeout)
                except Exception as err:
                    self._metrics.patches.labels("error").inc()
                    log.warning("patching annotations of node %s failed: %s", node, err)
                    continue
                self._metrics.patches.labels("ok").inc()
                for key in patch:
                    self._metrics.annotations_written.labels(key).inc()
                if self._on_written is not None:
                    self._on_written(node, patch, updated)
            finally:
                self._done()
