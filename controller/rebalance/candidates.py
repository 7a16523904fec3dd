"""Step 5: which pods on a source node may be evicted, and in what order.

Filters (the first that applies is the skip reason): not a known, active pod of this node; owned by a
DaemonSet; a mirror/static pod; priority at or above `priority_below` (system-critical pods never);
excluded namespace; not matching the pod selectors; local storage (emptyDir, hostPath) or no owner,
unless allowed; no usage of any resource over its threshold (evicting it would not help).
Order: offline before online, then lower priority, then higher usage of the resource furthest over its
threshold (then of the other), then namespace/name so that plans are reproducible.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from common.label_selector import matches_any
from controller.rebalance.facts import RESOURCES, Amounts, PodFacts
from controller.rebalance.settings import RebalanceSettings


@dataclass(frozen=True, slots=True)
class Candidate:
    facts: PodFacts
    usage: Amounts

    @property
    def key(self) -> str:
        return f"{self.facts.namespace}/{self.facts.name}"


@dataclass(frozen=True, slots=True)
class Skipped:
    pod: str  # namespace/name
    reason: str


def skip_reason(
    facts: PodFacts | None, usage: Amounts, node: str, over: tuple[str, ...], cfg: RebalanceSettings
) -> str | None:
    """Why this pod is not a candidate, or None."""
    if facts is None or facts.node != node:
        return "unknown_pod"
    if not facts.active:
        return "not_running"
    if "DaemonSet" in facts.owner_kinds:
        return "daemonset"
    if facts.mirror:
        return "mirror_pod"
    if facts.priority >= cfg.priority_below:
        return "priority"
    if facts.namespace in cfg.excluded_namespaces:
        return "excluded_namespace"
    if not matches_any(cfg.pod_selectors, facts.labels):
        return "not_selected"
    if facts.local_storage and not cfg.evict_local_storage_pods:
        return "local_storage"
    if not facts.owner_kinds and not cfg.evict_bare_pods:
        return "no_owner"
    for r in over:  # (a loop, not any(): this runs for every pod of every source)
        if usage.get(r) > 0:
            return None
    return "no_relief"


def order_key(c: Candidate, ranked: tuple[str, ...]) -> tuple[object, ...]:
    """`ranked`: the resources over their threshold, worst first, then the others."""
    f, u = c.facts, c.usage
    return (0 if f.offline else 1, f.priority, -u.get(ranked[0]), -u.get(ranked[1]), f.namespace, f.name)


def candidates(
    pods: Iterable[tuple[PodFacts | None, str, Amounts]],
    node: str,
    over: tuple[str, ...],
    cfg: RebalanceSettings,
) -> tuple[list[Candidate], list[Skipped]]:
    """Ordered candidates and skipped pods of one source node from (facts, namespace/name, usage)."""
    kept: list[Candidate] = []
    skipped: list[Skipped] = []
    for facts, key, usage in pods:
        reason = skip_reason(facts, usage, node, over, cfg)
        if reason is not None or facts is None:
            skipped.append(Skipped(key, reason or "unknown_pod"))
        else:
            kept.append(Candidate(facts, usage))
    ranked = over + tuple(r for r in RESOURCES if r not in over)
    kept.sort(key=lambda c: order_key(c, ranked))
    return kept, skipped
