"""The polling loop: one asyncio loop on its own thread runs polling cycles back to back while this replica
leads and its informers have synced (a cycle that overruns its interval is followed at once by the next,
never overlapped), refreshes the score gauges on every replica, and records when it last completed a pass
(liveness). What one cycle does is controller/cycle.py."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

from common.logs import Repeats, repeated
from controller.metrics import ControllerMetrics
from controller.threads import DaemonThreads

log = logging.getLogger("controller.service")  # the name these lines have always had (log filters rely on it)


class Timed(Protocol):
    """What the loop reads of a cycle's report."""

    @property
    def seconds(self) -> float: ...


Report = TypeVar("Report", bound=Timed)


class PollingLoop(Generic[Report]):
    """`start()` runs the loop on its own thread; `cycle()` runs one cycle now (tests and benchmarks)."""

    def __init__(
        self,
        run_cycle: Callable[[Report | None], Awaitable[Report]],
        metrics: ControllerMetrics,
        *,
        interval: float,
        leading: Callable[[], bool],
        ready: Callable[[], bool],
        after_pass: Callable[[], None],
        close: Callable[[], None],
        stop: threading.Event,
        monotonic: Callable[[], float],
    ) -> None:
        """`run_cycle(previous report)`: one cycle; `leading`: cycle now (we lead and every informer
        synced); `ready`: call `after_pass` (the gauges); `close`: what the loop owns and must release when
        it ends (agent connections)."""
        self.run_cycle, self.metrics = run_cycle, metrics
        self.interval = interval
        self.leading, self.ready, self.after_pass, self.close = leading, ready, after_pass, close
        self._stop = stop
        self._monotonic = monotonic
        self.last_report: Report | None = None
        self.progress: float | None = None  # `monotonic` end of the loop's last complete pass (liveness)
        self._overrun_logs = Repeats(period=600.0)

    async def cycle(self) -> Report:
        return await self.run_cycle(self.last_report)

    def start(self, threads: DaemonThreads) -> None:
        """Run the loop on its own thread (`colo-poller`) from now on."""
        self.progress = self._monotonic()
        threads.spawn("colo-poller", self.run)

    def run(self) -> None:
        asyncio.run(self._loop())

    async def _loop(self) -> None:
        try:
            await self._cycles()
        finally:
            self.close()  # the kept agent connections belong to this loop

    async def _cycles(self) -> None:
        interval = self.interval
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                if self.leading():
                    report = await self.cycle()
                    self.last_report = report
                    self.metrics.cycles.inc()
                    self.metrics.cycle_duration.observe(report.seconds)
                    if report.seconds > interval:
                        self.metrics.cycle_overruns.inc()
                        if (held := self._overrun_logs.occurred("overrun")) is not None:
                            log.warning(
                                "cycle took %.1fs, longer than the %.1fs interval%s",
                                report.seconds,
                                interval,
                                repeated(held),
                            )
                if self.ready():
                    self.after_pass()
                self.progress = self._monotonic()
            except Exception:
                log.exception("polling cycle failed")
            remaining = interval - (time.monotonic() - started)
            while remaining > 0 and not self._stop.is_set():
                await asyncio.sleep(min(remaining, 0.05))
                remaining = interval - (time.monotonic() - started)
