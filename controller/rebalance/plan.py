"""Step 7: walk the sources, most overloaded first, and evict candidates that fit somewhere.

Pure apart from `attempt`, which the caller supplies: the real Eviction call, or "dry_run". For each
source, while it is over a high threshold: stop when the budget of any resource is used up or
`max_evictions_per_cycle` is reached; go to the next source at `max_evictions_per_node`; skip a pod whose
namespace reached `max_evictions_per_namespace` or that no low node can take; a refused eviction (429
from a PodDisruptionBudget, another refusal) moves on to the next candidate, an API server that does not
answer stops the cycle. After each eviction (or planned
eviction, in a dry run) the source's usage and the budget drop by the pod's usage and the destination
reserves its requests and usage. Losing the lease stops everything.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from controller.rebalance.budget import exhausted
from controller.rebalance.candidates import Candidate
from controller.rebalance.fit import Destination, DestinationPool
from controller.rebalance.settings import RebalanceSettings
from controller.rebalance.traits import RESOURCES, ZERO, Amounts

Outcome = Literal["evicted", "dry_run", "blocked", "gone", "error", "unavailable", "not_leader"]
#: Outcomes after which the pod counts as moved (usage, budget and limits are charged).
MOVED: frozenset[str] = frozenset({"evicted", "dry_run"})
#: Outcomes that end the cycle's evictions: the lease is gone, or the API server did not answer (no point
#: in waiting out a timeout per remaining candidate; the next cycle tries again).
STOPS: frozenset[str] = frozenset({"not_leader", "unavailable"})


@dataclass(slots=True)
class Source:
    """A confirmed high node; `usage` falls with each eviction from it."""

    name: str
    allocatable: Amounts
    usage: Amounts
    high: Amounts  # absolute high thresholds
    over: tuple[str, ...]  # resources over their threshold at the start of the cycle, worst first

    def still_over(self) -> bool:
        return any(self.usage.get(r) > self.high.get(r) for r in RESOURCES)

    def worst_excess(self) -> float:
        return max((self.usage.get(r) - self.high.get(r)) / self.allocatable.get(r) for r in RESOURCES)


@dataclass(frozen=True, slots=True)
class Move:
    pod: str  # namespace/name
    uid: str
    source: str
    destination: str  # the low node whose room was reserved (the scheduler makes the real choice)
    reason: str  # the resources over their threshold on the source, e.g. "cpu" or "cpu,memory"
    usage: Amounts
    requests: Amounts
    source_before: Amounts  # source usage (absolute) before and after this move
    source_after: Amounts
    result: str


@dataclass(frozen=True, slots=True)
class NodeSkip:
    """A confirmed high node nothing was evicted from, and why (details: counts of per-pod reasons)."""

    node: str
    reason: str
    details: Mapping[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class PlanResult:
    moves: list[Move] = field(default_factory=list)
    skips: list[NodeSkip] = field(default_factory=list)
    acted_on: set[str] = field(default_factory=set)  # sources at least one pod left (or would leave)
    budget_left: Amounts = ZERO
    stopped: str | None = None  # why planning stopped before the last source, if it did


Attempt = Callable[[Candidate, Source, Destination, str], str]


def plan_moves(
    sources: Sequence[Source],
    candidates: Callable[[Source], Sequence[Candidate]],
    destinations: Sequence[Destination],
    budget: Amounts,
    cfg: RebalanceSettings,
    attempt: Attempt,
) -> PlanResult:
    """Evict (through `attempt`) until every source is under its thresholds or a limit is reached.

    `candidates(source)` is asked only for the sources planning reaches (the others are skipped with
    the reason planning stopped), so a cycle that hits its limit early costs little.
    """
    out = PlanResult(budget_left=budget)
    pool = DestinationPool(destinations)
    per_namespace: Counter[str] = Counter()
    total = 0
    for src in sorted(sources, key=lambda s: (-s.worst_excess(), s.name)):
        if out.stopped is not None:
            out.skips.append(NodeSkip(src.name, out.stopped))
            continue
        cands = candidates(src)
        if not cands:
            out.skips.append(NodeSkip(src.name, "no_candidates"))
            continue
        reason = ",".join(src.over)
        moved = 0
        misses: Counter[str] = Counter()
        for c in cands:
            if not src.still_over():
                break
            if exhausted(out.budget_left):
                out.stopped = "budget_exhausted"
                break
            if total >= cfg.max_evictions_per_cycle:
                out.stopped = "cycle_limit"
                break
            if moved >= cfg.max_evictions_per_node:
                break
            if per_namespace[c.traits.namespace] >= cfg.max_evictions_per_namespace:
                misses["namespace_limit"] += 1
                continue
            dest, why = pool.find(c.traits, c.usage)
            if dest is None:
                misses[f"no_fit_{why}"] += 1
                continue
            before = src.usage
            result = attempt(c, src, dest, reason)
            after = before - c.usage if result in MOVED else before
            out.moves.append(
                Move(
                    c.key, c.traits.uid, src.name, dest.name, reason, c.usage, c.traits.requests, before, after, result
                )
            )
            if result in MOVED:
                src.usage = after
                pool.reserve(dest, c.traits.requests, c.usage)
                out.budget_left = out.budget_left - c.usage
                moved += 1
                total += 1
                per_namespace[c.traits.namespace] += 1
                out.acted_on.add(src.name)
            elif result in STOPS:
                out.stopped = result
                break
            else:
                misses[result] += 1
        if moved == 0:
            if out.stopped is not None:
                out.skips.append(NodeSkip(src.name, out.stopped, dict(misses)))
            else:
                top = misses.most_common(1)
                out.skips.append(NodeSkip(src.name, top[0][0] if top else "no_candidates", dict(misses)))
    return out
