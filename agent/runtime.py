"""Wires the agent together: detect the cgroup layout, sample on a fixed grid in a thread, persist windows,
run the later stages on every snapshot, and serve HTTP on the main thread's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import socket
import threading
import time
from typing import Protocol

import uvicorn
from fastapi import FastAPI

from agent.config import AgentConfig
from agent.sampler import CgroupPodSource, PodSource, Sampler
from agent.snapshot import Snapshot
from agent.view import AgentView
from agent.window_state import load_windows, save_windows
from agent.windows import WindowStore, wall_aligned_phase
from cgroup import CgroupReader, Layout, PathModel, detect_driver, detect_layout
from common.logs import Repeats, repeated
from serving.server import Server, make_server, secure

log = logging.getLogger("colo.agent")


class Stage(Protocol):
    """A later step run on every snapshot in the sampling thread (capacity, enforcement)."""

    name: str

    def on_snapshot(self, snap: Snapshot) -> None: ...

    def stop(self) -> None: ...


class Service(Protocol):
    """Something with its own thread(s) that lives as long as the agent (informers, the publisher)."""

    name: str

    def start(self) -> None: ...

    def stop(self) -> None: ...


class SamplingLoop:
    """Samples every `interval` seconds on a fixed monotonic grid; a late tick skips the missed slots."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="colo-sampler", daemon=True)
        self._last_save = time.monotonic()

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self.stop_event.set()
        if self.thread.is_alive():
            self.thread.join(timeout)

    def _run(self) -> None:
        a = self.agent
        interval = a.config.interval
        next_tick = time.monotonic()
        while not self.stop_event.is_set():
            try:
                a.tick()
            except Exception:  # a bug in one pass must not end the agent's protection of the node
                log.exception("sampling pass failed")
            now = time.monotonic()
            if a.config.state_file and now - self._last_save >= a.config.state_save_seconds:
                a.save_state()
                self._last_save = now
            next_tick += interval
            if next_tick <= now:
                next_tick += (int((now - next_tick) // interval) + 1) * interval
            self.stop_event.wait(next_tick - now)


class Agent:
    def __init__(self, config: AgentConfig, *, in_cluster: bool = False, layout: Layout | None = None) -> None:
        self.config = config
        self.in_cluster = in_cluster
        self.layout = layout or detect_layout(config.host_root)
        self.driver = detect_driver(
            self.layout, explicit=config.cgroup_driver, host_root=config.host_root, cgroup_root=config.cgroup_root
        )
        self.model = PathModel(self.driver.driver, config.cgroup_root)
        self.node_name = config.node_name or socket.gethostname()
        self.windows = self._load_windows()
        self.view = AgentView(self.windows, config.interval, self.node_name)
        # the JSON contract has these keys everywhere; in a cluster ClusterLink replaces them
        standalone = {"enabled": False, "reason": "standalone: no cluster, nothing published or enforced"}
        self.view.node_sections["oversubscription"] = lambda: dict(standalone)
        self.view.node_sections["enforcement"] = lambda: dict(standalone)
        self.reader = CgroupReader(self.layout)
        self.source: PodSource = CgroupPodSource(self.layout, self.model, config.discovery_seconds)
        self.sampler = Sampler(
            self.layout, self.model, self.source, self.windows, host_root=config.host_root, reader=self.reader,
            container_stat_every=config.container_memory_detail_every, windows_lock=self.view.windows_lock,
        )  # fmt: skip
        self.stages: list[Stage] = []
        self.services: list[Service] = []
        self.loop = SamplingLoop(self)
        self._save_failures = Repeats(period=3600.0)  # a full disk is reported hourly, not every minute
        self.last_save = "not saved: the agent has not stopped yet"

    def _load_windows(self) -> WindowStore:
        """Windows from the state file, or new ones whose minute grid sits on whole wall-clock minutes."""
        max_gap = min(60.0, max(5.0, 5 * self.config.interval))  # a missed tick or two is not a gap
        mono, wall = time.monotonic(), time.time()
        if not self.config.state_file:
            return WindowStore(phase=wall_aligned_phase(mono, wall), max_gap=max_gap)
        return load_windows(self.config.state_file, node=self.node_name, mono_now=mono, wall_now=wall, max_gap=max_gap)

    def save_state(self) -> str:
        """Persist the windows; returns what happened, for the log ("saved to ...", "not saved: ...")."""
        path = self.config.state_file
        if not path:
            return "not saved: state_file is '' (persistence off)"
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with self.view.windows_lock:
                save_windows(self.windows, path, node=self.node_name, mono_now=time.monotonic(), wall_now=time.time())
        except OSError as exc:
            what = f"not saved: {path}: {exc.strerror or exc}"
            held = self._save_failures.occurred(path)
            if held is not None:
                log.warning("window state %s%s", what, repeated(held))
            return what
        if (failed := self._save_failures.ended(path)) is not None:
            log.info("window state saved to %s again (after %d failed saves)", path, failed)
        return f"saved to {path}"

    def tick(self) -> Snapshot:
        snap = self.sampler.sample()  # takes the windows lock itself, only to feed and sweep the windows
        self.view.publish(snap)
        for stage in self.stages:
            try:
                stage.on_snapshot(snap)
            except Exception:
                log.exception("stage %s failed on snapshot %d", stage.name, snap.seq)
        return snap

    def describe(self) -> str:
        return f"cgroup {self.layout.describe()}; driver {self.driver.driver} ({self.driver.rule})"

    def start(self) -> None:
        for service in self.services:
            service.start()
        self.loop.start()

    def stop(self) -> None:
        self.loop.stop()
        sampling = self.loop.thread.is_alive()
        if sampling:
            log.warning("the sampling pass did not end within the stop timeout; leaving its descriptors open")
        for service in reversed(self.services):
            try:
                service.stop()
            except Exception:
                log.exception("service %s failed to stop", service.name)
        for stage in reversed(self.stages):
            try:
                stage.stop()
            except Exception:
                log.exception("stage %s failed to stop", stage.name)
        self.last_save = self.save_state()
        if not sampling:
            self.sampler.close()


def build_server(agent: Agent, sock: socket.socket, kube: object = None) -> tuple[FastAPI, Server]:
    """The app and its server for the bound `sock` (TLS, authentication through `kube`); OSError or
    ValueError when the certificate files cannot be loaded or authentication has no cluster to ask."""
    from agent.windows import WINDOW_NAMES
    from exporter.app import create_app

    cfg = agent.config
    app = create_app(
        agent.view, label_keys=cfg.aggregate_label_keys, pod_windows=cfg.pod_windows or WINDOW_NAMES,
        api_docs=cfg.serving.api_docs, max_concurrent=cfg.serving.max_concurrent,
    )  # fmt: skip
    secure(app, cfg.serving, kube, open_paths=cfg.serving.open_paths)
    host, port = sock.getsockname()[:2]
    return app, make_server(app, host, port, cfg.serving)


async def serve(agent: Agent, app: FastAPI, server: Server, sock: socket.socket) -> bool:
    """Serve HTTP on the already bound `sock` until SIGTERM/SIGINT; then stop sampling and save state.
    False when the server never started (a runtime failure: nothing was sampled)."""
    from exporter.app import close_app

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, functools.partial(_request_exit, server, sig))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():
        await asyncio.sleep(0.02)
    if server.started:
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
