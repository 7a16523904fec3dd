"""The replay: every policy on every node, each node-step scored against the peak oracle.

A node is replayed on its own (`replay_node`: its rows in, each policy's partial tallies out), so the nodes
can be replayed one after another in one process, in `--jobs` processes, or on a distributed engine's workers
(`colo_sim.executors`); the partial tallies are merged in node order whatever finished first, so the result
is the same byte for byte. A node-step is scored when its whole horizon lies within the trace (the last H of
the trace only serves the oracle) and its time is within [since, until) when given; the policies always see
the trace from its start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial

from agent.capacity.lendable import CapacityParams
from colo_sim.arguments import MAX_SPAN_S
from colo_sim.columns import Intake, Pods
from colo_sim.measures import Part, Tally
from colo_sim.node_plan import NodeSpec, Plan, plan_rows
from colo_sim.packing import NodeSize
from colo_sim.policies import POLICY_NAMES, Lending, Runner, colo, koordinator, maximum, oracle, volcano
from colo_sim.timeline import NodeTrace, Timeline, intake_samples, node_trace
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
    max_span_s: float = MAX_SPAN_S
    #: the policies replayed and reported, in POLICY_NAMES' order (the oracle is computed whatever: it scores)
    policies: tuple[str, ...] = POLICY_NAMES


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
        return {
            "nodes": self.nodes,
            "pods": self.pods,
            "steps": self.steps,
            "horizon_s": self.horizon_s,
            "skipped_rows": self.skipped_rows,
            "policies": self.policies,
        }


@dataclass(frozen=True, slots=True)
class NodeTask:
    """Everything one node's replay needs; picklable, so it runs in any process."""

    spec: NodeSpec
    grid: Timeline
    lo: int
    hi: int
    horizon_s: float
    colo: CapacityParams
    series: bool  # also return the node's series (for the plot)
    policies: tuple[str, ...] = POLICY_NAMES


@dataclass(slots=True)
class NodeOutcome:
    """One node's partial tallies (policy -> resource -> Part), its total CPU usage (to choose the plotted
    node) and, when asked, its series."""

    parts: dict[str, dict[str, Part]]
    cpu_usage_total: float
    series: NodeSeries | None


def runners(params: CapacityParams, policies: tuple[str, ...] = POLICY_NAMES) -> list[Runner]:
    """The runners that compute `policies` (a runner computes all of its policies, or the paper's asked)."""
    out: list[Runner] = []
    if "colo" in policies or "colo-annotation" in policies:
        out.append(partial(colo.run, params=params))
    out += [run for name, run in (("koordinator", koordinator.run), ("volcano", volcano.run)) if name in policies]
    paper = tuple(name for name in maximum.PAPER if name in policies)
    if paper:
        out.append(partial(maximum.run, policies=paper))
    return out


def scored_range(grid: Timeline, settings: Settings) -> tuple[int, int]:
    """Steps [lo, hi) scored: the horizon within the trace, the time within [since, until)."""
    width = oracle.width(settings.horizon_s, grid.step)
    lo, hi = 0, grid.steps - width + 1
    if settings.since is not None:
        lo = max(lo, int(-(-(settings.since - grid.t0) // grid.step)))
    if settings.until is not None:
        hi = min(hi, int(-(-(settings.until - grid.t0) // grid.step)))
    return lo, max(lo, hi)


def tasks(plan: Plan, settings: Settings, series: bool) -> Iterator[NodeTask]:
    lo, hi = scored_range(plan.grid, settings)
    for spec in plan.nodes:
        yield NodeTask(spec, plan.grid, lo, hi, settings.horizon_s, settings.colo, series, settings.policies)


def replay_node(task: NodeTask) -> NodeOutcome:
    """Every policy on one node, scored on the steps [task.lo, task.hi)."""
    names, rows = task.spec.rows.load()
    node = node_trace(task.spec.name, task.spec.size, [pod for _, pod in names], rows, task.grid)
    del rows
    best = oracle.lend(node, task.grid, task.horizon_s)
    lent: dict[str, Lending] = {"oracle": best}
    for runner in runners(task.colo, task.policies):
        lent.update(runner(node, task.grid))
    parts = {
        name: {
            r: Tally.part(lent[name][j], best[j], node.allocatable(r), task.lo, task.hi)
            for j, r in enumerate(RESOURCES)
        }
        for name in task.policies
    }
    series = _series(node, task.grid, best, lent["colo"]) if task.series and "colo" in lent else None
    return NodeOutcome(parts, sum(node.sums("cpu")[0]), series)


def merge(
    plan: Plan,
    settings: Settings,
    outcomes: Iterable[NodeOutcome],
    progress: Callable[[int, int], None] | None = None,
) -> Result:
    """The result from every node's outcome, taken in node order (the sums then do not depend on which node
    finished first)."""
    lo, hi = scored_range(plan.grid, settings)
    tallies = {name: {r: Tally() for r in RESOURCES} for name in settings.policies}
    example: tuple[tuple[float, str], NodeSeries | None] | None = None
    total = len(plan.nodes)
    for i, (spec, outcome) in enumerate(zip(plan.nodes, outcomes, strict=True)):
        if progress is not None:
            progress(i, total)
        for name in settings.policies:
            for r in RESOURCES:
                tallies[name][r].merge(outcome.parts[name][r])
        key = (outcome.cpu_usage_total, spec.name)
        if example is None or key > example[0]:
            example = (key, outcome.series)
    if progress is not None:
        progress(total, total)
    policies = {name: {r: tallies[name][r].summary(plan.grid.step, r) for r in RESOURCES} for name in settings.policies}
    return Result(
        total,
        plan.pods,
        hi - lo,
        settings.horizon_s,
        plan.grid.step,
        dict(plan.skipped),
        policies,
        example[1] if example else None,
    )


def run_plan(
    plan: Plan,
    settings: Settings,
    progress: Callable[[int, int], None] | None = None,
    series: bool = True,
    executor: Callable[[Iterable[NodeTask]], Iterator[NodeOutcome]] | None = None,
) -> Result:
    """Replay every node of `plan` with `executor` (default: one after another in this process)."""
    work = tasks(plan, settings, series)
    return merge(plan, settings, (executor or _in_process)(work), progress)


def _in_process(work: Iterable[NodeTask]) -> Iterator[NodeOutcome]:
    return map(replay_node, work)


def plan_samples(samples: Sequence[Sample], settings: Settings, skipped: dict[str, int] | None = None) -> Plan:
    """The plan of Sample records (a reader's or another source's; each pod's in time order)."""
    pods = Pods()
    intake = Intake(pods, keep=True, divisor=1.0)
    intake_samples(samples, pods, intake)
    plan = plan_rows(intake, pods, settings.node, settings.pack_to, settings.step_s, settings.max_span_s)
    for reason, n in (skipped or {}).items():
        plan.skipped[reason] = plan.skipped.get(reason, 0) + n
    plan.skipped = dict(sorted(plan.skipped.items()))
    return plan


def replay(
    samples: Sequence[Sample],
    settings: Settings,
    skipped: dict[str, int] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Result:
    """Replay `samples` (non-empty, each pod's in time order) through every policy, in this process."""
    return run_plan(plan_samples(samples, settings, skipped), settings, progress)


def _series(node: NodeTrace, grid: Timeline, best: Lending, colo_lent: Lending) -> NodeSeries:
    return NodeSeries(
        node.name,
        [grid.time(k) for k in range(grid.steps)],
        {r: node.allocatable(r) for r in RESOURCES},
        {r: node.sums(r)[0] for r in RESOURCES},
        {r: [float(x) for x in v] for r, v in zip(RESOURCES, best, strict=True)},
        {r: [float(x) for x in v] for r, v in zip(RESOURCES, colo_lent, strict=True)},
    )
