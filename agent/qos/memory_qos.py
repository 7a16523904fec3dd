"""Memory QoS for online pods on cgroup v2 (the kernel's memory controller, as koordlet's memory QoS uses it).

An online container's request × `protect_percent` is protected from reclaim: `memory.low` (reclaimed only
when nothing unprotected is left) or `memory.min` (never reclaimed; the OOM killer goes elsewhere first).
With `high_percent`, `memory.high` = limit × percent throttles and reclaims the container before its hard
limit would OOM-kill it. A child's protection is bounded by its parent's, so the pod holds the sum of its
containers' and every ancestor up to kubepods the sum of what is under it. Offline pods keep the
memory.high enforcement gives them; v1 has no such files, so there the feature reports itself unsupported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agent.config import MemoryQosConfig

PAGE = 4096
V1_REASON = "memory QoS needs cgroup v2 (memory.min/low/high); this node runs v1"


@dataclass(frozen=True, slots=True)
class ContainerMemory:
    request_bytes: int
    limit_bytes: int | None


@dataclass(frozen=True, slots=True)
class PodMemory:
    cgroup: str
    ancestors: tuple[str, ...]  # its QoS tier up to kubepods, e.g. ('/kubepods/burstable', '/kubepods')
    online: bool
    limit_bytes: int | None  # the pod cgroup's hard limit as read (kubelet's); None: unlimited
    containers: Mapping[str, ContainerMemory]  # container cgroup -> request and limit


@dataclass(frozen=True, slots=True)
class MemoryTarget:
    min_bytes: int
    low_bytes: int
    high_bytes: int | None  # None: leave memory.high alone


def _pages(n: float) -> int:
    return int(n) // PAGE * PAGE


def _target(cfg: MemoryQosConfig, protect: int, limit: int | None) -> MemoryTarget:
    if limit is not None:
        protect = min(protect, limit)
    high = None
    if cfg.high_percent and limit is not None:
        high = min(limit, max(_pages(limit * cfg.high_percent / 100), protect))  # never throttle what is protected
    floor = protect if cfg.protection == "min" else 0
    low = protect if cfg.protection == "low" else 0
    return MemoryTarget(floor, low, high)


def pod_targets(cfg: MemoryQosConfig, pod: PodMemory) -> dict[str, MemoryTarget]:
    """An online pod's containers' targets, then its own: the part of the plan only its spec decides."""
    targets: dict[str, MemoryTarget] = {}
    total = 0
    for cgroup, c in pod.containers.items():
        t = _target(cfg, _pages(c.request_bytes * cfg.protect_percent / 100), c.limit_bytes)
        targets[cgroup] = t
        total += max(t.min_bytes, t.low_bytes)
    targets[pod.cgroup] = _target(cfg, total, pod.limit_bytes)  # the pod's real limit: never the spec's sum
    return targets


def ancestor_target(cfg: MemoryQosConfig, protect: int) -> MemoryTarget:
    """A cgroup above pods: the sum of the protection under it; its memory.high is left alone."""
    t = _target(cfg, protect, None)
    return MemoryTarget(t.min_bytes, t.low_bytes, None)


def supported(cfg: MemoryQosConfig, is_v2: bool) -> tuple[bool, str]:
    """Whether the node can have memory QoS, and why it is not applied ("" when it is)."""
    if not is_v2:
        return False, V1_REASON
    return True, "" if cfg.enabled else "disabled"
