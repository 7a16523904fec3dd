"""How each collector did in one pass: `PassClock` times and marks them while the pass runs; `CollectorRun`
(agent/snapshot.py) is what the snapshot carries (and /metrics exports) for each."""

from __future__ import annotations

import time
from collections.abc import Iterable

from agent.snapshot import CollectorRun


class PassClock:
    """Durations and failures of one pass, by collector: cheap enough to call per pod (two perf_counter
    reads per timed part). A collector's duration is its own: the pods' leaves out its pod collectors'."""

    __slots__ = ("_durations", "_failed", "_order")

    def __init__(self, order: Iterable[str]) -> None:
        self._order = tuple(order)
        self._durations: dict[str, float] = dict.fromkeys(self._order, 0.0)
        self._failed: set[str] = set()

    def reset(self) -> None:
        """A new pass: the same object, zeroed."""
        for name in self._order:
            self._durations[name] = 0.0
        self._failed.clear()

    def add(self, name: str, started: float) -> float:
        """Charge the time since `started` (time.perf_counter()) to `name`; returns now."""
        now = time.perf_counter()
        self._durations[name] += now - started
        return now

    def exclude(self, name: str, parts: Iterable[str]) -> None:
        """Take the parts' time (measured within `name`'s) out of `name`'s."""
        self._durations[name] -= sum(self._durations[p] for p in parts)

    def failed(self, name: str) -> None:
        self._failed.add(name)

    def runs(self) -> tuple[CollectorRun, ...]:
        return tuple(CollectorRun(n, n not in self._failed, self._durations[n]) for n in self._order)
