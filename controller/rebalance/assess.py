"""Steps 1 to 4 for one cycle, from node traits and the agents' node windows: usage, classes, confirmed
sources, the low nodes as destinations, the budget and whether anything may happen at all."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from controller.rebalance import anomaly
from controller.rebalance.budget import budget, gate
from controller.rebalance.fit import Destination
from controller.rebalance.node_levels import Limits, NodeClass, classify_node, effective_limits, over_resources
from controller.rebalance.plan import Source
from controller.rebalance.settings import RebalanceSettings
from controller.rebalance.traits import ZERO, Amounts, NodeTraits
from controller.rebalance.usage import node_usage, percent


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    traits: NodeTraits
    allocatable: Amounts
    usage: Amounts  # absolute
    pct: Amounts  # percent of allocatable
    cls: NodeClass
    abnormal_cycles: int


@dataclass(slots=True)
class Assessment:
    views: dict[str, NodeView]
    limits: Limits
    counts: dict[str, int]
    sources: list[Source]
    low: list[NodeView]
    budget: Amounts
    gate: str | None
    unknown: list[str] = field(default_factory=list)  # nodes without a fresh usage


def absolute(pct: Amounts, allocatable: Amounts) -> Amounts:
    return Amounts(pct.cpu * allocatable.cpu / 100.0, pct.memory * allocatable.memory / 100.0)


def assess(
    nodes: Mapping[str, NodeTraits | None],
    ratios: Mapping[str, tuple[float | None, float | None]],
    previous_counts: Mapping[str, int],
    cfg: RebalanceSettings,
    settling: Collection[str] = (),
) -> Assessment:
    """`nodes`: every known node's traits; `ratios`: (cpu, memory) window ratios of the nodes polled now;
    `settling`: nodes that recently lost pods (never confirmed while their window still holds them)."""
    usages: dict[str, tuple[NodeTraits, Amounts, Amounts]] = {}
    unknown: list[str] = []
    for name, traits in nodes.items():
        cpu, mem = ratios.get(name, (None, None))
        usage = node_usage(traits, cpu, mem)
        if usage is None or traits is None or traits.allocatable is None:
            unknown.append(name)
            continue
        usages[name] = (traits, usage, percent(usage, traits.allocatable))
    low_cfg, high_cfg = cfg.low_thresholds, cfg.high_thresholds
    limits = effective_limits(
        Amounts(low_cfg.cpu, low_cfg.memory),
        Amounts(high_cfg.cpu, high_cfg.memory),
        {n: u[2] for n, u in usages.items()},
        deviation=cfg.use_deviation_thresholds,
    )
    classes = {name: classify_node(pct, limits) for name, (_, _, pct) in usages.items()}
    counts = anomaly.next_counts(previous_counts, [n for n, c in classes.items() if c == "high"], settling)
    views = {
        name: NodeView(name, traits, traits.allocatable, usage, pct, classes[name], counts.get(name, 0))
        for name, (traits, usage, pct) in usages.items()
        if traits.allocatable is not None
    }
    sources = [
        Source(v.name, v.allocatable, v.usage, absolute(limits.high, v.allocatable), over_resources(v.pct, limits.high))
        for v in (views[n] for n in anomaly.confirmed(counts, cfg.consecutive_abnormalities))
    ]
    low = sorted((v for v in views.values() if v.cls == "low"), key=lambda v: (max(v.pct.cpu, v.pct.memory), v.name))
    total = budget((v.usage, absolute(limits.high, v.allocatable)) for v in low)
    return Assessment(
        views, limits, counts, sources, low, total, gate(len(low), len(sources), cfg.number_of_nodes), sorted(unknown)
    )


def destinations(low: Iterable[NodeView], limits: Limits, requested: Mapping[str, Amounts]) -> list[Destination]:
    """The low nodes as destinations (`fit.DestinationPool` tries them most room first)."""
    return [
        Destination(
            v.name, v.traits, v.allocatable, v.usage, absolute(limits.high, v.allocatable), requested.get(v.name, ZERO)
        )
        for v in low
    ]
