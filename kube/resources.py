"""Requests, limits and allocatable from API objects, with the official client's quantity parser."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from cgroup.kubelet_rules import BatchResources, pod_total
from contract.annotations import BATCH_CPU, BATCH_MEMORY
from kube.quantity import ceil_int, parse_quantity


def quantity(value: object, default: Decimal | None = None) -> Decimal | None:
    """A Kubernetes quantity ('250m', '1Gi', '1.5') as a Decimal; `default` when absent or malformed."""
    if value is None:
        return default
    try:
        return parse_quantity(value)
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
    """(CPU cores, memory bytes) the scheduler reserves for a pod, as kube-scheduler computes it
    (AggregateContainerRequests): init containers run in order, and a sidecar (an init container with
    restartPolicy Always) keeps running from its start, so a regular init container needs its own request
    plus the sidecars started before it; the app containers run alongside every sidecar. The result is
    max(Σ app containers + Σ sidecars, max over regular init containers of (init + sidecars before it))
    plus the pod overhead."""
    spec = pod.get("spec") or {}
    cpu, mem = _sum_resources(spec.get("containers") or [], "requests")
    side_cpu = side_mem = init_cpu = init_mem = Decimal(0)
    for init in spec.get("initContainers") or []:
        icpu, imem = _sum_resources([init], "requests")
        if init.get("restartPolicy") == "Always":
            side_cpu, side_mem = side_cpu + icpu, side_mem + imem
            cpu, mem = cpu + icpu, mem + imem
        else:
            init_cpu, init_mem = max(init_cpu, icpu + side_cpu), max(init_mem, imem + side_mem)
    cpu, mem = max(cpu, init_cpu), max(mem, init_mem)
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


def _whole(value: object) -> int | None:
    """A batch quantity as an integer, rounded up (batch-cpu is milli-cores, batch-memory bytes); None when
    absent or malformed."""
    q = quantity(value)
    return None if q is None else ceil_int(q)


def container_batch(container: Mapping[str, Any]) -> tuple[int | None, int | None, int | None, int | None]:
    """(batch-cpu request, batch-cpu limit, batch-memory request, batch-memory limit) of one container spec:
    milli-cores and bytes; None where absent. A limit without a request defaults the request to the limit,
    as the API server does for every resource."""
    res = container.get("resources") or {}
    requests, limits = res.get("requests") or {}, res.get("limits") or {}
    cpu_lim, mem_lim = _whole(limits.get(BATCH_CPU)), _whole(limits.get(BATCH_MEMORY))
    cpu_req, mem_req = _whole(requests.get(BATCH_CPU)), _whole(requests.get(BATCH_MEMORY))
    return (cpu_lim if cpu_req is None else cpu_req), cpu_lim, (mem_lim if mem_req is None else mem_req), mem_lim


#: Pod phases whose pods no longer hold their requests (kube-scheduler and kubelet stop counting them).
FINISHED_PHASES = ("Succeeded", "Failed")


def pod_batch_requests(pod: Mapping[str, Any]) -> tuple[int, int] | None:
    """(batch-cpu milli-cores, batch-memory bytes) a pod holds on its node's batch allocatable, as the
    scheduler counts it (init containers and sidecars by kubelet's rule, `spec.overhead` not included: it
    counts against plain cpu/memory); None for a pod without batch resources or one that has finished.
    The agent counts its node's pods the same way (agent/capacity/batch_floor.py)."""
    if (pod.get("status") or {}).get("phase") in FINISHED_PHASES:
        return None
    spec = pod.get("spec") or {}
    res: list[BatchResources] = []
    found = False
    for init, specs in ((True, spec.get("initContainers") or []), (False, spec.get("containers") or [])):
        for c in specs:
            cpu_req, cpu_lim, mem_req, mem_lim = container_batch(c)
            found = found or any(v is not None for v in (cpu_req, cpu_lim, mem_req, mem_lim))
            sidecar = init and c.get("restartPolicy") == "Always"
            res.append(BatchResources(cpu_req, cpu_lim, mem_req, mem_lim, init=init, sidecar=sidecar))
    if not found:
        return None
    return pod_total(res, [r.cpu_request for r in res]), pod_total(res, [r.memory_request for r in res])
