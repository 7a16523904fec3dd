"""crane-scheduler's Dynamic plugin rules, evaluated on node annotations.

Filter: a node whose *fresh* annotation exceeds a predicate's `maxLimitPecent` is unschedulable.
Score: `int(Σ (1 - usage) × weight × 100 / Σ weight) - int(hot × 10)`, clamped to 0..100, where a missing
or stale annotation adds 0 (its weight still counts) and filters nothing. An annotation is fresh while
`now < timestamp + period + 5m` (hot value: `+ 5m` only). These mirror crane so that Colo's extender and a
real crane-scheduler reading the same annotations reach the same decisions.

The ScoreBoard caches parsed annotations and each node's verdict together with the instant it stops being
valid (the earliest expiry among the annotations it used), so a prioritize call over thousands of nodes
is a dictionary lookup per node.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from controller import load_annotations as ann
from controller.nodes import allocatable_raw, node_allocatable, node_annotations, node_name
from controller.policy import PolicySpec

EXTRA_ACTIVE_PERIOD = 300.0  # crane's ExtraActivePeriod
HOT_VALUE_ACTIVE_PERIOD = 300.0  # crane's DefautlHotVauleActivePeriod
#: What a rewrite needs on top of the gap between two cycles before crane reads it: the next cycle's own
#: polling and the wait in the writer's rate-limited queue (5000 nodes at 100 qps: 50 s).
REFRESH_MARGIN = 60.0
#: A longer polling interval cannot keep `node_hot_value` fresh at all (the config refuses it).
MAX_POLLING_INTERVAL = HOT_VALUE_ACTIVE_PERIOD - REFRESH_MARGIN
MAX_SCORE = 100
MIN_SCORE = 0
#: kube-scheduler's extenderv1.MaxExtenderPriority: it multiplies extender scores by MaxNodeScore / 10,
#: so an extender must answer in 0..10 whatever its own scale.
MAX_EXTENDER_PRIORITY = 10
_NEVER = math.inf


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """The annotations scoring needs, parsed once per change."""

    metrics: Mapping[str, tuple[float, float]]  # name -> (usage, epoch)
    hot: tuple[float, float] | None
    oversubscription: ann.Oversubscription | None  # what the agent publishes on the node, validated
    rejected: str | None = None  # why the agent's published capacity was ignored (None: taken, or absent)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What crane would decide for a node at `computed_at`, valid until `valid_until`."""

    score: int
    overloaded: str | None  # the failing predicate's reason, or None
    computed_at: float
    valid_until: float


def _go_int(x: float) -> int:
    """Go's int(float64): truncation toward zero (NaN/inf cannot occur with validated inputs)."""
    return int(x) if math.isfinite(x) else 0


class Scorer:
    """The policy's rules, pre-digested."""

    def __init__(self, spec: PolicySpec, oversubscription_active: float | None = None) -> None:
        self.spec = spec
        periods = {s.name: s.period for s in spec.sync_policy}
        self.metric_names: tuple[str, ...] = tuple(periods)
        self._predicates = tuple(
            (p.name, p.max_limit_percent, periods[p.name] + EXTRA_ACTIVE_PERIOD)
            for p in spec.predicate
            if p.name in periods
        )
        self._priorities = tuple(
            (p.name, p.weight, periods[p.name] + EXTRA_ACTIVE_PERIOD) for p in spec.priority if p.name in periods
        )
        self._weight_sum = 0.0
        for _, w, _ in self._priorities:
            self._weight_sum += w
        shortest = min(periods.values(), default=180.0)
        self.oversubscription_active = (
            oversubscription_active if oversubscription_active is not None else shortest + EXTRA_ACTIVE_PERIOD
        )
        self._keys = (*self.metric_names, ann.HOT_VALUE, ann.PUBLISHED_CPU, ann.PUBLISHED_MEMORY)
        #: Every annotation the controller reads on a node (scoring, the agent's published capacity, the
        #: planner's published score, and the deprecated copy of the capacity it may have to remove).
        self.annotation_keys: tuple[str, ...] = (*self._keys, ann.LOAD_SCORE, ann.OVERSUBSCRIPTION)

    def relevant(self, annotations: Mapping[str, str], allocatable: object = None) -> tuple[object, ...]:
        """The raw inputs scoring depends on (annotations, allocatable as the Node has it): equal tuples mean
        an unchanged verdict input."""
        return (*(annotations.get(k) for k in self._keys), allocatable)

    def parse(
        self, annotations: Mapping[str, str], allocatable: tuple[Decimal | None, Decimal | None] = (None, None)
    ) -> NodeLoad:
        """Parse what crane would parse; malformed or negative values are simply absent. The agent's
        published capacity is taken only as ASCII integers within `allocatable` (cores, bytes) where known."""
        metrics: dict[str, tuple[float, float]] = {}
        for name in self.metric_names:
            raw = annotations.get(name)
            if raw is not None:
                parsed = ann.parse_value(raw)
                if parsed is not None:
                    metrics[name] = parsed
        raw_hot = annotations.get(ann.HOT_VALUE)
        hot = ann.parse_value(raw_hot) if raw_hot is not None else None
        over, rejected = ann.parse_published(
            annotations.get(ann.PUBLISHED_CPU), annotations.get(ann.PUBLISHED_MEMORY), allocatable
        )
        return NodeLoad(metrics, hot, over, None if rejected == "missing" else rejected)

    @staticmethod
    def _fresh(load: NodeLoad, name: str, active: float, now: float) -> tuple[float, float] | None:
        """(usage, expiry) of a metric annotation crane still trusts at `now`; None if missing or stale."""
        got = load.metrics.get(name)
        if got is None:
            return None
        usage, stamp = got
        expiry = stamp + active
        return (usage, expiry) if now < expiry else None

    def evaluate(self, node: str, load: NodeLoad, now: float) -> Verdict:
        """Filter and score exactly as crane's Dynamic plugin would at time `now`."""
        valid_until = _NEVER
        overloaded: str | None = None
        for name, limit, active in self._predicates:
            fresh = self._fresh(load, name, active, now)
            if fresh is None:
                continue
            usage, expiry = fresh
            valid_until = min(valid_until, expiry)
            if limit != 0 and usage > limit and overloaded is None:
                overloaded = f"Load[{name}] of node[{node}] is too high"
        base = 0
        if self._priorities:
            total = 0.0
            for name, weight, active in self._priorities:
                fresh = self._fresh(load, name, active, now)
                if fresh is None:
                    continue
                usage, expiry = fresh
                valid_until = min(valid_until, expiry)
                total += (1.0 - usage) * weight * float(MAX_SCORE)
            base = _go_int(total / self._weight_sum)
        hot = 0.0
        if load.hot is not None:
            value, stamp = load.hot
            expiry = stamp + HOT_VALUE_ACTIVE_PERIOD
            if now < expiry:
                hot = value
                valid_until = min(valid_until, expiry)
        score = min(MAX_SCORE, max(MIN_SCORE, base - _go_int(hot * 10)))
        return Verdict(score, overloaded, now, valid_until)

    def fresh_oversubscription(self, load: NodeLoad, now: float) -> ann.Oversubscription | None:
        """The node's lendable capacity, while its agent is known to be answering.

        The agent's annotations carry no time (it publishes 0 itself when its sampling stalls or it stops,
        but a dead node keeps its last values), so their freshness is that of the node's load annotations:
        those are written only from a sample polled in that cycle. The capacity counts while the newest of
        them is younger than `oversubscription_active` (the shortest sync period plus crane's 5 minutes);
        with no sync metric configured, as the agent published it."""
        if load.oversubscription is None:
            return None
        if not self.metric_names:
            return load.oversubscription
        newest = max((stamp for _, stamp in load.metrics.values()), default=None)
        return load.oversubscription if newest is not None and now < newest + self.oversubscription_active else None


class _Entry:
    __slots__ = ("key", "load", "verdict")

    def __init__(self, key: tuple[object, ...], load: NodeLoad) -> None:
        self.key = key
        self.load = load
        self.verdict: Verdict | None = None


class ScoreBoard:
    """Thread-safe cache of every node's parsed annotations and current verdict."""

    def __init__(self, scorer: Scorer, *, on_rejected: Callable[[str, str], None] | None = None) -> None:
        """`on_rejected(node, reason)`: the node's published capacity changed to something not taken."""
        self.scorer = scorer
        self.on_rejected = on_rejected
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def update_node(self, node: Mapping[str, Any]) -> None:
        """Feed a Node object (informer event or patch response)."""
        name = node_name(node)
        if name is None:
            return
        anns = node_annotations(node)
        key = self.scorer.relevant(anns, allocatable_raw(node))
        with self._lock:
            old = self._entries.get(name)
            if old is not None and old.key == key:
                return
            load = self.scorer.parse(anns, node_allocatable(node))
            self._entries[name] = _Entry(key, load)
        if load.rejected is not None and self.on_rejected is not None:
            self.on_rejected(name, load.rejected)

    def remove_node(self, name: str) -> None:
        with self._lock:
            self._entries.pop(name, None)

    def names(self) -> list[str]:
        with self._lock:
            return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def load(self, name: str) -> NodeLoad | None:
        entry = self._entries.get(name)
        return entry.load if entry is not None else None

    def verdict(self, name: str, now: float) -> Verdict | None:
        """The node's verdict at `now`, or None for a node we have never seen."""
        entry = self._entries.get(name)
        if entry is None:
            return None
        v = entry.verdict
        if v is None or now >= v.valid_until or now < v.computed_at:
            v = self.scorer.evaluate(name, entry.load, now)
            entry.verdict = v
        return v

    def verdict_for(self, node: Mapping[str, Any], now: float) -> Verdict:
        """Verdict for a Node object, using the cache when we know the node, else its own annotations."""
        name = node_name(node) or ""
        cached = self.verdict(name, now)
        if cached is not None:
            return cached
        return self.scorer.evaluate(name, self.scorer.parse(node_annotations(node)), now)
