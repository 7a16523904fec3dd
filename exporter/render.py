"""The /metrics render cache: a scrape costs a dictionary lookup, rendering happens off the event loop.

Why
    prometheus-client needs tens of milliseconds to render a few thousand series, and Colo exports ten
    thousand (250 pods x 3 containers, 24 window series per pod). Rendering inside a scrape would block
    uvicorn's event loop and make /metrics as slow as the render; rendering every snapshot (1 s) would
    spend several percent of a core on output nobody reads. So: render at most once per snapshot, only
    when a scrape will want it, in one dedicated worker thread, and serve cached bytes.

Design
    * A render (`exporter.encoding.Rendered`) is the families of one snapshot and the bodies encoded from
      them so far, each variant ``(openmetrics, gzip)`` at most once.
    * All rendering and encoding runs in the worker thread ``colo-render``. The event loop only takes a
      short lock, looks up bytes, and when it must wait, awaits a `concurrent.futures.Future` of the
      worker (shielded, so a client that disconnects cannot cancel a render others wait for). Concurrent
      scrapes that need a render share one job; a job that finds the latest snapshot already rendered
      reuses it, so a snapshot is never rendered twice.
    * Freshness: a scrape is served the cached render when it is of the latest snapshot, or when its
      snapshot is at most ``max_staleness`` older than the latest (default two sampling intervals, in
      snapshot ``mono`` time). Otherwise the scrape waits for a render of the latest snapshot.
    * Pre-render: the cache is a `view.seq_listeners` listener. Per scraper (client host, at most 16 are
      tracked) it learns the scrape period (median of the last five gaps) and the variant asked for. On
      each new snapshot it checks whether some scraper's next expected scrape is within ``lead`` (one
      interval + twice the recent render time + 50 ms, capped at ``max_staleness``); if so, and that
      expected scrape was not prepared for yet, it asks the worker to render the latest snapshot in that
      scraper's variant. The snapshot that triggers is at most ``lead`` older than the one current at the
      scrape, so the scrape finds fresh bytes; a render still running at scrape time is joined. A
      scraper that misses four expected scrapes is no longer prepared for, so with nobody scraping the
      cache renders nothing. Cost: one render per scrape period per scraper (fewer when scrapers align).
    * The listener runs in the sampler thread: it only records the snapshot and may wake the worker; it
      never renders and never raises.

Freshness is bounded by ``max_staleness`` whatever the cadence: a scrape that comes early or from a new
client costs one render's latency, never stale data.

Measured (bench/render_pass.py, CPU time, 250 pods x 3 containers, ~10,900 series, full windows of random
values): one render is ~36 ms (window statistics ~16 ms, ~33 ms after a minute boundary when every series'
long windows are recomputed; families ~15 ms; text ~4 ms; an OpenMetrics + gzip body ~7 ms more), ~140 us
per pod; it was ~88 ms before the direct text lines and the per-minute window caches (prometheus-client's
own encoders alone need ~80 ms for text and ~115 ms for OpenMetrics). In the cluster benchmark (windows a
minute or two old) a render is ~22 ms of the worker's CPU, so one render per 15 s scrape is ~0.15% of a
core; a scrape served from the cache takes ~3 ms on loopback.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

from agent.snapshot import Snapshot
from agent.view import AgentView
from exporter.encoding import TEXT, Rendered, Variant
from exporter.snapshot_metrics import ColoCollector

log = logging.getLogger(__name__)

_T = TypeVar("_T")

_PERIOD_SAMPLES = 5
_MAX_MISSED = 4
_LEAD_SLACK = 0.05


@dataclass(eq=False)
class _Job:
    future: concurrent.futures.Future[Rendered] = field(default_factory=concurrent.futures.Future)
    variants: set[Variant] = field(default_factory=set)
    prerender: bool = False
    snapshot: Snapshot | None = None  # set when the worker starts it


@dataclass(eq=False)
class _Scraper:
    last: float
    variant: Variant
    gaps: deque[float] = field(default_factory=lambda: deque(maxlen=_PERIOD_SAMPLES))
    period: float | None = None
    prepared_for: float | None = None

    def next_expected(self, now: float, grace: float) -> float | None:
        """The first expected scrape not earlier than ``now - grace``; None if unknown or long gone."""
        period = self.period
        if period is None:
            return None
        k = max(1, int((now - grace - self.last) // period) + 1)
        if k > _MAX_MISSED:
            return None
        return self.last + k * period


def _snap_seq(snap: Snapshot | None) -> int:
    return -1 if snap is None else snap.seq


class RenderCache:
    """Cached /metrics bodies for one AgentView; see the module docstring for the design."""

    def __init__(
        self,
        view: AgentView,
        collector: ColoCollector,
        *,
        max_staleness: float | None = None,
        gzip_level: int = 1,
        max_scrapers: int = 16,
        clock: Callable[[], float] = time.monotonic,
        wait_timeout: float = 30.0,
    ) -> None:
        self.view = view
        self.collector = collector
        self.max_staleness = 2.0 * view.interval if max_staleness is None else max_staleness
        self.gzip_level = gzip_level
        self.max_scrapers = max_scrapers
        self.wait_timeout = wait_timeout
        self._clock = clock
        self._cond = threading.Condition()
        self._current: Rendered | None = None
        self._job: _Job | None = None  # queued, not started
        self._running: _Job | None = None
        self._encodes: deque[tuple[Rendered, Variant]] = deque()
        self._encoding = False
        self._scrapers: dict[str, _Scraper] = {}
        self._render_estimate = 0.1
        self._closed = False
        # counters (read by tests, the benchmark and nobody else)
        self.renders = 0  # snapshots collected and rendered
        self.prerenders = 0  # of which triggered ahead of an expected scrape
        self.encodes = 0  # variant encodings
        self.hits = 0  # scrapes answered from the cache without waiting
        self.waits = 0  # scrapes that waited for the worker
        self._thread = threading.Thread(target=self._run, name="colo-render", daemon=True)
        self._thread.start()
        view.seq_listeners.append(self.on_snapshot)

    # ------------------------------------------------------------------ sampler side

    def on_snapshot(self, snap: Snapshot) -> None:
        """seq listener (sampler thread): wake the worker if a scrape is due soon. Never raises."""
        try:
            now = self._clock()
            with self._cond:
                if self._closed:
                    return
                lead = min(self.view.interval + 2.0 * self._render_estimate + _LEAD_SLACK, self.max_staleness)
                wanted: set[Variant] = set()
                for scraper in self._scrapers.values():
                    grace = self.view.interval if scraper.period is None else min(scraper.period / 4, lead)
                    expected = scraper.next_expected(now, grace)
                    if expected is None or expected - now > lead or scraper.prepared_for == expected:
                        continue
                    scraper.prepared_for = expected
                    wanted.add(scraper.variant)
                if wanted:
                    job = self._queue_locked()
                    job.variants |= wanted
                    job.prerender = True
        except Exception:
            log.exception("render cache listener failed")

    # ------------------------------------------------------------------ scrape side

    async def get(self, variant: Variant = TEXT, scraper: str | None = None) -> tuple[Rendered, bytes]:
        """The body for a scrape (event loop): cached bytes, or an awaited worker render of the latest."""
        with self._cond:
            self._note_scrape(scraper, variant)
            rendered = self._fresh_locked()
            body = None if rendered is None else rendered.body(variant)
            if rendered is not None and body is not None:
                self.hits += 1
                return rendered, body
            self.waits += 1
            render_future = self._request_render_locked(variant) if rendered is None else None
        if render_future is not None:
            rendered = await self._await(render_future)
        assert rendered is not None
        body = rendered.body(variant)
        if body is None:
            body = await self._await(self._request_encode(rendered, variant))
        return rendered, body

    @property
    def current(self) -> Rendered | None:
        return self._current

    def scrape_periods(self) -> dict[str, float | None]:
        """Learned period per scraper (for debugging and the benchmark)."""
        with self._cond:
            return {key: s.period for key, s in self._scrapers.items()}

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until no render or encoding is queued or running (tests, the benchmark)."""
        with self._cond:
            return self._cond.wait_for(
                lambda: self._job is None and self._running is None and not self._encodes and not self._encoding,
                timeout,
            )

    def close(self, timeout: float = 5.0) -> None:
        """Stop the worker and unregister; waiting scrapes fail with RuntimeError."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self.on_snapshot in self.view.seq_listeners:
            self.view.seq_listeners.remove(self.on_snapshot)
        self._thread.join(timeout)

    async def _await(self, future: concurrent.futures.Future[_T]) -> _T:
        return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), self.wait_timeout)

    def _note_scrape(self, key: str | None, variant: Variant) -> None:
        """Learn the scraper's cadence; gaps shorter than one interval are retries, not a period."""
        now = self._clock()
        key = key or "-"
        s = self._scrapers.get(key)
        if s is None:
            if len(self._scrapers) >= self.max_scrapers:
                oldest = min(self._scrapers, key=lambda k: self._scrapers[k].last)
                del self._scrapers[oldest]
            self._scrapers[key] = _Scraper(last=now, variant=variant)
            return
        s.variant = variant
        gap = now - s.last
        if gap >= self.view.interval:
            s.gaps.append(gap)
            s.period = statistics.median(s.gaps)
            s.last = now

    def _acceptable(self, snap: Snapshot | None, latest: Snapshot | None) -> bool:
        if _snap_seq(snap) == _snap_seq(latest):
            return True
        return snap is not None and latest is not None and latest.mono - snap.mono <= self.max_staleness

    def _fresh_locked(self) -> Rendered | None:
        r = self._current
        if r is None:
            return None
        latest = self.view.snapshot
        if r.seq == _snap_seq(latest):
            return r
        if r.mono is not None and latest is not None and latest.mono - r.mono <= self.max_staleness:
            return r
        return None

    def _queue_locked(self) -> _Job:
        if self._job is None:
            self._job = _Job()
            self._cond.notify_all()
        return self._job

    def _request_render_locked(self, variant: Variant) -> concurrent.futures.Future[Rendered]:
        if self._closed:
            raise RuntimeError("render cache closed")
        running = self._running
        if running is not None and self._acceptable(running.snapshot, self.view.snapshot):
            running.variants.add(variant)
            return running.future
        job = self._queue_locked()
        job.variants.add(variant)
        return job.future

    def _request_encode(self, rendered: Rendered, variant: Variant) -> concurrent.futures.Future[bytes]:
        with self._cond:
            future = rendered._pending.get(variant)
            if future is None:
                future = rendered._pending[variant] = concurrent.futures.Future()
                body = rendered.body(variant)
                if body is not None:
                    future.set_result(body)
                else:
                    self._encodes.append((rendered, variant))
                    self._cond.notify_all()
            return future

    # ------------------------------------------------------------------ worker

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and self._job is None and not self._encodes:
                    self._cond.wait()
                if self._closed:
                    self._fail_pending_locked()
                    return
                job = self._job
                if job is not None:
                    self._job = None
                    job.snapshot = self.view.snapshot
                    self._running = job
                    current = self._current
                    encode_item = None
                else:
                    encode_item = self._encodes.popleft()
                    self._encoding = True
            if job is not None:
                self._render(job, current)
            elif encode_item is not None:
                try:
                    self._encode(*encode_item)
                finally:
                    with self._cond:
                        self._encoding = False
                        self._cond.notify_all()

    def _render(self, job: _Job, current: Rendered | None) -> None:
        snap = job.snapshot
        try:
            if current is not None and current.seq == _snap_seq(snap):
                rendered = current  # at most one render per snapshot
            else:
                start = time.perf_counter()
                collect = partial(self.collector.collect_snapshot, snap)
                rendered = Rendered(_snap_seq(snap), None if snap is None else snap.mono, collect(), collect)
                with self._cond:
                    variants = sorted(job.variants)
                for variant in variants:
                    rendered._encode(variant, self.gzip_level)
                    self.encodes += 1
                rendered.seconds = time.perf_counter() - start
                self.collector.render_seconds = rendered.seconds
                self.renders += 1
                self.prerenders += job.prerender
                self._render_estimate = 0.5 * self._render_estimate + 0.5 * rendered.seconds
            while True:
                with self._cond:
                    missing = [v for v in sorted(job.variants) if rendered.body(v) is None]
                    if not missing:
                        rendered.trim()
                        if self._current is None or rendered.seq >= self._current.seq:
                            self._current = rendered
                        self._running = None
                        self._cond.notify_all()
                        break
                for variant in missing:
                    rendered._encode(variant, self.gzip_level)
                    self.encodes += 1
        except Exception as exc:
            log.exception("rendering /metrics failed")
            with self._cond:
                self._running = None
                self._cond.notify_all()
            _settle(job.future, exc)
            return
        _settle(job.future, rendered)

    def _encode(self, rendered: Rendered, variant: Variant) -> None:
        future = rendered._pending[variant]
        try:
            existed = rendered.body(variant) is not None
            body = rendered._encode(variant, self.gzip_level)
            rendered.trim()
            self.encodes += not existed
        except Exception as exc:
            log.exception("encoding /metrics failed")
            _settle(future, exc)
            return
        _settle(future, body)

    def _fail_pending_locked(self) -> None:
        err = RuntimeError("render cache closed")
        for job in (self._job, self._running):
            if job is not None:
                _settle(job.future, err)
        for rendered, variant in self._encodes:
            _settle(rendered._pending[variant], err)
        self._encodes.clear()


def _settle(future: concurrent.futures.Future[_T], outcome: _T | BaseException) -> None:
    """Resolve a future unless it is already done (a waiter may have cancelled it)."""
    if future.done():
        return
    try:
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
    except concurrent.futures.InvalidStateError:
        pass
