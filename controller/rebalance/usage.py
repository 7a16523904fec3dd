"""Step 1: node usage per resource from the agents' windows, and pods' usage from the agents' pod lists.

The agent's node windows are ratios of the host's CPUs and of MemTotal, which is what the kubelet reports
as the Node's capacity, so usage = ratio x capacity, compared against allocatable (koordinator's
LowNodeLoad works on the same percentage of allocatable). A node without a fresh value of the window
(no answer this cycle, no data yet) or without capacity/allocatable has no usage: neither source nor
destination.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from contract.windows import NODE_WINDOW_PREFIX, POD_WINDOW_FIELD
from controller.rebalance.facts import Amounts, NodeFacts


def node_window_names(window: str) -> tuple[str, str]:
    """The crane-style names of the agent's node windows for CPU and memory (`cpu_usage_avg_5m`, ...)."""
    return NODE_WINDOW_PREFIX["cpu"] + window, NODE_WINDOW_PREFIX["memory"] + window


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) and x >= 0 else None


def node_usage(facts: NodeFacts | None, cpu_ratio: float | None, memory_ratio: float | None) -> Amounts | None:
    """Absolute usage (cores, bytes) of a node, or None when it cannot be known."""
    if facts is None or facts.capacity is None or facts.allocatable is None:
        return None
    if facts.allocatable.cpu <= 0 or facts.allocatable.memory <= 0:
        return None
    cpu, mem = _finite(cpu_ratio), _finite(memory_ratio)
    if cpu is None or mem is None:
        return None
    return Amounts(cpu * facts.capacity.cpu, mem * facts.capacity.memory)


def percent(usage: Amounts, allocatable: Amounts) -> Amounts:
    """Usage as percent of allocatable."""
    return Amounts(100.0 * usage.cpu / allocatable.cpu, 100.0 * usage.memory / allocatable.memory)


@dataclass(frozen=True, slots=True)
class PodUsage:
    namespace: str
    name: str
    uid: str
    usage: Amounts


def _window_value(windows: Mapping[str, object], window: str, field: str) -> float | None:
    entry = windows.get(window)
    if not isinstance(entry, Mapping):
        return None
    w = entry.get(field)
    value = w.get("value") if isinstance(w, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return _finite(float(value))


def pod_usages(doc: object, window: str) -> list[PodUsage]:
    """Parse the agent's `GET /api/v1/pods` body; pods without both values in `window` are left out.

    ValueError when the body is not the agent's pod list at all.
    """
    if not isinstance(doc, list):
        raise ValueError("pod list is not a JSON array")
    out = []
    cpu_field, mem_field = POD_WINDOW_FIELD["cpu"], POD_WINDOW_FIELD["memory"]
    for pod in doc:
        if not isinstance(pod, Mapping):
            raise ValueError("pod entry is not an object")
        ns, name, uid, windows = pod.get("namespace"), pod.get("name"), pod.get("uid"), pod.get("windows")
        if not isinstance(ns, str) or not isinstance(name, str) or not isinstance(windows, Mapping):
            continue  # a pod the agent could not name (no API metadata yet): nothing to evict by
        cpu = _window_value(windows, window, cpu_field)
        mem = _window_value(windows, window, mem_field)
        if cpu is None or mem is None:
            continue
        out.append(PodUsage(ns, name, uid if isinstance(uid, str) else "", Amounts(cpu, mem)))
    return out
