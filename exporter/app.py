"""The agent's HTTP face: the app factory and a uvicorn server the agent's main can run and stop.

Endpoints
    ``/metrics``        cached Prometheus text 0.0.4, or OpenMetrics 1.0.0 when Accept prefers it; gzip when
                        Accept-Encoding allows. Served from `RenderCache` (never rendered in the loop).
    ``/healthz``        200 while the sampling loop ticks (`view.healthy()`), else 503; small JSON body.
    ``/readyz``         200 once a snapshot exists and the pod list synced (`view.ready()`), else 503.
    ``/api/v1/node``    node document (see `exporter.api`); 503 before the first snapshot.
    ``/api/v1/pods``    list of pod documents; 503 before the first snapshot. Units: ``/api/v1/units``,
                        also linked from the response's ``Link: </api/v1/units>; rel="describedby"``.
    ``/api/v1/units``   the unit of every numeric field of the two documents.

The JSON endpoints compute windows for every pod: they run on a small worker pool, at most
`max_concurrent` at once (503 past that), never on the event loop. The health endpoints are O(1).

One table of `Endpoint`s (path, handler, what the docs say) is mounted on Starlette alone, or, with
``serving.api_docs``, on FastAPI, which adds /docs, /redoc and /openapi.json. FastAPI is imported only then:
its OpenAPI models and what it pulls in cost about 7 MiB of the agent's resident memory, for pages that are
off by default. Routing errors are worded as FastAPI words them either way (``{"detail": "Not Found"}``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agent.view import AgentView
from agent.windows.store import WINDOW_NAMES
from exporter.api import node_document, pods_document, units_document
from exporter.encoding import CONTENT_TYPE_OPENMETRICS, CONTENT_TYPE_TEXT
from exporter.render import RenderCache
from exporter.snapshot_metrics import DEFAULT_LABEL_KEYS, ColoCollector
from exporter.stats import WindowStatsCache
from serving.limits import Gate, Rejected
from serving.server import Server

JSON_TYPE = "application/json"


def _media_ranges(header: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """(type, params, q) of each entry of an Accept or Accept-Encoding header; malformed q counts as 0."""
    for part in header.split(","):
        pieces = [p.strip() for p in part.split(";")]
        if not pieces[0]:
            continue
        params: dict[str, str] = {}
        for p in pieces[1:]:
            key, _, value = p.partition("=")
            params[key.strip().lower()] = value.strip().strip('"')
        try:
            q = float(params.pop("q", "1"))
        except ValueError:
            q = 0.0
        yield pieces[0].lower(), params, q


def wants_openmetrics(accept: str) -> bool:
    """OpenMetrics when Accept ranks ``application/openmetrics-text`` (1.0.0, 0.0.1 or no version) at least
    as high as anything that plain text would satisfy. Prometheus' default Accept prefers it."""
    q_om = q_text = 0.0
    for media, params, q in _media_ranges(accept):
        if media == "application/openmetrics-text":
            if params.get("version", "1.0.0") in ("1.0.0", "0.0.1"):
                q_om = max(q_om, q)
        elif media in ("text/plain", "text/*", "*/*"):
            q_text = max(q_text, q)
    return q_om > 0 and q_om >= q_text


def accepts_gzip(accept_encoding: str) -> bool:
    """gzip when Accept-Encoding lists ``gzip`` (or ``*``) with q > 0."""
    gz: float | None = None
    star: float | None = None
    for coding, _params, q in _media_ranges(accept_encoding):
        if coding == "gzip":
            gz = q
        elif coding == "*":
            star = q
    if gz is not None:
        return gz > 0
    return star is not None and star > 0


def _json(body: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    """Encode here rather than through a generic encoder (slow on 250-pod documents)."""
    content = json.dumps(body, separators=(",", ":"), allow_nan=False, default=str).encode()
    return Response(content, status_code=status_code, media_type=JSON_TYPE, headers=headers)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One GET route: what serves it, and what the interactive docs say about it (when they are on)."""

    path: str
    handler: Callable[[Request], Awaitable[Response]]
    summary: str
    description: str | None = None
    json: bool = True  # documented as application/json (else a plain Response: /metrics)


async def _http_error(request: Request, exc: Exception) -> Response:
    """Routing errors (404, 405 with its Allow header) as FastAPI words them: ``{"detail": ...}``."""
    assert isinstance(exc, HTTPException)
    if exc.status_code in (204, 205, 304) or exc.status_code < 200:
        return Response(status_code=exc.status_code, headers=exc.headers)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


def _plain_app(endpoints: Sequence[Endpoint]) -> Starlette:
    """The routes on Starlette alone: FastAPI (its OpenAPI models, ~7 MiB of RSS) is not even imported."""
    routes = []
    for e in endpoints:
        route = Route(e.path, e.handler, methods=["GET"])
        route.methods = {"GET"}  # Starlette adds HEAD to GET routes; FastAPI did not: 405, as before
        routes.append(route)
    return Starlette(routes=routes, exception_handlers={HTTPException: _http_error})


def _documented_app(endpoints: Sequence[Endpoint]) -> Starlette:
    """The same routes on FastAPI, for /docs, /redoc and /openapi.json (``serving.api_docs``)."""
    from fastapi import FastAPI

    app = FastAPI(
        title="colo-agent",
        description="Node and pod usage, rolling windows and the agent's state. Units: /api/v1/units.",
        version="1",
    )
    for e in endpoints:
        kind: dict[str, Any] = {} if e.json else {"response_class": Response}
        app.add_api_route(e.path, e.handler, methods=["GET"], summary=e.summary, description=e.description, **kind)
    return app


def create_app(
    view: AgentView,
    *,
    label_keys: Sequence[str] = DEFAULT_LABEL_KEYS,
    pod_windows: Sequence[str] = WINDOW_NAMES,
    max_staleness: float | None = None,
    gzip_level: int = 1,
    api_docs: bool = False,
    max_concurrent: int = 4,
) -> Starlette:
    """The app for one view. Its render cache (``app.state.render_cache``) starts a worker thread and
    registers as a seq listener; `close_app` undoes both. Interactive docs only with `api_docs`."""
    windows = WindowStatsCache(view)
    collector = ColoCollector(view, label_keys=label_keys, windows=windows, pod_windows=pod_windows)
    cache = RenderCache(view, collector, max_staleness=max_staleness, gzip_level=gzip_level)
    gate = Gate(max_concurrent, workers=2)

    async def expensive(document: Callable[[], Response]) -> Response:
        try:
            gate.enter()
        except Rejected as err:
            return _json({"error": err.reason}, err.status)
        try:
            return await gate.run(document)
        finally:
            gate.leave()

    async def metrics(request: Request) -> Response:
        openmetrics = wants_openmetrics(request.headers.get("accept", ""))
        compressed = accepts_gzip(request.headers.get("accept-encoding", ""))
        scraper = request.client.host if request.client else None
        try:
            _rendered, body = await cache.get((openmetrics, compressed), scraper)
        except Exception as exc:  # a failed or timed-out render: say so, the next scrape retries
            return Response(f"render failed: {type(exc).__name__}\n", status_code=500, media_type="text/plain")
        headers = {"Vary": "Accept, Accept-Encoding"}
        if compressed:
            headers["Content-Encoding"] = "gzip"
        media = CONTENT_TYPE_OPENMETRICS if openmetrics else CONTENT_TYPE_TEXT
        return Response(body, media_type=media, headers=headers)

    async def healthz(request: Request) -> Response:
        now = time.monotonic()
        ok = view.healthy(now)
        last = view.last_tick_mono
        body = {"status": "ok" if ok else "stalled", "last_tick_age_seconds": None if last is None else now - last}
        return JSONResponse(body, status_code=200 if ok else 503)

    async def readyz(request: Request) -> Response:
        ready = view.ready()
        body = {"status": "ready" if ready else "not ready", "snapshot": view.snapshot is not None}
        return JSONResponse(body, status_code=200 if ready else 503)

    async def node(request: Request) -> Response:
        def document() -> Response:
            snap = view.snapshot
            if snap is None:
                return _json({"error": "no snapshot yet"}, 503)
            return _json(node_document(view, snap, windows))

        return await expensive(document)

    async def pods(request: Request) -> Response:
        def document() -> Response:
            snap = view.snapshot
            if snap is None:
                return _json({"error": "no snapshot yet"}, 503)
            links = {"Link": '</api/v1/units>; rel="describedby"'}
            return _json(pods_document(view, snap, windows), headers=links)

        return await expensive(document)

    async def units(request: Request) -> Response:
        return _json(units_document())

    pods_description = (
        f"A list of pods. `windows` is keyed by window name ({', '.join(WINDOW_NAMES)}), each "
        'holding `cpu_cores` and `memory_working_set_bytes` as {"value": number or null, "coverage": 0..1}. '
        "An online pod's figures are its last reading, taken every few seconds on its turn (offline pods' "
        "every second). Units: *_cores in cores, *_bytes in bytes, *_ratio and coverage 0..1; the full table "
        "is at /api/v1/units."
    )
    endpoints = (
        Endpoint("/metrics", metrics, "Prometheus metrics (cached render)", json=False),
        Endpoint("/healthz", healthz, "200 while the sampling loop ticks, else 503"),
        Endpoint("/readyz", readyz, "200 once a snapshot exists and the pod list synced, else 503"),
        Endpoint("/api/v1/node", node, "Node usage, windows (ratios 0..1), network, units and stage sections"),
        Endpoint("/api/v1/pods", pods, "Per-pod usage and windows", pods_description),
        Endpoint("/api/v1/units", units, "The unit of every numeric field of /api/v1/node and /api/v1/pods"),
    )
    app = _documented_app(endpoints) if api_docs else _plain_app(endpoints)
    app.state.view = view
    app.state.windows = windows
    app.state.collector = collector
    app.state.render_cache = cache
    app.state.gate = gate
    return app


def close_app(app: Starlette) -> None:
    """Stop the app's render worker and unregister its listener (tests, or an agent that rebuilds the app)."""
    cache: RenderCache = app.state.render_cache
    cache.close()
    gate: Gate = app.state.gate
    gate.close()


class ExporterServer(Server):
    """serving.server.Server (no signal handling of its own, unless asked) that can run on its own thread."""

    def __init__(self, config: uvicorn.Config, *, handle_signals: bool = False) -> None:
        super().__init__(config)
        self.handle_signals = handle_signals

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn would install SIGINT/SIGTERM handlers and re-raise the signal after shutdown; the agent
        # must instead finish its own shutdown (persist windows) on SIGTERM, so by default it stays out.
        if self.handle_signals:
            with uvicorn.Server.capture_signals(self):
                yield
        else:
            yield

    def start_thread(self, timeout: float = 10.0) -> threading.Thread:
        """Run the server in a daemon thread with its own event loop; returns once it listens."""
        thread = threading.Thread(target=self.run, name="colo-http", daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout
        while not self.started:
            if not thread.is_alive():
                raise RuntimeError("HTTP server failed to start")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError("HTTP server did not start in time")
            time.sleep(0.01)
        return thread


def make_server(
    app: Starlette,
    host: str,
    port: int,
    *,
    log_level: str = "warning",
    handle_signals: bool = False,
    keep_alive_seconds: int = 75,
) -> ExporterServer:
    """A server for `app`: no access log (a scrape per 15 s per Prometheus is noise), no lifespan, and
    connections kept open longer than a scrape interval so Prometheus does not reconnect every time."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        lifespan="off",
        timeout_keep_alive=keep_alive_seconds,
        log_config=None,  # uvicorn's lines through the program's handler
    )
    return ExporterServer(config, handle_signals=handle_signals)


async def serve(
    app: Starlette,
    host: str,
    port: int,
    *,
    stop: asyncio.Event | None = None,
    log_level: str = "warning",
    server: ExporterServer | None = None,
) -> None:
    """Serve until `stop` is set (or ``server.stop()`` is called when a server is passed in).

    Runs in the caller's event loop, e.g. the agent's main thread, which handles SIGTERM by setting `stop`.
    """
    srv = server if server is not None else make_server(app, host, port, log_level=log_level)
    watcher: asyncio.Task[None] | None = None
    if stop is not None:

        async def _watch(event: asyncio.Event) -> None:
            await event.wait()
            srv.stop()

        watcher = asyncio.create_task(_watch(stop))
    try:
        await srv.serve()
    finally:
        if watcher is not None:
            watcher.cancel()
