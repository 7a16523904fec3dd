"""The agent's side of the API server: this node's pods and Node watched (the pod cache keeps only what the agent
reads of a pod), the pods classified and mapped to their cgroups, and whether the API server answers. All
calls go through `kube/`; an absent API server only delays what needs it."""

from __future__ import annotations

from typing import Any

from agent.cluster.node_writer import ApiHealth
from agent.config import AgentConfig
from agent.node_state import BatchRequests
from agent.runtime import Host
from agent.sense.pod_fields import POD_LIST_PAGE_SIZE, pod_transform
from agent.sense.pod_source import KubePodSource
from contract.classify import Classifier
from kube import Informer, Kube


class ClusterLink:
    """The watches of this node's pods and Node, the pod source the sampler reads, and the API's health."""

    name = "cluster"

    def __init__(
        self, cfg: AgentConfig, host: Host, kube: Kube, *, backoff_initial: float = 0.5, backoff_max: float = 30.0
    ) -> None:
        node = host.node_name
        self.kube, self.node_name = kube, node
        # the cache keeps only the fields the agent reads of a pod (agent/sense/pod_fields.py)
        self.pods = Informer(
            kube,
            "pods",
            field_selector=f"spec.nodeName={node}",
            transform=pod_transform(cfg.aggregate_label_keys),
            page_size=POD_LIST_PAGE_SIZE,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
        )
        self.node = Informer(
            kube,
            "nodes",
            field_selector=f"metadata.name={node}",
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
        )
        self.classifier = Classifier(cfg.classify.offline_priority_classes, cfg.classify.offline_priority_below)
        self.source = KubePodSource(
            self.pods.items, host.layout, host.model, self.classifier, synced=self.pods.synced.is_set
        )
        self.health = ApiHealth()

    def node_object(self) -> dict[str, Any] | None:
        return self.node.get(self.node_name)

    def batch_requests(self) -> BatchRequests | None:
        """Σ batch requests of the node's pods (the floor of the batch resources); None until a pass has listed
        the pods after the informer synced: an empty cache is not an empty node."""
        return self.source.batch_requests

    def api_healthy(self) -> bool:
        """Reachable unless the last API call of any component (informers, publisher, evictor) got no answer
        or a server error; see ApiHealth."""
        self.health.observe("pods", self.pods.last_status)
        self.health.observe("node", self.node.last_status)
        return self.health.reachable()

    def start(self) -> None:
        self.pods.start()
        self.node.start()

    def stop(self) -> None:
        self.pods.stop()
        self.node.stop()
