"""Who leads: the Lease campaign (kube.LeaderElector), or this replica alone when election is off.

The parts that must react when leadership changes hands (the writer drops its queue, rebalancing forgets
its counts, ...) register a reaction here, so no one part needs to know all the others."""

from __future__ import annotations

import math
import socket
import threading
import uuid
from collections.abc import Callable

from controller.config import LeaderSettings
from controller.metrics import ControllerMetrics
from controller.threads import DaemonThreads
from kube import Kube, LeaderElector

#: A reaction to a change of leader: called with True when this replica starts leading, False when it stops.
Reaction = Callable[[bool], None]


def default_identity() -> str:
    """hostname (the pod name in a cluster) plus a random suffix, so two replicas never collide."""
    return f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"


class Leadership:
    """Leader election as the rest of the controller sees it: `is_leader`, `lease_time_left`, reactions."""

    def __init__(self, kube: Kube, settings: LeaderSettings, metrics: ControllerMetrics) -> None:
        self.metrics = metrics
        self._reactions: list[Reaction] = []
        self.elector: LeaderElector | None = None
        if settings.enabled:
            self.elector = LeaderElector(
                kube,
                settings.namespace,
                settings.name,
                settings.identity or default_identity(),
                lease_duration=settings.lease_duration,
                renew_deadline=settings.renew_deadline,
                retry_period=settings.retry_period,
                on_change=self._changed,
            )

    def is_leader(self) -> bool:
        return self.elector.is_leader if self.elector is not None else True

    def lease_time_left(self) -> float:
        """How long a write started now may take and still land while we lead (inf without election)."""
        return self.elector.lease_time_left() if self.elector is not None else math.inf

    def on_change(self, reaction: Reaction) -> None:
        """Call `reaction(leading)` on the lease thread at every change, in the order registered."""
        self._reactions.append(reaction)

    def campaign(self, threads: DaemonThreads, stop: threading.Event) -> None:
        """Run for the lease until `stop` (which releases it); without election we lead from now on."""
        if self.elector is not None:
            threads.spawn("colo-lease", self.elector.run, stop)
        else:
            self.metrics.is_leader.set(1)

    def _changed(self, leading: bool) -> None:
        self.metrics.is_leader.set(1 if leading else 0)
        for reaction in self._reactions:
            reaction(leading)
