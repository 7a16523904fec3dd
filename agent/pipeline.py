"""The cluster-mode pass: one NodeState per snapshot, then capacity, eviction and enforcement decide on it; and
the order they stop in. Built by the composition root (agent/main.py) from stages it built first.

`ClusterPipeline` is a service (started and stopped once by the agent); the part that runs on every snapshot
is a separate stage whose stop does nothing, so shutdown (last capacity round, restore) happens once."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from agent.capacity.owner import OversubscriptionOwner
from agent.cluster.link import ClusterLink
from agent.cluster.node_writer import NodePublisher
from agent.enforce import qos_report
from agent.enforce.stage import Enforcer
from agent.evict.evictor import Evictor
from agent.node_state import StateBuilder
from agent.snapshot import Snapshot
from agent.view import MetricSource
from kube.resources import node_allocatable

log = logging.getLogger(__name__)


class ProtectionStage:
    """The pipeline's work in the sampling thread."""

    name = "cluster"

    def __init__(self, pipeline: ClusterPipeline) -> None:
        self.pipeline = pipeline

    def on_snapshot(self, snap: Snapshot) -> None:
        self.pipeline.on_snapshot(snap)

    def stop(self) -> None:
        """Nothing: ClusterPipeline.stop, the service's, shuts everything down once."""


class ClusterPipeline:
    name = "cluster"

    def __init__(
        self,
        cluster: ClusterLink,
        oversubscription: OversubscriptionOwner,
        evictor: Evictor,
        enforcer: Enforcer,
        publisher: NodePublisher,
        states: StateBuilder,
    ) -> None:
        self.cluster, self.oversubscription, self.evictor = cluster, oversubscription, evictor
        self.enforcer, self.publisher, self.states = enforcer, publisher, states
        self.stage = ProtectionStage(self)

    def node_sections(self) -> dict[str, Callable[[], dict[str, Any]]]:
        """The keys this pipeline adds to /api/v1/node."""
        return {
            "oversubscription": self.oversubscription.section,
            "enforcement": self.enforcement_section,
            "qos": lambda: qos_report.section(self.enforcer),
        }

    def metric_sources(self) -> dict[str, MetricSource]:
        return {
            "oversubscription": self.oversubscription.metrics,
            "enforcement": self.enforcer.metrics,
            "eviction": self.evictor.metrics,
            "qos": lambda: qos_report.metrics(self.enforcer),
        }

    def enforcement_section(self) -> dict[str, Any]:
        return {**self.enforcer.section(), "eviction": self.evictor.section()}

    def on_snapshot(self, snap: Snapshot) -> None:
        """One state per pass, built once: capacity, eviction and enforcement all decide on it. Protection
        runs whether or not the API server is reachable; each part on its own, so a failure of one never
        stops another."""
        node = self.cluster.node_object() or {}
        # what protection did up to this pass: online QoS gives nothing while the node evicts or suppresses
        state = self.states.build(
            snap,
            node_allocatable(node),
            evicting=self.evictor.is_evicting(),
            offline_suppressed=self.enforcer.suppressing,
        )
        parts: list[tuple[str, Callable[[], None]]] = [
            ("capacity", lambda: self.oversubscription.on_state(state, node))
        ]
        if self.cluster.pods.synced.is_set():  # classes are unknown until the first list: touch nothing
            parts += [
                ("eviction", lambda: self.evictor.on_state(state)),
                ("enforcement", lambda: self.enforcer.on_state(state)),
            ]
        for name, part in parts:
            try:
                part()
            except Exception:
                log.exception("%s failed on snapshot %d", name, snap.seq)

    def start(self) -> None:
        self.cluster.start()
        self.publisher.start()
        self.evictor.start()

    def stop(self) -> None:
        """One last publisher round first, on the node as the API server has it: the annotations go to 0,
        the batch resources to what the node's batch pods request (kubelet re-admits them at its restart;
        nothing new fits), the evicting annotation is removed; then eviction stops (its worker removes the
        taint), enforcement restores what it changed, and the watches end."""
        self.oversubscription.withdraw()
        self.evictor.withdraw()
        steps: list[tuple[str, Callable[[], None]]] = [
            ("publisher", lambda: self.publisher.stop(final=[self.oversubscription, self.evictor])),
            ("eviction", self.evictor.stop),
            ("enforcement", self.enforcer.stop),
            ("watches", self.cluster.stop),
        ]
        for what, step in steps:
            try:
                step()
            except Exception:
                log.exception("stopping %s failed", what)
