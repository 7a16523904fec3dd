"""Oversubscribable capacity: what the node can lend to batch pods, by the rule of each publishing model.

    headroom     = allocatable × reclaim_ratio − system peak − online peak
                   (memory: the ratio at most the eviction high watermark − pressure_margin_percent)
    batch        = max(0, headroom)                         (kubernetes.io/batch-*: batch pods use only it)
    annotation   = max(0, min(reclaimable, headroom))       (volcano.sh/oversubscription-*: added on top of
                                                             allocatable, so only what online pods requested
                                                             and do not use)

The predictor (`oversubscription.predictor`) says what the peaks are:

``node_peak`` (the default)
    online peak = `peak_window` of the node's online usage (the kubepods root's minus the offline pods',
    agent/node_state.py; one series fed by the sampler), or its current 5-minute average if higher, plus,
    for every online pod younger than `min_history_seconds`, what it requested and does not use yet (it has
    not shown what it needs);
    system peak = the same window of the node's usage outside pods; reclaimable = max(0, Σ online
    requests − online peak). Peaks of different pods rarely coincide: the node's peak is what online pods
    take together, and a sum of per-pod peaks overstates it.
``pod_peaks`` (the rule before issue 20, kept to compare)
    online peak = Σ_online peak(pod), each pod's `peak_window` with its current 5-minute average (an online
    pod's series holds its readings, one per turn: 5 s rates, agent/sense/collectors/pods.py); a pod with less
    history than `min_history_seconds` counts max(request, usage); system = the instantaneous usage outside
    pods; reclaimable = Σ_online max(0, request − peak), and both models publish
    max(0, min(reclaimable, headroom)).

Without `min_history_seconds` of node history the node predictor falls back to Σ max(request, usage) of the
online pods. Pods of unknown class count as online: never give away what might belong to a
latency-sensitive pod. `resource_capacity` is the one implementation: the agent calls it through
`compute_state` on each pass, and colo-sim calls it on replayed traces.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from agent.node_state import NodeState, Resource, node_state, pod_request, pod_usage
from agent.snapshot import Snapshot
from agent.windows.store import WINDOW_SPANS, SeriesKey, WindowStore, online_key, system_key

if TYPE_CHECKING:
    from agent.config import OversubscriptionConfig

Predictor = Literal["node_peak", "pod_peaks"]
PREDICTORS: tuple[Predictor, ...] = ("node_peak", "pod_peaks")


@dataclass(frozen=True, slots=True)
class ResourceCapacity:
    """One resource's computation, in cores or bytes, kept whole so the JSON API can explain it."""

    allocatable: float
    reclaimable: float
    headroom: float
    system_usage: float
    online_peak: float
    online_request: float
    oversubscription: float  # the annotation model's number (volcano.sh/oversubscription-*)
    batch: float  # the batch-resource model's number (kubernetes.io/batch-*), before batch pods' own use


@dataclass(frozen=True, slots=True)
class CapacityParams:
    peak_window: str = "max_avg_1d"
    min_history_seconds: float = 300.0
    cpu_reclaim_ratio: float = 0.95
    memory_reclaim_ratio: float = 0.7
    predictor: Predictor = "node_peak"
    memory_fill_limit: float = 1.0  # the memory ratio's bound from eviction's watermark (`memory_fill_limit`)

    def ratio(self, resource: Resource) -> float:
        return self.cpu_reclaim_ratio if resource == "cpu" else min(self.memory_reclaim_ratio, self.memory_fill_limit)


def memory_fill_limit(high_watermark_percent: float, margin_percent: float) -> float:
    """The share of allocatable memory online peak, system peak and batch capacity may fill together at most:
    `margin_percent` points below eviction's high memory watermark. Batch pods' memory is given back only by
    eviction, and the watermark counts it (agent/node_state.py `watermark_usage`): lent above it, a node
    whose batch pods use what they were lent would evict them, and stop lending. (CPU needs no bound: the
    watermark does not count batch pods' CPU within their requests.)"""
    return max(0.0, high_watermark_percent - margin_percent) / 100.0


def params_from(config: OversubscriptionConfig, memory_high_watermark: float | None = None) -> CapacityParams:
    """The capacity parameters of an agent configuration's oversubscription section, with the memory ratio
    bounded by eviction's high memory watermark when it is given."""
    limit = 1.0 if memory_high_watermark is None else memory_fill_limit(memory_high_watermark,
                                                                        config.pressure_margin_percent)  # fmt: skip
    return CapacityParams(config.peak_window, config.min_history_seconds, config.cpu_reclaim_ratio,
                          config.memory_reclaim_ratio, config.predictor, limit)  # fmt: skip


@dataclass(frozen=True, slots=True)
class OnlinePod:
    """One online pod's figures for one resource in one pass."""

    uid: str
    request: float
    usage: float


class PodAges:
    """When each online pod was first seen in an unbroken run of passes (the node predictor's young-pod
    rule); a pod missing from a pass starts again when it comes back. Not thread-safe: one pass at a time."""

    __slots__ = ("_first",)

    def __init__(self) -> None:
        self._first: dict[str, float] = {}

    def observe(self, now: float, uids: Iterable[str]) -> None:
        first = self._first
        self._first = {uid: first.get(uid, now) for uid in uids}

    def age(self, uid: str, now: float) -> float:
        return now - self._first.get(uid, now)


def _window(windows: WindowStore, key: SeriesKey, now: float, params: CapacityParams) -> tuple[float | None, float]:
    """max(peak window, current 5-minute average) of `key` and the seconds of history behind it."""
    wv = windows.value(key, params.peak_window, now)
    avg5 = windows.value(key, "avg_5m", now)
    history = max(wv.coverage * WINDOW_SPANS[params.peak_window], avg5.coverage * WINDOW_SPANS["avg_5m"])
    values = [v for v in (wv.value, avg5.value) if v is not None]
    return (max(values) if values else None), history


def pod_peak(pod: OnlinePod, windows: WindowStore, resource: Resource, now: float, params: CapacityParams) -> float:
    """The `pod_peaks` predictor's peak of one pod (cores or bytes).

    The configured window is taken together with the current 5-minute average, which the max-of-averages
    windows only see at the next minute boundary: a pod that grows right now takes capacity back at once.
    """
    peak, history = _window(windows, ("pod", pod.uid, resource), now, params)
    if peak is None or history < params.min_history_seconds:
        return max(pod.request, pod.usage)
    return peak


def resource_capacity(
    windows: WindowStore,
    now: float,
    resource: Resource,
    allocatable: float,
    system_now: float,
    pods: Sequence[OnlinePod],
    ages: PodAges,
    params: CapacityParams,
) -> ResourceCapacity:
    """One resource's capacity at `now` from the windows and the pass's online pods (`ages` observed for
    this pass). The caller holds the windows lock."""
    request_sum = sum(p.request for p in pods)
    if params.predictor == "pod_peaks":
        peaks = [pod_peak(p, windows, resource, now, params) for p in pods]
        peak_sum = sum(peaks)
        reclaimable = sum(max(0.0, p.request - peak) for p, peak in zip(pods, peaks, strict=True))
        headroom = allocatable * params.ratio(resource) - system_now - peak_sum
        lend = max(0.0, min(reclaimable, headroom))
        return ResourceCapacity(allocatable, reclaimable, headroom, system_now, peak_sum, request_sum, lend, lend)
    node, history = _window(windows, online_key(resource), now, params)
    if node is None or history < params.min_history_seconds:
        peak_sum = sum(max(p.request, p.usage) for p in pods)
    else:
        young = params.min_history_seconds
        peak_sum = node + sum(max(0.0, p.request - p.usage) for p in pods if ages.age(p.uid, now) < young)
    system, _ = _window(windows, system_key(resource), now, params)
    system = system_now if system is None else max(system, system_now)
    reclaimable = max(0.0, request_sum - peak_sum)
    headroom = allocatable * params.ratio(resource) - system - peak_sum
    return ResourceCapacity(allocatable, reclaimable, headroom, system, peak_sum, request_sum,
                            max(0.0, min(reclaimable, headroom)), max(0.0, headroom))  # fmt: skip


def online_pods(state: NodeState, resource: Resource) -> list[OnlinePod]:
    return [OnlinePod(p.uid, pod_request(p, resource), pod_usage(p, resource)) for p in state.online]


def compute_state(
    state: NodeState, windows: WindowStore, params: CapacityParams, ages: PodAges | None = None
) -> tuple[ResourceCapacity, ResourceCapacity]:
    """(cpu, memory) capacity of one pass; the caller holds the windows lock. `ages` is the caller's record
    of its online pods across passes (None: a fresh one, so every pod counts as young)."""
    now = state.snapshot.mono
    ages = PodAges() if ages is None else ages
    ages.observe(now, (p.uid for p in state.online))
    out = []
    for resource in ("cpu", "memory"):
        usage = state.usage(resource)
        out.append(resource_capacity(windows, now, resource, usage.allocatable, usage.system or 0.0,
                                     online_pods(state, resource), ages, params))  # fmt: skip
    return out[0], out[1]


def compute(
    snap: Snapshot,
    windows: WindowStore,
    allocatable_cpu_cores: float,
    allocatable_memory_bytes: float,
    params: CapacityParams,
    ages: PodAges | None = None,
) -> tuple[ResourceCapacity, ResourceCapacity]:
    """(cpu, memory) capacity from one snapshot and the given allocatable; the caller holds the windows lock."""
    state = node_state(snap, (allocatable_cpu_cores, allocatable_memory_bytes))
    return compute_state(state, windows, params, ages)


def as_json(cpu: ResourceCapacity, memory: ResourceCapacity) -> dict[str, Any]:
    """The computation behind the published numbers, with its unit named."""
    return {"cpu": {**asdict(cpu), "unit": "cores"}, "memory": {**asdict(memory), "unit": "bytes"}}
