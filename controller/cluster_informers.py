"""The controller's informers: Nodes (of `node_selector`), the agents' EndpointSlices when discovery uses
them, and bound Pods when something reads them (hot values, rebalancing, the floor of silent agents)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from controller.config import ControllerConfig
from kube import Informer, Kube, Transform

#: An informer event handler: ("ADDED" | "MODIFIED" | "DELETED", the cached object).
OnEvent = Callable[[str, dict[str, Any]], None]


class ClusterInformers:
    """Started and stopped together; `synced()` once every one has listed."""

    def __init__(
        self,
        kube: Kube,
        cfg: ControllerConfig,
        *,
        on_node: OnEvent,
        keep_node: Transform,
        on_pod: OnEvent | None,
        keep_pod: Transform,
    ) -> None:
        """`keep_*`: what the cache keeps of each object (controller/cached_objects.py); `on_pod` None: no
        pod informer (nothing reads pods)."""
        self.nodes = Informer(
            kube, "nodes", label_selector=cfg.node_selector or None, on_event=on_node, transform=keep_node
        )
        self.slices: Informer | None = None
        if cfg.agent.use_endpointslices:
            self.slices = Informer(
                kube,
                "endpointslices",
                namespace=cfg.agent.namespace,
                label_selector=cfg.agent.endpointslice_selector or None,
            )
        self.pods: Informer | None = None
        if on_pod is not None:
            self.pods = Informer(kube, "pods", field_selector="spec.nodeName!=", on_event=on_pod, transform=keep_pod)

    def all(self) -> list[Informer]:
        return [i for i in (self.nodes, self.slices, self.pods) if i is not None]

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.all())

    def dead(self) -> list[str]:  # controller.liveness.Watched
        """`informer-KIND` of each informer whose thread is not running."""
        return [f"informer-{i.kind}" for i in self.all() if not i.is_alive()]

    def start(self) -> None:
        for informer in self.all():
            informer.start()

    def stop(self, timeout: float) -> None:
        for informer in self.all():
            informer.stop(timeout)
