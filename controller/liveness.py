"""Liveness (`/healthz`): what a restart can cure. A thread that must run died (an informer, a writer
worker, the lease campaign, the polling loop), or the polling loop completed no pass within
`stall_limit()`."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from controller.config import PollingSettings


class Watched(Protocol):
    """A part running threads of its own: names the ones that died (none: an empty list)."""

    def dead(self) -> list[str]: ...


class Liveness:
    """Judges nothing before `arm()` (start) nor once `stopping` is set."""

    def __init__(
        self,
        polling: PollingSettings,
        *,
        watched: Sequence[Watched],
        last_pass: Callable[[], float | None],
        nodes_known: Callable[[], int],
        stopping: threading.Event,
        monotonic: Callable[[], float],
    ) -> None:
        """`last_pass`: `monotonic` end of the polling loop's last complete pass (None: no loop runs)."""
        self.polling = polling
        self.watched = watched
        self.last_pass = last_pass
        self.nodes_known = nodes_known
        self._stopping = stopping
        self._monotonic = monotonic
        self._armed = False

    def arm(self) -> None:
        self._armed = True

    def stall_limit(self) -> float:
        """The longest one pass of the polling loop may take: three intervals plus the slowest possible poll
        (every agent running into the timeout, `concurrency` at a time)."""
        polling = self.polling
        rounds = max(1, math.ceil(self.nodes_known() / polling.concurrency))
        return 3 * polling.interval + rounds * polling.timeout

    def unhealthy(self) -> str | None:
        """Why this replica needs a restart, or None."""
        if not self._armed or self._stopping.is_set():
            return None
        dead = [name for part in self.watched for name in part.dead()]
        if dead:
            return f"thread(s) died: {', '.join(dead)}"
        progress = self.last_pass()
        if progress is not None:
            idle = self._monotonic() - progress
            limit = self.stall_limit()
            if idle > limit:
                return f"polling loop completed no pass for {idle:.0f}s (limit {limit:.0f}s)"
        return None
