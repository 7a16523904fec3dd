"""Batch capacity against running batch pods (agent/capacity/batch_floor.py): tables, and the README's example."""

from __future__ import annotations

from typing import Any

import pytest

from agent.capacity.batch_floor import BatchUse, allocatable, batch_use, figures
from agent.capacity.owner import OversubscriptionOwner
from agent.config_sections.lending import OversubscriptionConfig
from agent.node_state import BatchRequests, batch_requests, node_state
from agent.snapshot import ContainerBatch, NodeSample, PodBatch, PodMeta, PodSample, Snapshot
from agent.view import AgentView
from agent.windows.store import WindowStore
from cgroup.kubelet_rules import BatchResources
from kube.resources import node_allocatable

GI = 1 << 30
MI = 1 << 20
NOW = 10_000.0


def batch_meta(
    uid: str, cpu_milli: int, memory: int, *, init: tuple[int, int] | None = None, overhead: tuple[int, int] = (0, 0)
) -> PodMeta:
    """An offline pod with batch requests (one app container, optionally one init container before it, and
    a RuntimeClass overhead of (milli-cores, bytes))."""
    containers = [ContainerBatch("app", None, BatchResources(cpu_milli, None, memory, None))]
    if init is not None:
        containers.insert(0, ContainerBatch("init", None, BatchResources(init[0], None, init[1], None, init=True)))
    return PodMeta(uid, "ns", uid, "offline", batch=PodBatch(tuple(containers), *overhead))


def sample(meta: PodMeta, cpu: float, memory: int, qos: str = "besteffort") -> PodSample:
    return PodSample(meta, qos, f"/kubepods/{qos}/pod{meta.uid}", cpu, memory, memory, memory, 0, 0.0, ())


def online(uid: str, cpu_req: float, mem_req: int, cpu: float, mem: int) -> PodSample:
    meta = PodMeta(uid, "ns", uid, "online", cpu_request_cores=cpu_req, memory_request_bytes=mem_req)
    return sample(meta, cpu, mem, "burstable")


# ---- the formula, as tables ----------------------------------------------------------------------------

#: (capacity, memory above requests) -> allocatable, per resource: CPU above requests is never taken off
ALLOCATABLE_CASES = [
    ("cpu", 5500, BatchUse(cpu_milli=9000, memory_bytes=0, memory_above_requests=0), 5500),
    ("cpu", 5500, BatchUse(cpu_milli=9000, memory_bytes=GI, memory_above_requests=GI), 5500),
    ("memory", 14 * GI, BatchUse(memory_bytes=8 * GI, memory_above_requests=0), 14 * GI),
    ("memory", 14 * GI, BatchUse(memory_bytes=8 * GI, memory_above_requests=GI), 13 * GI),
    ("memory", 2 * GI, BatchUse(memory_bytes=8 * GI, memory_above_requests=3 * GI), 0),  # never negative
    ("memory", 0, BatchUse(), 0),
]


@pytest.mark.parametrize(("resource", "capacity", "use", "expected"), ALLOCATABLE_CASES)
def test_allocatable_takes_off_only_memory_held_above_requests(
    resource: str, capacity: int, use: BatchUse, expected: int
) -> None:
    assert allocatable(resource, capacity, use) == expected


#: (published allocatable, allocated) -> free; negative for a value below allocated (the publisher never writes one)
FREE_CASES = [(5500, 4500, 1000), (5500, 0, 5500), (2000, 4500, -2500), (0, 4500, -4500), (0, 0, 0)]


@pytest.mark.parametrize(("published", "allocated", "free"), FREE_CASES)
def test_free_is_allocatable_minus_allocated(published: int, allocated: int, free: int) -> None:
    f = figures(published, allocated)
    assert (f.allocatable, f.allocated, f.free) == (published, allocated, free)


def test_allocated_sums_the_schedulers_pod_totals_of_batch_pods_only() -> None:
    metas = [
        batch_meta("a", 2000, 4 * GI),
        batch_meta("b", 500, GI, init=(1500, 3 * GI)),  # the init container's larger request is the pod's
        PodMeta("web", "ns", "web", "online", cpu_request_cores=8.0, memory_request_bytes=16 * GI),
        PodMeta("be", "ns", "be", "offline", cpu_request_cores=1.0),  # offline by marker, no batch resources
        # a RuntimeClass overhead: the scheduler adds it to plain cpu/memory, never to batch-*
        batch_meta("kata", 500, GI, overhead=(250, 128 * MI)),
    ]
    assert batch_requests(metas) == BatchRequests(pods=3, cpu_milli=4000, memory_bytes=8 * GI)
    assert batch_requests([]) == BatchRequests()


def test_use_counts_memory_above_each_pods_own_request() -> None:
    a = sample(batch_meta("a", 2000, 4 * GI), cpu=1.8, memory=5 * GI)  # 1 GiB above
    b = sample(batch_meta("b", 1500, 4 * GI), cpu=2.5, memory=3 * GI)  # below: frees nothing for a
    web = online("web", 8.0, 16 * GI, 2.5, 6 * GI)  # online pods are not batch use
    # the overhead is in the pod cgroup's working set, reserved as plain memory: not above the request
    kata = sample(batch_meta("kata", 500, GI, overhead=(250, 128 * MI)), cpu=0.0, memory=GI + 100 * MI)
    use = batch_use([a, b, web, kata])
    assert use == BatchUse(cpu_milli=4300, memory_bytes=9 * GI + 100 * MI, memory_above_requests=GI)


# ---- the README's worked example, batch pods --------------------------------------------------------------


def worked_example(web_cpu_peak: float = 2.5) -> dict[str, Any]:
    """README "Batch pods": the worked example's node with two running batch pods and one bound, not started.
    Goes through the agent's own path: a pass's state → capacity → the published values and section."""
    web = online("web", 8.0, 16 * GI, web_cpu_peak, 6 * GI)
    cache = online("cache", 2.0, 24 * GI, 2.0, 20 * GI)
    spark1 = sample(batch_meta("spark-1", 2000, 4 * GI), cpu=1.8, memory=5 * GI)
    spark2 = sample(batch_meta("spark-2", 1500, 4 * GI), cpu=2.5, memory=3 * GI)
    # bound, its containers not started: no cgroup, no sample; its overhead is plain cpu/memory to the scheduler
    spark3 = batch_meta("spark-3", 1000, 2 * GI, overhead=(250, 128 * MI))
    pods = [web, cache, spark1, spark2]
    store = WindowStore()
    for i in range(600):
        for p in pods:
            store.add(("pod", p.uid, "cpu"), NOW - 599 + i, p.cpu_cores or 0.0)
            store.add(("pod", p.uid, "memory"), NOW - 599 + i, float(p.memory_working_set_bytes))
    # system 1 core and 4 GiB, as in the example: the batch pods' usage is in the node's, and in the pods'
    pods_cpu = sum(p.cpu_cores or 0.0 for p in pods)
    pods_mem = sum(p.memory_working_set_bytes for p in pods)
    node = NodeSample(16.0, pods_cpu + 1.0, 64 * GI, pods_mem + 4 * GI, 0)
    snap = Snapshot(1, NOW, 0.0, node, {}, {p.uid: p for p in pods}, (), 0.0)
    view = AgentView(store, 1.0, "n1")
    metas = [p.meta for p in pods] + [spark3]
    # the example was written for the per-pod rule (before issue 20), which publishes one number for both models
    config = OversubscriptionConfig(
        enabled_on_all_nodes=True,
        predictor="pod_peaks",
        peak_window="max_avg_1h",
        cpu_reclaim_ratio=0.8,
        memory_reclaim_ratio=0.75,
        min_history_seconds=300.0,  # the pods' ten minutes of history are enough, as they were then
    )
    owner = OversubscriptionOwner(view, config, batch_requests=lambda: batch_requests(metas))
    node_obj = {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "16", "memory": "64Gi"}}}
    owner.on_state(node_state(snap, node_allocatable(node_obj)), node_obj)
    view.publish(snap)
    changes = owner.changes(node_obj, NOW)
    section = owner.section()
    return {"changes": changes, "section": section}


def test_readme_worked_example_batch_pods() -> None:
    out = worked_example()
    section, changes = out["section"], out["changes"]
    # capacity as without batch pods: their usage is neither online peak nor system usage
    assert section["cpu"]["oversubscription"] == pytest.approx(5.5)
    assert section["memory"]["oversubscription"] == pytest.approx(14 * GI)
    batch = section["batch"]
    assert batch["pods"] == 3
    assert batch["cpu"] == {"allocatable": 5500, "allocated": 4500, "free": 1000, "usage": 4300,
                                 "unit": "millicores"}  # fmt: skip
    assert batch["memory"] == {"allocatable": 13958643712, "allocated": 10 * GI, "free": 3221225472,
                               "usage": 8 * GI, "above_requests": GI, "unit": "bytes"}  # fmt: skip
    # what reaches the node: the allocatable, in status and in the annotations alike
    assert changes.extended_resources == {"kubernetes.io/batch-cpu": "5500", "kubernetes.io/batch-memory": str(13 * GI)}
    assert changes.annotations == {"volcano.sh/oversubscription-cpu": "5500",
                                   "volcano.sh/oversubscription-memory": str(13 * GI)}  # fmt: skip


def test_readme_worked_example_online_rises_above_what_was_promised() -> None:
    """web's CPU peak rises to 6 cores: the capacity (2 cores) falls below what batch pods hold (4.5): the batch
    allocatable stays at the allocated amount (kubelet re-admits them at a restart), free is 0; Volcano's
    annotation says the capacity (issue 22)."""
    out = worked_example(web_cpu_peak=6.0)
    batch = out["section"]["batch"]
    assert batch["cpu"]["allocatable"] == 4500 and batch["cpu"]["allocated"] == 4500 and batch["cpu"]["free"] == 0
    assert out["section"]["cpu_millicores"] == 2000 and out["section"]["computed"]["cpu"] == 2000
    assert out["changes"].extended_resources["kubernetes.io/batch-cpu"] == "4500"
    assert out["changes"].annotations["volcano.sh/oversubscription-cpu"] == "2000"
