"""The sampling pass's collectors, as node_exporter has them: each named, switchable in the configuration
(`collectors.<name>: false`), and reported every pass with whether it succeeded and how long it took
(`colo_collector_success`, `colo_collector_duration_seconds`).

`node` (/proc) and `pods` (every pod's cgroups) are always on: capacity, eviction and enforcement decide on
them. `containers` (their cgroups), `psi` (pods' pressure, where the kernel has it), `tiers` (the QoS tier
cgroups) and `network` (physical interfaces) can be switched off. A collector's duration is its own: the
pods' figure leaves out the containers and PSI read for them, so the durations add up to the pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

COLLECTORS = ("node", "tiers", "pods", "containers", "psi", "network")
ALWAYS_ON = frozenset({"node", "pods"})


@dataclass(frozen=True, slots=True)
class CollectorRun:
    name: str
    success: bool
    duration_seconds: float


class PassClock:
    """Durations and failures of one pass, by collector: cheap enough to call per pod (two perf_counter
    reads per timed part)."""

    __slots__ = ("_durations", "_enabled", "_failed")

    def __init__(self, enabled: frozenset[str]) -> None:
        self._enabled = enabled
        self._durations: dict[str, float] = dict.fromkeys(enabled, 0.0)
        self._failed: set[str] = set()

    def add(self, name: str, started: float) -> float:
        """Charge the time since `started` (time.perf_counter()) to `name`; returns now."""
        now = time.perf_counter()
        self._durations[name] = self._durations.get(name, 0.0) + now - started
        return now

    def exclude(self, name: str, *parts: str) -> None:
        """Take the parts' time (measured within `name`'s) out of `name`'s."""
        self._durations[name] -= sum(self._durations.get(p, 0.0) for p in parts)

    def failed(self, name: str) -> None:
        self._failed.add(name)

    def runs(self) -> tuple[CollectorRun, ...]:
        return tuple(
            CollectorRun(name, name not in self._failed, self._durations[name])
            for name in COLLECTORS
            if name in self._enabled
        )
