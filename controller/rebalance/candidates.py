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
from controller.rebalance.settings import RebalanceSettings
from controller.rebalance.traits import RESOURCES, Amounts, PodTraits


@dataclass(frozen=True, slots=True)
class Candidate:
    traits: PodTraits
    usage: Amounts

    @property
    def key(self) -> str:
        return f"{self.traits.namespace}/{self.traits.name}"


@dataclass(frozen=True, slots=True)
class Skipped:
    pod: str  # namespace/name
    reason: str


def skip_reason(
    traits: PodTraits | None, usage: Amounts, node: str, over: tuple[str, ...], cfg: RebalanceSettings
) -> str | None:
    """Why this pod is not a candidate, or None."""
    if traits is None or traits.node != node:
        return "unknown_pod"
    if not traits.active:
        return "not_running"
    if "DaemonSet" in traits.owner_kinds:
        return "daemonset"
    if traits.mirror:
        return "mirror_pod"
    if traits.priority >= cfg.priority_below:
        return "priority"
    if traits.namespace in cfg.excluded_namespaces:
        return "excluded_namespace"
    if not matches_any(cfg.pod_selectors, traits.labels):
        return "not_selected"
    if traits.local_storage and not cfg.evict_local_storage_pods:
        return "local_storage"
    if not traits.owner_kinds and not cfg.evict_bare_pods:
        return "no_owner"
    for r in over:  # (a loop, not any(): this runs for every pod of every source)
        if usage.get(r) > 0:
            return None
    return "no_relief"


def order_key(c: Candidate, ranked: tuple[str, ...]) -> tuple[object, ...]:
    """`ranked`: the resources over their threshold, worst first, then the others."""
    f, u = c.traits, c.usage
    return (0 if f.offline else 1, f.priority, -u.get(ranked[0]), -u.get(ranked[1]), f.namespace, f.name)


def candidates(
    pods: Iterable[tuple[PodTraits | None, str, Amounts]],
    node: str,
    over: tuple[str, ...],
    cfg: RebalanceSettings,
) -> tuple[list[Candidate], list[Skipped]]:
    """Ordered candidates and skipped pods of one source node from (traits, namespace/name, usage)."""
    kept: list[Candidate] = []
    skipped: list[Skipped] = []
    for traits, key, usage in pods:
        reason = skip_reason(traits, usage, node, over, cfg)
        if reason is not None or traits is None:
            skipped.append(Skipped(key, reason or "unknown_pod"))
        else:
            kept.append(Candidate(traits, usage))
    ranked = over + tuple(r for r in RESOURCES if r not in over)
    kept.sort(key=lambda c: order_key(c, ranked))
    return kept, skipped
