"""The replay's time grid and its nodes: samples placed on steps, pods placed on nodes.

Steps: ``t_k = t0 + k * step`` with ``t0`` the trace's first sample time and ``step`` the most common
interval between a pod's consecutive samples (300 s for Bitbrains) unless given. A sample at time ``t``
belongs to step ``floor((t - t0) / step)``; when a pod has two samples in one step the later one counts.
A pod without a sample at a step is not on its node at that step (the VM was off or unmonitored): it adds
no usage and no request there.

Nodes: pods with a node name stay on that node; the others are packed (`colo_sim.packing`). Every node's
allocatable is the node size (`--node-cpu`, `--node-memory`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from colo_sim.packing import NodeSize, pack
from colo_sim.trace import Sample

#: One pod at one step: (pod index on its node, cpu request, cpu usage, memory request, memory usage).
PodStep = tuple[int, float, float, float, float]


@dataclass(slots=True)
class NodeTrace:
    """One node's pods over the steps. `present[k]` lists the pods with a sample at step k."""

    name: str
    cpu_cores: float
    memory_bytes: float
    pods: list[str]
    present: list[list[PodStep]]
    _sums: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)

    def allocatable(self, resource: str) -> float:
        return self.cpu_cores if resource == "cpu" else self.memory_bytes

    def sums(self, resource: str) -> tuple[list[float], list[float]]:
        """(Σ usage, Σ request) of the pods present at each step."""
        got = self._sums.get(resource)
        if got is None:
            ri, ui = (1, 2) if resource == "cpu" else (3, 4)
            use = [math.fsum(p[ui] for p in step) for step in self.present]
            req = [math.fsum(p[ri] for p in step) for step in self.present]
            got = self._sums[resource] = (use, req)
        return got


@dataclass(slots=True)
class Timeline:
    t0: float
    step: float
    steps: int
    nodes: list[NodeTrace]
    pods: int

    def time(self, k: int) -> float:
        return self.t0 + k * self.step


def infer_step(samples: Sequence[Sample]) -> float:
    """The most common interval (whole seconds) between a pod's consecutive samples; 1 s if none."""
    last: dict[tuple[str, str], float] = {}
    gaps: Counter[float] = Counter()
    for s in samples:
        key = (s.node, s.pod)
        prev = last.get(key)
        if prev is not None:
            gaps[round(s.unix_s - prev)] += 1
        last[key] = s.unix_s
    positive = [(n, g) for g, n in gaps.items() if g > 0]
    return float(max(positive)[1]) if positive else 1.0


def build(samples: Sequence[Sample], size: NodeSize, pack_to: float, step: float | None = None) -> Timeline:
    """The timeline of `samples` (non-empty, each pod's in time order)."""
    step = step or infer_step(samples)
    t0 = min(s.unix_s for s in samples)
    t_end = max(s.unix_s for s in samples)
    steps = int((t_end - t0) // step) + 1
    largest: dict[str, list[float]] = {}
    for s in samples:
        if not s.node:
            got = largest.get(s.pod)
            if got is None:
                largest[s.pod] = [s.cpu_request_cores, s.memory_request_bytes]
            else:
                if s.cpu_request_cores > got[0]:
                    got[0] = s.cpu_request_cores
                if s.memory_request_bytes > got[1]:
                    got[1] = s.memory_request_bytes
    packed = pack({p: (v[0], v[1]) for p, v in largest.items()}, size, pack_to)
    named = sorted({s.node for s in samples if s.node})
    names = named + [f"packed-{i:03d}" for i in range(max(packed.values(), default=-1) + 1)]
    index = {name: i for i, name in enumerate(names)}
    nodes = [NodeTrace(n, size.cpu_cores, size.memory_bytes, [], [[] for _ in range(steps)]) for n in names]
    pod_slot: dict[tuple[str, str], tuple[NodeTrace, int]] = {}
    last_k: dict[tuple[str, str], int] = {}
    for s in samples:
        key = (s.node, s.pod)
        slot = pod_slot.get(key)
        if slot is None:
            node = nodes[index[s.node] if s.node else len(named) + packed[s.pod]]
            slot = pod_slot[key] = (node, len(node.pods))
            node.pods.append(s.pod)
        node, i = slot
        k = int((s.unix_s - t0) // step)
        row = (i, s.cpu_request_cores, s.cpu_usage_cores, s.memory_request_bytes, s.memory_usage_bytes)
        at = node.present[k]
        if last_k.get(key) == k:
            at[-1] = row  # two samples in one step: the later one counts
        else:
            at.append(row)
            last_k[key] = k
    return Timeline(t0, step, steps, nodes, len(pod_slot))
