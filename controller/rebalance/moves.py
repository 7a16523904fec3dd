"""Steps 5 to 7 for one cycle, once the sources' pod usage is known: candidates, destinations, plan.

Pure apart from `attempt` (see plan.py), so that the benchmark and the tests run exactly what the
controller runs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.rebalance.assess import Assessment, destinations
from controller.rebalance.candidates import Candidate, candidates
from controller.rebalance.plan import Attempt, NodeSkip, PlanResult, Source, plan_moves
from controller.rebalance.settings import RebalanceSettings
from controller.rebalance.traits import TRAITS, Amounts, PodTraits
from controller.rebalance.usage import PodLoad

#: Looks a cached slim pod up by "namespace/name" (the pod informer's `get`).
Lookup = Callable[[str], Mapping[str, Any] | None]


@dataclass(slots=True)
class CycleOutcome:
    assessment: Assessment
    candidates: dict[str, list[Candidate]] = field(default_factory=dict)
    skipped_pods: dict[str, dict[str, int]] = field(default_factory=dict)  # source -> reason -> pods
    poll_failed: dict[str, str] = field(default_factory=dict)  # source -> why its pods could not be read
    plan: PlanResult = field(default_factory=PlanResult)


def requested_on(pods: Iterable[Mapping[str, Any]], nodes: set[str]) -> dict[str, Amounts]:
    """Σ requests of the active pods on each of `nodes`, from the slim cached pods."""
    cpu: dict[str, float] = {}
    mem: dict[str, float] = {}
    for pod in pods:  # every bound pod of the cluster: plain floats, no objects per pod
        traits = pod.get(TRAITS)
        if isinstance(traits, PodTraits) and traits.active and traits.node in nodes:
            cpu[traits.node] = cpu.get(traits.node, 0.0) + traits.requests.cpu
            mem[traits.node] = mem.get(traits.node, 0.0) + traits.requests.memory
    return {n: Amounts(c, mem[n]) for n, c in cpu.items()}


def _traits(lookup: Lookup, usage: PodLoad) -> PodTraits | None:
    obj = lookup(f"{usage.namespace}/{usage.name}")
    traits = obj.get(TRAITS) if obj is not None else None
    if not isinstance(traits, PodTraits) or (usage.uid and traits.uid and usage.uid != traits.uid):
        return None  # unknown to the informer, or a namesake that replaced the measured pod
    return traits


def select_and_plan(
    a: Assessment,
    usages: Mapping[str, list[PodLoad]],
    poll_failed: Mapping[str, str],
    lookup: Lookup,
    all_pods: Callable[[], Iterable[Mapping[str, Any]]],
    cfg: RebalanceSettings,
    attempt: Attempt,
) -> CycleOutcome:
    out = CycleOutcome(a, poll_failed=dict(poll_failed))
    if a.gate is not None:
        return out

    def candidates_of(src: Source) -> list[Candidate]:
        pods = [(_traits(lookup, u), f"{u.namespace}/{u.name}", u.usage) for u in usages.get(src.name, ())]
        kept, skipped = candidates(pods, src.name, src.over, cfg)
        out.candidates[src.name] = kept
        out.skipped_pods[src.name] = dict(Counter(s.reason for s in skipped))
        return kept

    if not any(usages.get(s.name) for s in a.sources):
        out.plan = plan_moves(a.sources, candidates_of, [], a.budget, cfg, attempt)
    else:
        low_names = {v.name for v in a.low}
        dests = destinations(a.low, a.limits, requested_on(all_pods(), low_names))
        out.plan = plan_moves(a.sources, candidates_of, dests, a.budget, cfg, attempt)
    out.plan.skips = [  # "no candidates" because the agent's pod list could not be read: say so
        NodeSkip(s.node, f"pods_unreadable_{poll_failed[s.node]}")
        if s.reason == "no_candidates" and s.node in poll_failed
        else s
        for s in out.plan.skips
    ]
    return out
