"""Batch capacity against the batch pods already on the node: what is allocatable, allocated and free.

The node advertises `kubernetes.io/batch-cpu` (milli-cores) and `kubernetes.io/batch-memory` (bytes) in
`status.allocatable`; kube-scheduler and kubelet subtract the batch requests of the pods bound to the node
themselves, like for any scalar resource. So the published number is the node's whole batch allocatable,
not what is left of it:

    capacity    = the batch model's number (`lendable.batch`): max(0, headroom); offline usage never in it
    allocatable = capacity                                     cpu
    allocatable = max(0, capacity − Σ_batch max(0, working set − batch-memory request − overhead))  memory
    allocated   = Σ batch requests of the node's pods that have not finished (what the scheduler subtracts)
    free        = published − allocated                        0: nothing more fits (the publisher floors the
                                                               published value at allocated: publish_rules.py)

The scheduler adds a pod's `spec.overhead` per resource name: a RuntimeClass's cpu/memory overhead counts
against plain cpu/memory, never batch-*, so it is not allocated here. It is in the pod cgroup's working
set, though, and reserved (as plain memory): not above the pod's requests.

Batch pods' usage is not online usage (they are offline pods, outside `online_peak` and outside system
usage), so their own running does not shrink the capacity. What they hold is accounted by the scheduler
through their requests, which is enough for CPU: it is compressible, and the offline CPU budget is split in
proportion to the batch-cpu requests when the node is busy (strategies.cpu_suppression), so a pod bursting above
its request yields to a newly placed one. Memory above a pod's request cannot be taken back without killing
the pod: it is taken off the allocatable, so that free never invites a pod into memory another batch pod
already holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agent.node_state import BatchRequests
from agent.snapshot import PodSample


@dataclass(frozen=True, slots=True)
class BatchUse:
    """What running batch pods (those with cgroups in the pass) use."""

    cpu_milli: int = 0  # Σ usage, for the record
    memory_bytes: int = 0  # Σ working sets, for the record
    memory_above_requests: int = 0  # Σ max(0, working set − batch-memory request): taken off the allocatable


@dataclass(frozen=True, slots=True)
class BatchFigures:
    """One resource (milli-cores or bytes): the published allocatable, the allocated requests, what is free."""

    allocatable: int
    allocated: int
    free: int


def batch_use(samples: Iterable[PodSample]) -> BatchUse:
    """Usage of the running batch pods and the memory they hold above their batch-memory requests."""
    cpu = memory = above = 0.0
    for p in samples:
        if p.meta.batch is None:
            continue
        cpu += (p.cpu_cores or 0.0) * 1000
        memory += p.memory_working_set_bytes
        # the overhead is in the pod cgroup's working set and the scheduler reserved it (as plain memory)
        reserved = p.meta.batch.memory_request_bytes + p.meta.batch.overhead_memory
        above += max(0, p.memory_working_set_bytes - reserved)
    return BatchUse(int(cpu), int(memory), int(above))


def allocatable(resource: str, capacity: int, use: BatchUse) -> int:
    """The batch allocatable of one resource from its capacity (milli-cores or bytes)."""
    if resource == "memory":
        return max(0, capacity - use.memory_above_requests)
    return max(0, capacity)


def figures(published: int, allocated: int) -> BatchFigures:
    """Allocated and free against what is published (negative only for a value below `allocated`, which the
    publisher never writes)."""
    return BatchFigures(published, allocated, published - allocated)


def section(published: dict[str, int], requests: BatchRequests, use: BatchUse) -> dict[str, object]:
    """The `batch` key of /api/v1/node's oversubscription section."""
    cpu = figures(published["cpu"], requests.cpu_milli)
    memory = figures(published["memory"], requests.memory_bytes)
    return {
        "pods": requests.pods,
        "cpu": {
            "allocatable": cpu.allocatable,
            "allocated": cpu.allocated,
            "free": cpu.free,
            "usage": use.cpu_milli,
            "unit": "millicores",
        },
        "memory": {
            "allocatable": memory.allocatable,
            "allocated": memory.allocated,
            "free": memory.free,
            "usage": use.memory_bytes,
            "above_requests": use.memory_above_requests,
            "unit": "bytes",
        },
    }
