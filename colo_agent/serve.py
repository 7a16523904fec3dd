"""Serves the agent that agent/main.py's `build_agent` built: its exporter app on the bound socket, sampling
started once the server listens, and on SIGTERM/SIGINT sampling stopped and the windows saved. Lives above
`agent/` and `exporter/` so that the agent never imports the exporter (which reads the agent's types)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import signal
import socket

import uvicorn
from starlette.applications import Starlette

from agent.runtime import Agent
from contract.windows import WINDOW_NAMES
from exporter.app import close_app, create_app
from serving.server import Server, make_server, secure

log = logging.getLogger("colo.agent")


def build_server(agent: Agent, sock: socket.socket, kube: object = None) -> tuple[Starlette, Server]:
    """The app and its server for the bound `sock` (TLS, authentication through `kube`); OSError or
    ValueError when the certificate files cannot be loaded or authentication has no cluster to ask."""
    cfg = agent.config
    app = create_app(
        agent.view,
        label_keys=cfg.aggregate_label_keys,
        pod_windows=cfg.pod_windows or WINDOW_NAMES,
        api_docs=cfg.serving.api_docs,
        max_concurrent=cfg.serving.max_concurrent,
    )
    secure(app, cfg.serving, kube, open_paths=cfg.serving.open_paths)
    host, port = sock.getsockname()[:2]
    return app, make_server(app, host, port, cfg.serving)


async def serve(agent: Agent, app: Starlette, server: Server, sock: socket.socket) -> bool:
    """Serve HTTP on the already bound `sock` until SIGTERM/SIGINT; then stop sampling and save state.
    False when the server never started (a runtime failure: nothing was sampled)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, functools.partial(_request_exit, server, sig))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.02)
    if server.started:
        # what start-up built (modules, the app, the configuration) lives as long as the process: out of the
        # collector's sight, a full collection walks only what the passes allocate
        gc.collect()
        gc.freeze()
        agent.start()
        host = sock.getsockname()[0]
        url_host = f"[{host}]" if ":" in host else host
        scheme = "https" if server.tls is not None else "http"
        url = f"{scheme}://{url_host}:{server.bound_port}/metrics"
        print(f"colo-agent: serving {url}  ({agent.describe()})", flush=True)
    try:
        await task
    finally:
        if server.started:
            await asyncio.to_thread(agent.stop)
        server.close()
        close_app(app)
        log.info("colo-agent stopped; window state %s", agent.last_save)
    return bool(server.started)


def _request_exit(server: uvicorn.Server, sig: int) -> None:
    log.info("received %s, shutting down", signal.Signals(sig).name)
    server.should_exit = True
