"""Everything the agent does with the API server: watch this node's pods and Node, classify pods, publish
oversubscribable capacity. All calls go through `kube/`; an absent API server only delays writes."""

from __future__ import annotations

import logging
from typing import Any

from agent.classify import Classifier
from agent.kubepods import KubePodSource
from agent.oversubscription import OversubscriptionOwner
from agent.publisher import AnnotationOwner, NodePublisher
from agent.runtime import Agent
from kube import Informer, Kube

log = logging.getLogger(__name__)


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
        self.oversubscription = OversubscriptionOwner(agent.view, cfg.oversubscription)
        self.owners: list[AnnotationOwner] = [self.oversubscription]
        self.publisher = NodePublisher(
            kube, node, self.node_object, self.owners, period=cfg.interval, backoff_max=backoff_max,
            dry_run=cfg.dry_run,
        )  # fmt: skip
        agent.view.node_sections["oversubscription"] = self.oversubscription.section
        agent.view.metric_sources["oversubscription"] = self.oversubscription.metrics

    def node_object(self) -> dict[str, Any] | None:
        return self.node.get(self.node_name)

    def start(self) -> None:
        self.pods.start()
        self.node.start()
        self.publisher.start()

    def stop(self) -> None:
        self.publisher.stop()
        self.pods.stop()
        self.node.stop()
