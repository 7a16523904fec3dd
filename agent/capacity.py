"""Oversubscribable capacity: what online pods requested but do not use, bounded by what the node can take.

    reclaimable  = Σ_online max(0, request − peak)
    headroom     = allocatable × reclaim_ratio − system usage − Σ_online peak
    oversub      = max(0, min(reclaimable, headroom))

`peak` is a window of the pod's own usage (default max_avg_1h: the highest 5-minute average in the last
hour, the current one included). A pod with less history than `min_history_seconds` counts its full
request (or its current usage if that is higher): it has not shown yet what it needs. System usage is
the node's usage outside every pod. Pods of unknown class count as online: never give away what might
belong to a latency-sensitive pod.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from agent.node_state import NodeState, Resource, node_state, pod_request, pod_usage
from agent.snapshot import PodSample, Snapshot
from agent.windows import WINDOW_SPANS, WindowStore


@dataclass(frozen=True, slots=True)
class ResourceCapacity:
    """One resource's computation, in cores or bytes, kept whole so the JSON API can explain it."""

    allocatable: float
    reclaimable: float
    headroom: float
    system_usage: float
    online_peak: float
    online_request: float
    oversubscription: float


@dataclass(frozen=True, slots=True)
class CapacityParams:
    peak_window: str = "max_avg_1h"
    min_history_seconds: float = 300.0
    cpu_reclaim_ratio: float = 0.8
    memory_reclaim_ratio: float = 0.75


def pod_peak(pod: PodSample, windows: WindowStore, resource: Resource, now: float, params: CapacityParams) -> float:
    """The pod's peak usage for capacity (cores or bytes).

    The configured window (default max_avg_1h) is taken together with the current 5-minute average, which
    the max-of-averages windows only see at the next minute boundary: a pod that grows right now takes
    capacity back at once, not a minute later.
    """
    request, current = pod_request(pod, resource), pod_usage(pod, resource)
    key = ("pod", pod.uid, resource)
    wv = windows.value(key, params.peak_window, now)
    avg5 = windows.value(key, "avg_5m", now)
    history = max(wv.coverage * WINDOW_SPANS[params.peak_window], avg5.coverage * WINDOW_SPANS["avg_5m"])
    values = [v for v in (wv.value, avg5.value) if v is not None]
    if not values or history < params.min_history_seconds:
        return max(request, current)
    return max(values)


def compute_state(
    state: NodeState, windows: WindowStore, params: CapacityParams
) -> tuple[ResourceCapacity, ResourceCapacity]:
    """(cpu, memory) capacity of one pass; the caller holds the windows lock."""
    out = []
    now = state.snapshot.mono
    ratios: tuple[tuple[Resource, float], ...] = (("cpu", params.cpu_reclaim_ratio),
                                                  ("memory", params.memory_reclaim_ratio))  # fmt: skip
    for resource, ratio in ratios:
        usage = state.usage(resource)
        system = usage.system or 0.0
        reclaimable = peak_sum = request_sum = 0.0
        for p in state.online:
            request = pod_request(p, resource)
            peak = pod_peak(p, windows, resource, now, params)
            reclaimable += max(0.0, request - peak)
            peak_sum += peak
            request_sum += request
        headroom = usage.allocatable * ratio - system - peak_sum
        oversub = max(0.0, min(reclaimable, headroom))
        out.append(ResourceCapacity(usage.allocatable, reclaimable, headroom, system, peak_sum, request_sum, oversub))
    return out[0], out[1]


def compute(
    snap: Snapshot,
    windows: WindowStore,
    allocatable_cpu_cores: float,
    allocatable_memory_bytes: float,
    params: CapacityParams,
) -> tuple[ResourceCapacity, ResourceCapacity]:
    """(cpu, memory) capacity from one snapshot and the given allocatable; the caller holds the windows lock."""
    return compute_state(node_state(snap, (allocatable_cpu_cores, allocatable_memory_bytes)), windows, params)


def as_json(cpu: ResourceCapacity, memory: ResourceCapacity) -> dict[str, Any]:
    """The computation behind the published numbers, with its unit named."""
    return {"cpu": {**asdict(cpu), "unit": "cores"}, "memory": {**asdict(memory), "unit": "bytes"}}
