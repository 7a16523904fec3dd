"""The replay's time grid and one node's samples placed on it.

Steps: ``t_k = t0 + k * step`` with ``t0`` the trace's first sample time and ``step`` the most common
interval between a pod's consecutive samples (300 s for Bitbrains) unless given. A sample at time ``t``
belongs to step ``floor((t - t0) / step)``; when a pod has two samples in one step the later one counts.
A pod without a sample at a step is not on its node at that step (the VM was off or unmonitored): it adds
no usage and no request there.

Nodes: pods with a node name stay on that node; the others are packed (`colo_sim.packing`). A node's
allocatable is the node size (`--node-cpu`, `--node-memory`), or its own where the source knows it
(Prometheus: `kube_node_status_allocatable`).

A policy sees one `NodeTrace` and the `Timeline` (the grid); the replay builds each node's trace from that
node's rows only (`node_trace`), so no more than one node's samples are held per process at a time.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from colo_sim.columns import Batch, Intake, Pods
from colo_sim.packing import NodeSize
from colo_sim.trace import Sample

#: One pod at one step: (pod index on its node, cpu request, cpu usage, memory request, memory usage).
PodStep = tuple[int, float, float, float, float]


@dataclass(slots=True)
class NodeTrace:
    """One node's pods over the steps. `present[k]` lists the pods with a sample at step k, in the order of
    their first sample in the step."""

    name: str
    cpu_cores: float
    memory_bytes: float
    pods: list[str]
    present: list[list[PodStep]]
    _sums: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)

    def allocatable(self, resource: str) -> float:
        return self.cpu_cores if resource == "cpu" else self.memory_bytes

    def sums(self, resource: str) -> tuple[list[float], list[float]]:
        """(Σ usage, Σ request) of the pods present at each step, each sum correctly rounded (math.fsum)."""
        got = self._sums.get(resource)
        if got is None:
            ri, ui = (1, 2) if resource == "cpu" else (3, 4)
            fsum = math.fsum
            use = [fsum([p[ui] for p in step]) for step in self.present]
            req = [fsum([p[ri] for p in step]) for step in self.present]
            got = self._sums[resource] = (use, req)
        return got


@dataclass(slots=True)
class Timeline:
    """The steps every node shares. `nodes` and `pods` are filled only by `build` (the whole trace at once, for
    tests and small traces); the replay hands policies a grid without them."""

    t0: float
    step: float
    steps: int
    nodes: list[NodeTrace] = field(default_factory=list)
    pods: int = 0

    def time(self, k: int) -> float:
        return self.t0 + k * self.step


def infer_step(gaps: Counter[int]) -> float:
    """The most common interval (whole seconds) between a pod's consecutive samples, the longer on a tie; 1 s
    if none."""
    positive = [(n, g) for g, n in gaps.items() if g > 0]
    return float(max(positive)[1]) if positive else 1.0


def node_trace(name: str, size: NodeSize, pods: Sequence[str], rows: Batch, grid: Timeline) -> NodeTrace:
    """The trace of one node from its rows (input order; `rows.code` indexes `pods`, the pods' names)."""
    n = len(rows)
    uniq, first, inverse = np.unique(rows.code, return_index=True, return_inverse=True)
    rank = np.empty(len(uniq), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(uniq))
    local = rank[inverse.reshape(-1)]  # each row's pod index on the node, by first sample
    names = [""] * len(uniq)
    for u, r in zip(uniq.tolist(), rank.tolist(), strict=True):
        names[r] = pods[u]
    k = np.floor_divide(rows.t - grid.t0, grid.step).astype(np.int64)
    by_step = np.argsort(k, kind="stable")  # input order within a step
    k_sorted, local_sorted = k[by_step], local[by_step]
    take = by_step
    pair = k_sorted * max(1, len(uniq)) + local_sorted
    distinct, first_at = np.unique(pair, return_index=True)
    if len(distinct) != n:  # a pod with two samples in one step: its place is the first's, its values the later's
        _, last_rev = np.unique(pair[::-1], return_index=True)
        last_at = n - 1 - last_rev
        keep = np.argsort(first_at, kind="stable")
        k_sorted, local_sorted = k_sorted[first_at[keep]], local_sorted[first_at[keep]]
        take = by_step[last_at[keep]]
    counts = np.bincount(k_sorted, minlength=grid.steps)
    bounds = [0, *np.cumsum(counts).tolist()]
    entries: list[PodStep] = list(
        zip(
            local_sorted.tolist(),
            rows.cpu_request[take].tolist(),
            rows.cpu_usage[take].tolist(),
            rows.memory_request[take].tolist(),
            rows.memory_usage[take].tolist(),
            strict=True,
        )
    )
    present = [entries[bounds[i] : bounds[i + 1]] for i in range(grid.steps)]
    return NodeTrace(name, size.cpu_cores, size.memory_bytes, names, present)


def intake_samples(samples: Sequence[Sample], pods: Pods, intake: Intake) -> None:
    """Feed `samples` (a reader's or another source's Sample records) to `intake` as one batch."""
    code = np.fromiter((pods.code(s.node, s.pod) for s in samples), np.int64, len(samples))
    values = np.array(
        [
            (s.unix_s, s.cpu_request_cores, s.cpu_usage_cores, s.memory_request_bytes, s.memory_usage_bytes)
            for s in samples
        ],
        np.float64,
    ).reshape(-1, 5)
    intake.add(Batch(code, *(np.ascontiguousarray(values[:, i]) for i in range(5))))
