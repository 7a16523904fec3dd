"""A pod source over a cgroup tree whose pods have the classes a test or benchmark gives them, the same
`PodMeta` and `PodCgroup` objects pass after pass as the cluster's source (agent/sense/pod_source.py) gives them: a
pod that changed is a new object."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agent.snapshot import PodClass, PodMeta
from cgroup import Layout, PathModel, PodCgroup, discover_pods


class ClassedPodSource:
    """The tree's pods as found once, in discovery order; `pod_class(index, uid)` classes each."""

    def __init__(self, layout: Layout, model: PathModel, pod_class: Callable[[int, str], PodClass]) -> None:
        self.found = {p.uid: p for p in discover_pods(layout, model)}
        self.metas = {uid: PodMeta(uid, pod_class=pod_class(i, uid)) for i, uid in enumerate(self.found)}

    def pods(self, now: float) -> Sequence[tuple[PodMeta, PodCgroup]]:
        return [(self.metas[uid], p) for uid, p in self.found.items()]

    def vanished(self, uid: str) -> None:
        return None
