"""Runs the agent that agent/main.py's composition root built: sample on a fixed grid in a thread, run the
later stages on every snapshot, persist windows. Serving it over HTTP is the program's part
(colo_agent/serve.py), so the agent never imports its exporter."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from agent.config import AgentConfig
from agent.sense.sampler import Sampler
from agent.snapshot import Snapshot
from agent.view import AgentView
from agent.windows.persist import load_windows, save_windows
from agent.windows.store import WindowStore, wall_aligned_phase
from cgroup import CgroupReader, DriverDecision, Layout, PathModel, detect_driver, detect_layout
from common.logs import Repeats, repeated

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


@dataclass(frozen=True)
class Host:
    """This machine as the agent found it at start: its cgroup layout, kubelet's driver, the path model."""

    layout: Layout
    driver: DriverDecision
    model: PathModel
    node_name: str

    @classmethod
    def detect(cls, config: AgentConfig, layout: Layout | None = None) -> Host:
        layout = layout or detect_layout(config.host_root)
        driver = detect_driver(
            layout, explicit=config.cgroup_driver, host_root=config.host_root, cgroup_root=config.cgroup_root
        )
        return cls(
            layout, driver, PathModel(driver.driver, config.cgroup_root), config.node_name or socket.gethostname()
        )


def load_windows_for(config: AgentConfig, node_name: str) -> WindowStore:
    """Windows from the state file, or new ones whose minute grid sits on whole wall-clock minutes."""
    max_gap = min(60.0, max(5.0, 5 * config.interval))  # a missed tick or two is not a gap
    mono, wall = time.monotonic(), time.time()
    if not config.state_file:
        return WindowStore(phase=wall_aligned_phase(mono, wall), max_gap=max_gap)
    return load_windows(config.state_file, node=node_name, mono_now=mono, wall_now=wall, max_gap=max_gap)


class Agent:
    """Runs what the composition root (agent/main.py `build_agent`) built: nothing here is replaced later."""

    def __init__(
        self,
        config: AgentConfig,
        host: Host,
        windows: WindowStore,
        view: AgentView,
        reader: CgroupReader,
        sampler: Sampler,
        *,
        stages: Sequence[Stage] = (),
        services: Sequence[Service] = (),
        in_cluster: bool = False,
    ) -> None:
        self.config, self.host, self.in_cluster = config, host, in_cluster
        self.layout, self.driver, self.model, self.node_name = host.layout, host.driver, host.model, host.node_name
        self.windows, self.view, self.reader, self.sampler = windows, view, reader, sampler
        self.stages: tuple[Stage, ...] = tuple(stages)
        self.services: tuple[Service, ...] = tuple(services)
        self.loop = SamplingLoop(self)
        self._save_failures = Repeats(period=3600.0)  # a full disk is reported hourly, not every minute
        self.last_save = "not saved: the agent has not stopped yet"

    def save_state(self) -> str:
        """Persist the windows; returns what happened, for the log ("saved to ...", "not saved: ...")."""
        path = self.config.state_file
        if not path:
            return "not saved: state_file is '' (persistence off)"
        try:
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
        """One pass: sample, run the later stages on the snapshot, then make it visible, so a reader never
        sees a snapshot whose stages (capacity, enforcement) have not run yet."""
        snap = self.sampler.sample()  # takes the windows lock itself, only to feed and sweep the windows
        for stage in self.stages:
            try:
                stage.on_snapshot(snap)
            except Exception:
                log.exception("stage %s failed on snapshot %d", stage.name, snap.seq)
        self.view.publish(snap)
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
