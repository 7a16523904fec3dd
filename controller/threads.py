"""The controller's own daemon threads (the lease campaign, the polling loop): started by name, joined on
stop, and named when one died, so liveness can say which."""

from __future__ import annotations

import threading
from collections.abc import Callable


class DaemonThreads:
    """Threads spawned by the controller; `start()` and `stop()` run on one thread."""

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []

    def spawn(self, name: str, target: Callable[..., object], *args: object) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def dead(self) -> list[str]:  # controller.liveness.Watched
        """Names of the spawned threads that are no longer running."""
        return [t.name for t in self._threads if not t.is_alive()]

    def join(self, timeout: float) -> None:
        for t in self._threads:
            t.join(timeout)
