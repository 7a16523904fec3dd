"""Requests, limits and allocatable from API objects, with the official client's quantity parser."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity


def quantity(value: object, default: Decimal | None = None) -> Decimal | None:
    """A Kubernetes quantity ('250m', '1Gi', '1.5') as a Decimal; `default` when absent or malformed."""
    if value is None:
        return default
    try:
        return Decimal(parse_quantity(value))  # type: ignore[no-untyped-call]
    except (ValueError, TypeError, ArithmeticError):
        return default


def _sum_resources(containers: list[Mapping[str, Any]], field: str) -> tuple[Decimal, Decimal]:
    cpu = mem = Decimal(0)
    for c in containers:
        res = (c.get("resources") or {}).get(field) or {}
        cpu += quantity(res.get("cpu"), Decimal(0)) or Decimal(0)
        mem += quantity(res.get("memory"), Decimal(0)) or Decimal(0)
    return cpu, mem


def pod_requests(pod: Mapping[str, Any]) -> tuple[float, int]:
    """(CPU cores, memory bytes) the scheduler reserves for a pod: max(sum of containers, largest init
    container) plus the pod overhead, as kube-scheduler computes it."""
    spec = pod.get("spec") or {}
    cpu, mem = _sum_resources(spec.get("containers") or [], "requests")
    for init in spec.get("initContainers") or []:
        icpu, imem = _sum_resources([init], "requests")
        if init.get("restartPolicy") == "Always":  # a sidecar runs alongside the app containers
            cpu, mem = cpu + icpu, mem + imem
        else:
            cpu, mem = max(cpu, icpu), max(mem, imem)
    overhead = spec.get("overhead") or {}
    cpu += quantity(overhead.get("cpu"), Decimal(0)) or Decimal(0)
    mem += quantity(overhead.get("memory"), Decimal(0)) or Decimal(0)
    return float(cpu), int(mem)


def pod_limits(pod: Mapping[str, Any]) -> tuple[float | None, int | None]:
    """(CPU cores, memory bytes) limits of the whole pod; None when any container is unlimited."""
    containers = (pod.get("spec") or {}).get("containers") or []
    if not containers:
        return None, None
    cpu_total: Decimal | None = Decimal(0)
    mem_total: Decimal | None = Decimal(0)
    for c in containers:
        limits = (c.get("resources") or {}).get("limits") or {}
        cpu, mem = quantity(limits.get("cpu")), quantity(limits.get("memory"))
        cpu_total = None if cpu is None or cpu_total is None else cpu_total + cpu
        mem_total = None if mem is None or mem_total is None else mem_total + mem
    return (None if cpu_total is None else float(cpu_total)), (None if mem_total is None else int(mem_total))


def node_allocatable(node: Mapping[str, Any]) -> tuple[float | None, int | None]:
    """(CPU cores, memory bytes) allocatable from a Node's status."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    cpu, mem = quantity(alloc.get("cpu")), quantity(alloc.get("memory"))
    return (None if cpu is None else float(cpu)), (None if mem is None else int(mem))
