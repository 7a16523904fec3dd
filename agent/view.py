"""The agent's shared, read-mostly state: the latest snapshot, the windows, health, and what later stages
(capacity, enforcement) add. The sampler writes it; the exporter and the JSON API only read it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.metrics_core import Metric

from agent.snapshot import Snapshot
from agent.windows.store import WindowStore

log = logging.getLogger(__name__)
MetricSource = Callable[[], Iterable[Metric]]


class AgentView:
    """One per agent. Readers get whole objects (snapshot, dicts) swapped atomically, never partial passes."""

    def __init__(self, windows: WindowStore, interval: float, node_name: str | None = None) -> None:
        self.windows = windows
        self.interval = interval
        self.node_name = node_name
        self.windows_lock = windows.lock  # the store's own lock: held around several reads of one tick
        self._snapshot: Snapshot | None = None
        self.last_tick_mono: float | None = None
        self.started_mono = time.monotonic()
        self.cluster_synced: Callable[[], bool] = lambda: True  # replaced when an informer runs
        self.node_sections: dict[str, Callable[[], dict[str, Any]]] = {}  # extra /api/v1/node keys
        self.pod_sections: dict[str, Callable[[str], dict[str, Any] | None]] = {}  # extra keys per pod UID
        self.metric_sources: dict[str, MetricSource] = {}  # extra metric families, one entry per stage
        self.seq_listeners: list[Callable[[Snapshot], None]] = []
        self._installed = False

    def install(
        self,
        *,
        node_sections: dict[str, Callable[[], dict[str, Any]]],
        metric_sources: dict[str, MetricSource],
        cluster_synced: Callable[[], bool] = lambda: True,
    ) -> None:
        """The later stages' sections and metrics, set once by the composition root before anything runs
        (the stages need the view, so they cannot be passed to its constructor)."""
        if self._installed:
            raise RuntimeError("the agent view's sections are set once, at build time")
        self._installed = True
        self.node_sections.update(node_sections)
        self.metric_sources.update(metric_sources)
        self.cluster_synced = cluster_synced

    @property
    def snapshot(self) -> Snapshot | None:
        return self._snapshot

    def publish(self, snap: Snapshot) -> None:
        """Make a finished snapshot visible and tell listeners (e.g. the exporter's pre-render)."""
        self._snapshot = snap
        self.last_tick_mono = snap.mono
        for listener in self.seq_listeners:
            try:
                listener(snap)
            except Exception:  # a listener's bug must not cost the node its protection for this snapshot
                log.exception("snapshot listener %r failed", listener)

    def healthy(self, now: float | None = None) -> bool:
        """The sampling loop ticked recently (within 3 intervals + 5 s, or still starting)."""
        now = time.monotonic() if now is None else now
        limit = 3 * self.interval + 5.0
        if self.last_tick_mono is None:
            return now - self.started_mono < limit + 30.0
        return now - self.last_tick_mono < limit

    def ready(self) -> bool:
        """A first full snapshot exists and, in a cluster, the pod list has synced."""
        return self._snapshot is not None and self.cluster_synced()
