"""Everything the agent does with the API server: watch this node's pods and Node, classify pods, publish
oversubscribable capacity. All calls go through `kube/`; an absent API server only delays writes.

`ClusterLink` is a service (started and stopped once by the agent); the part that runs on every snapshot
is a separate stage whose stop does nothing, so shutdown (last capacity round, restore) happens once."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from agent.capacity.owner import OversubscriptionOwner
from agent.cluster.node_writer import AnnotationOwner, ApiHealth, NodePublisher
from agent.config import AgentConfig
from agent.enforce import qos_report
from agent.enforce.stage import Enforcer
from agent.enforce.strategies.registry import Facts, Strategy
from agent.evict.evictor import Evictor
from agent.node_state import BatchRequests, StateBuilder
from agent.runtime import Host
from agent.sense.pod_fields import POD_LIST_PAGE_SIZE, pod_transform
from agent.sense.pod_source import KubePodSource
from agent.snapshot import Snapshot
from agent.view import AgentView, MetricSource
from cgroup import CgroupReader, CgroupWriter
from contract.classify import Classifier
from kube import Informer, Kube
from kube.resources import node_allocatable

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

    def __init__(
        self,
        cfg: AgentConfig,
        host: Host,
        view: AgentView,
        reader: CgroupReader,
        kube: Kube,
        *,
        registered: Sequence[Strategy],
        facts: Facts | None = None,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
    ) -> None:
        node = host.node_name
        self.kube, self.node_name = kube, node
        # the cache keeps only the fields the agent reads of a pod (agent/sense/pod_fields.py)
        self.pods = Informer(kube, "pods", field_selector=f"spec.nodeName={node}",
                             transform=pod_transform(cfg.aggregate_label_keys), page_size=POD_LIST_PAGE_SIZE,
                             backoff_initial=backoff_initial, backoff_max=backoff_max)  # fmt: skip
        self.node = Informer(kube, "nodes", field_selector=f"metadata.name={node}",
                             backoff_initial=backoff_initial, backoff_max=backoff_max)  # fmt: skip
        self.classifier = Classifier(cfg.classify.offline_priority_classes, cfg.classify.offline_priority_below)
        self.source = KubePodSource(
            self.pods.items, host.layout, host.model, self.classifier, synced=self.pods.synced.is_set
        )
        enf = cfg.enforcement
        self.health = ApiHealth()
        self.oversubscription = OversubscriptionOwner(
            view, cfg.oversubscription, evicting=self.is_evicting, batch_requests=self.batch_requests,
            high_watermarks=lambda: self.evictor.watermarks.high,
        )  # fmt: skip
        self.evictor = Evictor(
            kube, node, self.node_object, CgroupWriter(host.layout, reader), enf.eviction,
            api_healthy=self.api_healthy, health=self.health, oversubscribed=self.oversubscription.enabled,
            on_state_change=lambda: self.publisher.poke(), dry_run=cfg.dry_run,
        )  # fmt: skip
        self.enforcer = Enforcer(
            host.layout, host.model, reader, enf, lambda: node_allocatable(self.node_object() or {}),
            dry_run=cfg.dry_run, host_root=cfg.host_root,
            memory_high_watermark=lambda: float(self.evictor.watermarks.high["memory"]), registered=registered,
            facts=facts,
        )  # fmt: skip
        if self.enforcer.ledger.problem:
            self.evictor.node_event("EnforcementLedgerCorrupt", self.enforcer.ledger.problem)
        self.owners: list[AnnotationOwner] = [self.oversubscription, self.evictor]
        self.publisher = NodePublisher(
            kube, node, self.node_object, self.owners, period=cfg.interval, backoff_max=backoff_max,
            dry_run=cfg.dry_run, health=self.health,
        )  # fmt: skip
        self.stage = ProtectionStage(self)
        self.states = StateBuilder(enf.eviction.smoothing_seconds)  # one NodeState per pass, smoothing kept here

    def node_sections(self) -> dict[str, Callable[[], dict[str, Any]]]:
        """The keys this link adds to /api/v1/node."""
        return {"oversubscription": self.oversubscription.section, "enforcement": self.enforcement_section,
                "qos": lambda: qos_report.section(self.enforcer)}  # fmt: skip

    def metric_sources(self) -> dict[str, MetricSource]:
        return {"oversubscription": self.oversubscription.metrics, "enforcement": self.enforcer.metrics,
                "eviction": self.evictor.metrics, "qos": lambda: qos_report.metrics(self.enforcer)}  # fmt: skip

    def enforcement_section(self) -> dict[str, Any]:
        return {**self.enforcer.section(), "eviction": self.evictor.section()}

    def batch_requests(self) -> BatchRequests | None:
        """Σ batch requests of the node's pods (the floor of the batch resources); None until a pass has listed
        the pods after the informer synced: an empty cache is not an empty node."""
        return self.source.batch_requests

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
        # what protection did up to this pass: online QoS gives nothing while the node evicts or suppresses
        state = self.states.build(snap, node_allocatable(node), evicting=self.evictor.is_evicting(),
                                  offline_suppressed=self.enforcer.suppressing)  # fmt: skip
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
            ("pod informer", self.pods.stop),
            ("node informer", self.node.stop),
        ]
        for what, step in steps:
            try:
                step()
            except Exception:
                log.exception("stopping %s failed", what)
