"""What a pass samples: each pod's metadata and its cgroups — from the API server's pods in a cluster
(agent/kubepods.py), from the cgroup tree alone standalone (`CgroupPodSource`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agent.snapshot import PodMeta
from cgroup import Layout, PathModel, PodCgroup, discover_pods


class PodSource(Protocol):
    """What to sample this tick: each pod's metadata and its cgroups."""

    def pods(self, now: float) -> Sequence[tuple[PodMeta, PodCgroup]]: ...

    def vanished(self, uid: str) -> None:
        """A pod's cgroup is gone: look again before the next pass."""


class CgroupPodSource:
    """Standalone: pods found in the cgroup tree alone, re-scanned every `rescan_seconds` or when one vanished."""

    def __init__(self, layout: Layout, model: PathModel, rescan_seconds: float = 10.0) -> None:
        self.layout, self.model, self.rescan_seconds = layout, model, rescan_seconds
        self._pods: list[tuple[PodMeta, PodCgroup]] = []
        self._scanned: float | None = None

    def pods(self, now: float) -> Sequence[tuple[PodMeta, PodCgroup]]:
        if self._scanned is None or now - self._scanned >= self.rescan_seconds:
            self._pods = [(PodMeta(p.uid), p) for p in discover_pods(self.layout, self.model)]
            self._scanned = now
        return self._pods

    def vanished(self, uid: str) -> None:
        self._scanned = None
