"""The online pods the QoS strategies act on, with the CFS quotas their specs give them (kubelet's formula):
the *current* spec each pass, so an in-place resize moves the burst and the quota burst's base with it.

`SpecCache` keeps what a strategy derives from a pod's spec alone between passes, so the per-second cost of
the QoS strategies is the work that depends on the pass's samples, not a fresh derivation of every pod."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import attrgetter
from typing import Generic, TypeVar

from agent.snapshot import PodMeta, PodSample
from cgroup.kubelet_rules import QUOTA_PERIOD_US, kubelet_quota

PERIOD_US = QUOTA_PERIOD_US
T = TypeVar("T")
_ID_AND_CGROUP = attrgetter("id", "cgroup")


@dataclass(frozen=True, slots=True)
class LimitedContainer:
    id: str
    cgroup: str
    quota_us: int | None  # from its CPU limit; None: no limit


@dataclass(frozen=True, slots=True)
class LimitedPod:
    """An online pod with the CPU quotas its limits give it and its containers'."""

    pod: PodSample
    quota_us: int | None  # the pod's own quota (every container limited), None: unlimited
    containers: tuple[LimitedContainer, ...]


def online_pod(p: PodSample) -> LimitedPod | None:
    """The pod with its quotas when it is classified online, of the pass's `NodeState.online` (unknown class is
    not: nothing is given to a pod not known to be online); None otherwise."""
    if p.meta.pod_class != "online":
        return None
    limits = p.meta.container_cpu_limits
    containers = tuple(LimitedContainer(c.id, c.cgroup, kubelet_quota(limits.get(c.id))) for c in p.containers)
    return LimitedPod(p, kubelet_quota(p.meta.cpu_limit_cores), containers)


def cores(quota_us: int | None, period_us: int = PERIOD_US) -> float | None:
    return None if quota_us is None else quota_us / period_us


class SpecCache(Generic[T]):
    """Per pod, a value computed from nothing but the pod's spec and cgroups: its `PodMeta` object (frozen; the
    pod source replaces it when the pod's resourceVersion changes), its cgroup, its running containers'
    IDs and cgroups (a container can come or go without the spec changing), and the pod cgroup's memory
    limit as read (kubelet's, which the spec's sum of containers does not give). The value is computed again when
    any of these differs and must not depend on anything else of the sample (usage, throttling): so a plan
    that uses it stays a pure function of its inputs. Pods not seen in a pass are dropped."""

    def __init__(self, compute: Callable[[PodSample], T]) -> None:
        self._compute = compute
        self._entries: dict[str, tuple[PodMeta, str, tuple[tuple[str, str], ...], int | None, T]] = {}

    def each(self, pods: Iterable[PodSample]) -> list[tuple[PodSample, T]]:
        """Every pod with its value, in order; what was not among `pods` is forgotten."""
        old, new = self._entries, {}
        out = []
        compute = self._compute
        for p in pods:
            meta = p.meta
            containers = tuple(map(_ID_AND_CGROUP, p.containers))
            e = old.get(meta.uid)
            if e is None or e[0] is not meta or e[1] != p.cgroup or e[2] != containers or e[3] != p.memory_limit_bytes:
                e = (meta, p.cgroup, containers, p.memory_limit_bytes, compute(p))
            new[meta.uid] = e
            out.append((p, e[4]))
        self._entries = new
        return out
