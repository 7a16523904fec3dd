"""Oversubscribable capacity: what the node can lend to batch pods, by the rule of each publishing model.

    headroom     = allocatable × reclaim_ratio − system peak − online peak
                   (memory: the ratio at most the eviction high watermark − pressure_margin_percent)
    batch        = max(0, headroom)                         (kubernetes.io/batch-*: batch pods use only it)
    annotation   = max(0, min(reclaimable, headroom))       (volcano.sh/oversubscription-*: added on top of
                                                             allocatable, so only what online pods requested
                                                             and do not use)

The online peak is the configured predictor's (`oversubscription.cpu_predictor`, `memory_predictor`, or
`predictor` for both), called by name from the registry in `agent.capacity.predictors`: no
predictor is a special case here. For a node-level predictor, every online pod younger than
`min_history_seconds` adds what it requested and does not use yet, in proportion to the time it has left to
show what it needs: (1 − age / min_history_seconds) × max(0, request − usage). A per-pod predictor weighs each
pod's own history itself. The system peak is the peak window of the node's usage outside pods (or the instant,
if higher); reclaimable = max(0, Σ online requests − online peak) unless the predictor has its own rule.

Cold start: a predictor's peak is trusted in proportion to the history behind it, trust = min(1, history /
`trust_seconds`). Where the predictor would lend more than the safer of the peers' rules at their defaults
(koordinator's allocatable × 0.6 − usage, which Volcano's 0.6 × (allocatable − usage) never goes below), each
model lends cold + trust × (predicted − cold), with cold = max(0, allocatable × 0.6 (`cold_reclaim_ratio`) − system −
online usage now): a node whose windows are young or lost lends as the peers do, and more as the evidence
grows. Windows restored from the state file carry their history: a restart is not a cold start, and the
pods' ages are seeded from their own series' history (`PodAges.from_windows`).

Then the learned margin (`agent.capacity.margin`) scales both numbers. Pods of unknown class count as online:
never give away what might belong to a latency-sensitive pod. `resource_capacity` is the one implementation:
the agent calls it through `compute_state` on each pass, and colo-sim calls it on replayed traces.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import agent.capacity.predictors  # noqa: F401  (registers every predictor)
from agent.capacity.margin import LearnedMargin, MarginParams, online_now
from agent.capacity.params import CapacityParams as CapacityParams  # (re-exported: the stage's interface)
from agent.capacity.params import OnlinePod as OnlinePod
from agent.capacity.predictors import registry
from agent.capacity.predictors.registry import Prediction, Reading, history, window_peak
from agent.node_state import NodeState, Resource, node_state, pod_request, pod_usage
from agent.snapshot import Snapshot
from agent.windows.store import WindowStore, system_key

if TYPE_CHECKING:
    from agent.config_sections.lending import OversubscriptionConfig

RESOURCES: tuple[Resource, Resource] = ("cpu", "memory")


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
    predictor: str = "node_peak"
    trust: float = 1.0  # the cold-start rule's weight of the predictor (0..1)
    margin: float = 1.0  # the learned margin's factor (0..1)


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
    margin = MarginParams(floor=config.margin_floor) if config.margin_floor < 1 else None
    limit = (
        1.0
        if memory_high_watermark is None
        else memory_fill_limit(memory_high_watermark, config.pressure_margin_percent)
    )
    given = config.model_fields_set  # a resource's own key, when given, wins over `predictor`
    both = config.predictor
    cpu = config.cpu_predictor if both is None or "cpu_predictor" in given else both
    memory = config.memory_predictor if both is None or "memory_predictor" in given else both
    return CapacityParams(
        config.peak_window,
        config.min_history_seconds,
        config.cpu_reclaim_ratio,
        config.memory_reclaim_ratio,
        predictor=None,
        cpu_predictor=cpu,
        memory_predictor=memory,
        trust_seconds=config.trust_seconds,
        margin=margin,
        memory_fill_limit=limit,
    )


class PodAges:
    """When each online pod was first seen in an unbroken run of passes (the young-pod rule); a pod missing from
    a pass starts again when it comes back. Not thread-safe: one pass at a time."""

    __slots__ = ("first",)

    def __init__(self, seen: Mapping[str, float] | None = None) -> None:
        self.first: dict[str, float] = dict(seen or {})  # uid -> when first seen (read by the hot loop)

    @classmethod
    def from_windows(cls, windows: WindowStore) -> PodAges:
        """Ages as the pods' own series tell them (memory's is fed for every pod each pass), in the windows' own
        clock: after a restart with restored windows, a pod that ran before it is not young. The caller holds
        the windows lock."""
        seen: dict[str, float] = {}
        for key in windows:
            series = windows.get(key)
            last = None if series is None else series.last_t
            if key[0] == "pod" and key[2] == "memory" and last is not None:
                seen[key[1]] = last - history(windows, key, last)
        return cls(seen)

    def observe(self, now: float, uids: Iterable[str]) -> None:
        first = self.first
        self.first = {uid: first.get(uid, now) for uid in uids}

    def age(self, uid: str, now: float) -> float:
        return now - self.first.get(uid, now)


def cold_blend(predicted: float, cold: float, trust: float) -> float:
    """What is lent while the predictor is trusted by `trust` (0..1): never more than the peers' rule would
    lend without evidence, the predictor's number with full evidence."""
    return predicted if predicted <= cold else cold + trust * (predicted - cold)


def resource_capacity(
    windows: WindowStore,
    now: float,
    resource: Resource,
    allocatable: float,
    system_now: float,
    pods: Sequence[OnlinePod],
    ages: PodAges,
    params: CapacityParams,
    margin: LearnedMargin | None = None,
    shared: dict[str, Prediction] | None = None,
) -> ResourceCapacity:
    """One resource's capacity at `now` from the windows and the pass's online pods (`ages` observed for
    this pass; `margin` updated by this pass; `shared`: `Reading.shared`). The caller holds the windows lock."""
    spec = registry.spec(params.predictor_for(resource))
    prediction = registry.predict(spec.name, Reading(windows, now, resource, pods, params, shared))
    request_sum = sum(p.request for p in pods)
    peak = prediction.peak
    span = params.min_history_seconds
    if not spec.per_pod and span > 0:
        first = ages.first  # (inline: the pass's hot loop over every online pod)
        for p in pods:
            age = now - first.get(p.uid, now)
            if age < span and p.request > p.usage:
                peak += (1.0 - max(0.0, age) / span) * (p.request - p.usage)
    system, _ = window_peak(windows, system_key(resource), now, params.peak_window)
    system = system_now if system is None else max(system, system_now)
    reclaimable = max(0.0, request_sum - peak) if prediction.reclaimable is None else prediction.reclaimable
    headroom = allocatable * params.ratio(resource) - system - peak
    annotation = max(0.0, min(reclaimable, headroom))
    batch = annotation if spec.requested_only else max(0.0, headroom)
    trust = min(1.0, prediction.history / params.trust_seconds) if params.trust_seconds > 0 else 1.0
    if trust < 1.0:
        cold = max(0.0, allocatable * params.cold_reclaim_ratio - system_now - sum(p.usage for p in pods))
        batch, annotation = cold_blend(batch, cold, trust), cold_blend(annotation, cold, trust)
    factor = 1.0
    if margin is not None:
        used = online_now(windows, resource, now)
        if used is None:
            used = sum(p.usage for p in pods)
        factor = margin.update(now, used, system_now, allocatable)
        batch, annotation = batch * factor, annotation * factor
        margin.lent = batch
    return ResourceCapacity(
        allocatable, reclaimable, headroom, system, peak, request_sum, annotation, batch, spec.name, trust, factor
    )


def online_pods(state: NodeState, resource: Resource) -> list[OnlinePod]:
    return [OnlinePod(p.uid, pod_request(p, resource), pod_usage(p, resource)) for p in state.online]


def margins(params: CapacityParams, windows: WindowStore) -> dict[str, LearnedMargin] | None:
    """Each resource's learned margin as the windows' notes kept it (None: no learned margin configured)."""
    if params.margin is None:
        return None
    return {r: LearnedMargin.restored(r, params.margin, windows) for r in RESOURCES}


def compute_state(
    state: NodeState,
    windows: WindowStore,
    params: CapacityParams,
    ages: PodAges | None = None,
    learned: Mapping[str, LearnedMargin] | None = None,
) -> tuple[ResourceCapacity, ResourceCapacity]:
    """(cpu, memory) capacity of one pass; the caller holds the windows lock. `ages` is the caller's record
    of its online pods across passes (None: a fresh one, so every pod counts as young), `learned` its learned
    margins (None: none; each is noted in the windows' store after the pass)."""
    now = state.snapshot.mono
    ages = PodAges() if ages is None else ages
    ages.observe(now, (p.uid for p in state.online))
    out = []
    for resource in RESOURCES:
        usage = state.usage(resource)
        margin = None if learned is None else learned[resource]
        out.append(
            resource_capacity(
                windows,
                now,
                resource,
                usage.allocatable,
                usage.system or 0.0,
                online_pods(state, resource),
                ages,
                params,
                margin,
            )
        )
        if margin is not None:
            margin.keep(windows)
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
