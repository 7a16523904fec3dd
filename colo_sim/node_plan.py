"""Which nodes the replay has and where each node's rows are, decided from the whole trace's summary.

`plan_rows` is for rows held in memory (a CSV file, a Parquet file, a Prometheus pull): the rows are grouped
by node once, and each node's task carries its own rows only. `colo_sim.parquet_trace.plan_dataset` is for a
dataset partitioned by node: each task names the node's files and the process that replays it reads them.
Both place unplaced pods with `colo_sim.packing` and fix the grid (`colo_sim.timeline.Timeline`).

A trace whose times span more than `max_span_s` (a year by default, `--max-span`) is refused before any
step is allocated: one row with a wild time would otherwise make every node's grid millions of steps long.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from colo_sim.arguments import MAX_SPAN_S
from colo_sim.columns import Batch, Intake, Pods, Summary
from colo_sim.packing import NodeSize, pack
from colo_sim.timeline import Timeline, infer_step, intake_samples, node_trace
from colo_sim.trace import Sample, TraceError


class NodeRows(Protocol):
    """Where one node's rows are; `load` runs in the process that replays the node."""

    def load(self) -> tuple[list[tuple[str, str]], Batch]:
        """(the (node, pod) names that `code` indexes, the node's rows in input order)."""
        ...


@dataclass(frozen=True, slots=True)
class InlineRows:
    """A node's rows carried with its task (pickled to a worker)."""

    names: list[tuple[str, str]]
    rows: Batch

    def load(self) -> tuple[list[tuple[str, str]], Batch]:
        return self.names, self.rows


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    size: NodeSize
    rows: NodeRows


@dataclass(slots=True)
class Plan:
    grid: Timeline
    nodes: list[NodeSpec]
    pods: int
    samples: int
    skipped: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def grid_of(summary: Summary, pods: Pods, step: float | None, max_span_s: float) -> Timeline:
    """The grid of the whole trace; TraceError naming the row that stretches it beyond `max_span_s`."""
    span = summary.t_end - summary.t0
    if span > max_span_s:
        seen = summary.count > 0  # the wild row is the end farther from the pods' typical first and last times
        wild_late = (
            summary.t_end - float(np.median(summary.last_t[seen]))
            >= float(np.median(summary.first_t[seen])) - summary.t0
        )
        code, t = (summary.last_pod, summary.t_end) if wild_late else (summary.first_pod, summary.t0)
        node, pod = pods.names[code]
        where = f"pod {pod!r}" + (f" on node {node!r}" if node else "")
        raise TraceError(
            f"the row of {where} at unix_s {t:.0f} ({_iso(t)}) makes the trace span "
            f"{span / 86400:.0f} days ({_iso(summary.t0)} to {_iso(summary.t_end)}), beyond the "
            f"{max_span_s / 86400:g}-day limit: remove the row or raise --max-span"
        )
    step = step or infer_step(summary.gaps)
    return Timeline(summary.t0, step, int((summary.t_end - summary.t0) // step) + 1)


def _iso(t: float) -> str:
    try:
        return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%d %H:%M")
    except (OverflowError, OSError, ValueError):
        return "beyond the calendar"


def packed_nodes(pods: Pods, summary: Summary, size: NodeSize, pack_to: float) -> dict[int, int]:
    """Packed node index of every unplaced pod's code."""
    largest = {
        pods.names[c][1]: (float(summary.largest_cpu[c]), float(summary.largest_memory[c]))
        for c in range(len(pods))
        if not pods.names[c][0] and summary.count[c] > 0
    }
    by_pod = pack(largest, size, pack_to)
    return {c: by_pod[pods.names[c][1]] for c in range(len(pods)) if not pods.names[c][0] and summary.count[c] > 0}


def node_names(named: list[str], packed: dict[int, int]) -> list[str]:
    return sorted(named) + [f"packed-{i:03d}" for i in range(max(packed.values(), default=-1) + 1)]


def plan_rows(
    intake: Intake,
    pods: Pods,
    size: NodeSize,
    pack_to: float,
    step: float | None = None,
    max_span_s: float = MAX_SPAN_S,
    sizes: dict[str, NodeSize] | None = None,
) -> Plan:
    """The plan of rows held by `intake` (kept): nodes named by the rows, then the packed ones."""
    summary = intake.summary
    if summary.samples == 0:
        raise TraceError("no usable row")
    grid = grid_of(summary, pods, step, max_span_s)
    packed = packed_nodes(pods, summary, size, pack_to)
    seen = np.flatnonzero(summary.count > 0).tolist()
    named = sorted({pods.names[c][0] for c in seen if pods.names[c][0]})
    names = node_names(named, packed)
    index = {name: i for i, name in enumerate(names)}
    node_of = np.array(
        [index[node] if node else len(named) + packed.get(c, 0) for c, (node, _) in enumerate(pods.names)], np.int64
    )
    grouped = intake.rows()
    where = node_of[grouped.code]
    bounds = [0, *np.cumsum(np.bincount(where, minlength=len(names))).tolist()]
    order = np.argsort(where, kind="stable")
    del where
    grouped.reorder(order)
    del order
    specs = []
    for i, name in enumerate(names):
        part = grouped.take(slice(bounds[i], bounds[i + 1]))  # type: ignore[arg-type]
        specs.append(NodeSpec(name, (sizes or {}).get(name, size), _local(part, pods)))
    pods_seen = int((summary.count > 0).sum())
    return Plan(grid, specs, pods_seen, summary.samples, dict(sorted(intake.skipped.items())), intake.warnings)


def _local(rows: Batch, pods: Pods) -> InlineRows:
    """The rows with codes renumbered 0.. over this node's pods only (what a worker needs of the names)."""
    uniq, inverse = np.unique(rows.code, return_inverse=True)
    local = Batch(
        inverse.reshape(-1).astype(np.int64),
        rows.t,
        rows.cpu_request,
        rows.cpu_usage,
        rows.memory_request,
        rows.memory_usage,
    )
    return InlineRows([pods.names[c] for c in uniq.tolist()], local)


def build(samples: Sequence[Sample], size: NodeSize, pack_to: float, step: float | None = None) -> Timeline:
    """The timeline of `samples` (non-empty, each pod's in time order) with every node built at once."""
    pods = Pods()
    intake = Intake(pods, keep=True, divisor=1.0)
    intake_samples(samples, pods, intake)
    plan = plan_rows(intake, pods, size, pack_to, step)
    grid = plan.grid
    nodes = []
    for spec in plan.nodes:
        names, rows = spec.rows.load()
        nodes.append(node_trace(spec.name, spec.size, [p for _, p in names], rows, grid))
    return Timeline(grid.t0, grid.step, grid.steps, nodes, plan.pods)
