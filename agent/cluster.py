"""Everything the agent does with the API server: watch this node's pods and Node, classify pods, publish
oversubscribable capacity. All calls go through `kube/`; an absent API server only delays writes.

`ClusterLink` is a service (started and stopped once by the agent); the part that runs on every snapshot
is a separate stage whose stop does nothing, so shutdown (last capacity round, restore) happens once."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from agent.classify import Classifier
from agent.enforcer import Enforcer
from agent.eviction import Evictor
from agent.kubepods import KubePodSource
from agent.node_state import node_state
from agent.oversubscription import OversubscriptionOwner
from agent.publisher import AnnotationOwner, ApiHealth, NodePublisher
from agent.resources import node_allocatable
from agent.runtime import Agent
from agent.snapshot import Snapshot
from cgroup import CgroupWriter
from kube import Informer, Kube

log = logging.getLogger(__name__)


class ProtectionStage:
    """ClusterLink's work in the sampling thread."""

    name = "cluster"

    def __init__(self, link: ClusterLink) -> None:
        self.link = link

    def on_snapshot(self, snap: Snapshot) -> None:
        self.link.on_snapshot(snap)

    def stop(self) -> None:
        """Nothing: ClusterLink.stop, the service's, shuts everything down once."""


class ClusterLink:
    name = "cluster"

    def __init__(self, agent: Agent, kube: Kube, *, backoff_initial: float = 0.5, backoff_max: float = 30.0) -> None:
        cfg = agent.config
        node = agent.node_name
        self.agent, self.kube, self.node_name = agent, kube, node
        self.pods = Informer(kube, "pods", field_selector=f"spec.nodeName={node}",
                             backoff_initial=backoff_initial, backoff_max=backoff_max)  # fmt: skip
        self.node = Informer(kube, "nodes", field_selector=f"metadata.name={node}",
                             backoff_initial=backoff_initial, backoff_max=backoff_max)  # fmt: skip
        self.classifier = Classifier(cfg.classify.offline_priority_classes, cfg.classify.offline_priority_below)
        source = KubePodSource(self.pods.items, agent.layout, agent.model, self.classifier)
        agent.source = agent.sampler.source = source
        agent.view.cluster_synced = self.pods.synced.is_set
        enf = cfg.enforcement
        self.health = ApiHealth()
        self.oversubscription = OversubscriptionOwner(agent.view, cfg.oversubscription, evicting=self.is_evicting)
        self.evictor = Evictor(
            kube, node, self.node_object, CgroupWriter(agent.layout, agent.reader), enf.eviction,
            api_healthy=self.api_healthy, health=self.health, oversubscribed=self.oversubscription.enabled,
            on_state_change=lambda: self.publisher.poke(), dry_run=cfg.dry_run,
        )  # fmt: skip
        self.enforcer = Enforcer(
            agent.layout, agent.model, agent.reader, enf, lambda: node_allocatable(self.node_object() or {}),
            dry_run=cfg.dry_run, host_root=cfg.host_root,
            memory_high_watermark=lambda: float(self.evictor.watermarks.high["memory"]),
        )  # fmt: skip
        if self.enforcer.ledger.problem:
            self.evictor.node_event("EnforcementLedgerCorrupt", self.enforcer.ledger.problem)
        self.owners: list[AnnotationOwner] = [self.oversubscription, self.evictor]
        self.publisher = NodePublisher(
            kube, node, self.node_object, self.owners, period=cfg.interval, backoff_max=backoff_max,
            dry_run=cfg.dry_run, health=self.health,
        )  # fmt: skip
        self.stage = ProtectionStage(self)
        agent.stages.append(self.stage)
        view = agent.view
        view.node_sections["oversubscription"] = self.oversubscription.section
        view.node_sections["enforcement"] = lambda: {**self.enforcer.section(), "eviction": self.evictor.section()}
        view.metric_sources["oversubscription"] = self.oversubscription.metrics
        view.metric_sources["enforcement"] = self.enforcer.metrics
        view.metric_sources["eviction"] = self.evictor.metrics

    def is_evicting(self) -> bool:
        return self.evictor.is_evicting()

    def api_healthy(self) -> bool:
        """Reachable unless the last API call of any component (informers, publisher, evictor) got no answer
        or a server error; see ApiHealth."""
        self.health.observe("pods", self.pods.last_status)
        self.health.observe("node", self.node.last_status)
        return self.health.reachable()

    def on_snapshot(self, snap: Snapshot) -> None:
        """One state per pass, built once: capacity, eviction and enforcement all decide on it. Protection
        runs whether or not the API server is reachable; each part on its own, so a failure of one never
        stops another."""
        node = self.node_object() or {}
        state = node_state(snap, node_allocatable(node))
        parts: list[tuple[str, Callable[[], None]]] = [
            ("capacity", lambda: self.oversubscription.on_state(state, node))
        ]
        if self.pods.synced.is_set():  # classes are unknown until the first list: touch nothing
            parts += [("eviction", lambda: self.evictor.on_state(state)),
                      ("enforcement", lambda: self.enforcer.on_state(state))]  # fmt: skip
        for name, part in parts:
            try:
                part()
            except Exception:
                log.exception("%s failed on snapshot %d", name, snap.seq)

    def node_object(self) -> dict[str, Any] | None:
        return self.node.get(self.node_name)

    def start(self) -> None:
        self.pods.start()
        self.node.start()
        self.publisher.start()
        self.evictor.start()

    def stop(self) -> None:
        """Capacity goes to 0 first (one last publisher round; the evicting annotation is left as it is),
        then eviction stops and enforcement restores what it changed, then the watches end."""
        self.oversubscription.withdraw()
        steps: list[tuple[str, Callable[[], None]]] = [
            ("publisher", lambda: self.publisher.stop(final=[self.oversubscription])),
            ("eviction", self.evictor.stop),
            ("enforcement", self.enforcer.stop),
            ("pod informer", self.pods.stop),
            ("node informer", self.node.stop),
        ]
        for what, step in steps:
            try:
                step()
            except Exception:
                log.exception("stopping %s failed", what)
