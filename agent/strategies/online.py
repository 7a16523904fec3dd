"""The online pods the QoS strategies act on, with the CFS quotas their specs give them (kubelet's formula):
the *current* spec each pass, so an in-place resize moves the burst and the quota burst's base with it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from agent.kubelet import KUBELET_CFS_PERIOD_US, kubelet_quota
from agent.snapshot import PodSample

PERIOD_US = KUBELET_CFS_PERIOD_US


@dataclass(frozen=True, slots=True)
class LimitedContainer:
    id: str
    cgroup: str
    quota_us: int | None  # from its CPU limit; None: no limit


@dataclass(frozen=True, slots=True)
class OnlinePod:
    pod: PodSample
    quota_us: int | None  # the pod's own quota (every container limited), None: unlimited
    containers: tuple[LimitedContainer, ...]


def online_pods(pods: Iterable[PodSample]) -> Iterator[OnlinePod]:
    """Every pod classified online (unknown class is not: nothing is given to a pod not known to be online),
    of the pass's `NodeState.online`."""
    for p in pods:
        if p.meta.pod_class != "online":
            continue
        limits = p.meta.container_cpu_limits
        containers = tuple(LimitedContainer(c.id, c.cgroup, kubelet_quota(limits.get(c.id))) for c in p.containers)
        yield OnlinePod(p, kubelet_quota(p.meta.cpu_limit_cores), containers)


def cores(quota_us: int | None, period_us: int = PERIOD_US) -> float | None:
    return None if quota_us is None else quota_us / period_us
