"""Step 1: node usage per resource from the agents' windows, and pods' usage from the agents' pod lists.

The agent's node windows are ratios of the host's CPUs and of MemTotal, which is what the kubelet reports
as the Node's capacity, so usage = ratio x capacity, compared against allocatable (koordinator's
LowNodeLoad works on the same percentage of allocatable). A node without a fresh value of the window
(no answer this cycle, no data yet) or without capacity/allocatable has no usage: neither source nor
destination.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from contract.agent_api import parse_pods_document
from contract.windows import NODE_WINDOW_PREFIX, POD_WINDOW_FIELD
from controller.rebalance.traits import Amounts, NodeTraits


def node_window_names(window: str) -> tuple[str, str]:
    """The crane-style names of the agent's node windows for CPU and memory (`cpu_usage_avg_5m`, ...)."""
    return NODE_WINDOW_PREFIX["cpu"] + window, NODE_WINDOW_PREFIX["memory"] + window


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) and x >= 0 else None


def node_usage(traits: NodeTraits | None, cpu_ratio: float | None, memory_ratio: float | None) -> Amounts | None:
    """Absolute usage (cores, bytes) of a node, or None when it cannot be known."""
    if traits is None or traits.capacity is None or traits.allocatable is None:
        return None
    if traits.allocatable.cpu <= 0 or traits.allocatable.memory <= 0:
        return None
    cpu, mem = _finite(cpu_ratio), _finite(memory_ratio)
    if cpu is None or mem is None:
        return None
    return Amounts(cpu * traits.capacity.cpu, mem * traits.capacity.memory)


def percent(usage: Amounts, allocatable: Amounts) -> Amounts:
    """Usage as percent of allocatable."""
    return Amounts(100.0 * usage.cpu / allocatable.cpu, 100.0 * usage.memory / allocatable.memory)


@dataclass(frozen=True, slots=True)
class PodLoad:
    """What rebalancing reads of one pod in the agent's pod list: who it is and its usage in the window."""

    namespace: str
    name: str
    uid: str
    usage: Amounts


def pod_usages(body: bytes | str, window: str) -> list[PodLoad]:
    """The agent's `GET /api/v1/pods` body, validated by the contract (so a renamed or mistyped field, NaN
    or a negative value rejects the whole list, as for /api/v1/node); pods without both values in `window`,
    or without a namespace and name (not known to the API yet: nothing to evict by), are left out.

    DocumentRejected (a ValueError) with the reason, one of contract.agent_api.REASONS."""
    cpu_field, mem_field = POD_WINDOW_FIELD["cpu"], POD_WINDOW_FIELD["memory"]
    out = []
    for pod in parse_pods_document(body):
        by_field = pod.windows.get(window, {})
        cpu, mem = by_field.get(cpu_field), by_field.get(mem_field)
        if pod.namespace is None or pod.name is None or cpu is None or mem is None:
            continue
        if cpu.value is None or mem.value is None:
            continue
        out.append(PodLoad(pod.namespace, pod.name, pod.uid, Amounts(cpu.value, mem.value)))
    return out
