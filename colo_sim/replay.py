"""The replay: every policy on every node, each node-step scored against the peak oracle.

`replay` takes any sequence of `colo_sim.trace.Sample` (a CSV reader's or another source's), places them on
steps and nodes (`colo_sim.timeline`) and returns the summary `colo_sim.report` prints. A node-step is
scored when its whole horizon lies within the trace (the last H of the trace only serves the oracle) and
its time is within [since, until) when given; the policies always see the trace from its start.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from agent.capacity.lendable import CapacityParams
from colo_sim.measures import Tally
from colo_sim.packing import NodeSize
from colo_sim.policies import POLICY_NAMES, Lending, Runner, colo, koordinator, maximum, oracle, volcano
from colo_sim.timeline import NodeTrace, Timeline, build
from colo_sim.trace import Sample

RESOURCES = ("cpu", "memory")


@dataclass(frozen=True, slots=True)
class Settings:
    node: NodeSize = field(default_factory=lambda: NodeSize(32.0, 256.0 * (1 << 30)))
    pack_to: float = 1.0
    horizon_s: float = 3600.0
    step_s: float | None = None  # None: inferred from the trace
    since: float | None = None  # unix seconds: score steps at or after
    until: float | None = None  # unix seconds: score steps before
    colo: CapacityParams = field(default_factory=CapacityParams)


@dataclass(slots=True)
class NodeSeries:
    """One node's online usage, oracle and colo capacity per step (for the plot)."""

    name: str
    times: list[float]
    allocatable: dict[str, float]
    usage: dict[str, list[float]]
    oracle: dict[str, list[float]]
    colo: dict[str, list[float]]


@dataclass(slots=True)
class Result:
    nodes: int
    pods: int
    steps: int  # scored steps per node
    horizon_s: float
    step_s: float
    skipped_rows: dict[str, int]
    policies: dict[str, dict[str, dict[str, float]]]
    example: NodeSeries | None = None

    def as_json(self) -> dict[str, object]:
        return {"nodes": self.nodes, "pods": self.pods, "steps": self.steps, "horizon_s": self.horizon_s,
                "skipped_rows": self.skipped_rows, "policies": self.policies}  # fmt: skip


def runners(settings: Settings) -> list[Runner]:
    return [partial(colo.run, params=settings.colo), koordinator.run, volcano.run, maximum.run]


def scored_range(timeline: Timeline, settings: Settings) -> tuple[int, int]:
    """Steps [lo, hi) scored: the horizon within the trace, the time within [since, until)."""
    width = oracle.width(settings.horizon_s, timeline.step)
    lo, hi = 0, timeline.steps - width + 1
    if settings.since is not None:
        lo = max(lo, int(-(-(settings.since - timeline.t0) // timeline.step)))
    if settings.until is not None:
        hi = min(hi, int(-(-(settings.until - timeline.t0) // timeline.step)))
    return lo, max(lo, hi)


def replay(
    samples: Sequence[Sample],
    settings: Settings,
    skipped: dict[str, int] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Result:
    """Replay `samples` (non-empty, each pod's in time order) through every policy."""
    timeline = build(samples, settings.node, settings.pack_to, settings.step_s)
    lo, hi = scored_range(timeline, settings)
    tallies = {name: {r: Tally() for r in RESOURCES} for name in POLICY_NAMES}
    example_node = max(timeline.nodes, key=lambda n: (sum(n.sums("cpu")[0]), n.name))
    example: NodeSeries | None = None
    run = runners(settings)
    for i, node in enumerate(timeline.nodes):
        if progress is not None:
            progress(i, len(timeline.nodes))
        best = oracle.lend(node, timeline, settings.horizon_s)
        lent: dict[str, Lending] = {"oracle": best}
        for runner in run:
            lent.update(runner(node, timeline))
        for name in POLICY_NAMES:
            for j, resource in enumerate(RESOURCES):
                tallies[name][resource].add(lent[name][j], best[j], node.allocatable(resource), lo, hi)
        if node is example_node:
            example = _series(node, timeline, best, lent["colo"])
        node.present = []  # the node's samples are no longer needed
    if progress is not None:
        progress(len(timeline.nodes), len(timeline.nodes))
    policies = {name: {r: tallies[name][r].summary(timeline.step, r) for r in RESOURCES} for name in POLICY_NAMES}
    return Result(len(timeline.nodes), timeline.pods, hi - lo, settings.horizon_s, timeline.step,
                  dict(skipped or {}), policies, example)  # fmt: skip


def _series(node: NodeTrace, timeline: Timeline, best: Lending, colo_lent: Lending) -> NodeSeries:
    return NodeSeries(
        node.name,
        [timeline.time(k) for k in range(timeline.steps)],
        {r: node.allocatable(r) for r in RESOURCES},
        {r: node.sums(r)[0] for r in RESOURCES},
        dict(zip(RESOURCES, best, strict=True)),
        dict(zip(RESOURCES, colo_lent, strict=True)),
    )
