"""Node and Pod API objects for the rebalancing tests (shared by the table tests, the e2e test and the bench)."""

from __future__ import annotations

from typing import Any

GIB = 1 << 30


def node(
    name: str,
    *,
    cpu: float = 16,
    memory_gib: float = 64,
    alloc_cpu: float | None = None,
    alloc_memory_gib: float | None = None,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    ip: str = "192.0.2.10",
) -> dict[str, Any]:
    """A Node whose capacity is `cpu` cores and `memory_gib` GiB (allocatable the same unless given)."""
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {
            "capacity": {"cpu": str(cpu), "memory": f"{int(memory_gib * 1024)}Mi", "pods": "110"},
            "allocatable": {
                "cpu": str(alloc_cpu if alloc_cpu is not None else cpu),
                "memory": f"{int((alloc_memory_gib if alloc_memory_gib is not None else memory_gib) * 1024)}Mi",
                "pods": "110",
            },
            "addresses": [{"type": "InternalIP", "address": ip}],
        },
    }


def pod(
    name: str,
    node_name: str,
    *,
    namespace: str = "default",
    cpu: str = "500m",
    memory: str = "1Gi",
    owner: str | None = "ReplicaSet",
    priority: int | None = None,
    offline: bool = False,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    node_selector: dict[str, str] | None = None,
    affinity_terms: list[dict[str, Any]] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    phase: str = "Running",
    uid: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid or f"uid-{namespace}-{name}"}
    meta["labels"] = dict(labels or {})
    if offline:
        meta["labels"]["koordinator.sh/qosClass"] = "BE"
    if annotations:
        meta["annotations"] = annotations
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": f"{name}-owner", "uid": "o"}]
    spec: dict[str, Any] = {
        "nodeName": node_name,
        "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
    }
    if priority is not None:
        spec["priority"] = priority
    if volumes:
        spec["volumes"] = volumes
    if node_selector:
        spec["nodeSelector"] = node_selector
    if affinity_terms is not None:
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": affinity_terms}}
        }
    if tolerations:
        spec["tolerations"] = tolerations
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def agent_pod(namespace: str, name: str, cpu_cores: float | None, memory_bytes: float | None, window: str = "avg_5m",
              uid: str | None = None) -> dict[str, Any]:  # fmt: skip
    """One entry of the agent's GET /api/v1/pods, every field the contract requires (one container holding
    the whole pod), with `window` and two more windows at this usage (None: no value yet)."""
    working_set = int(memory_bytes or 0)
    windows = {
        w: {
            "cpu_cores": {"value": cpu_cores, "coverage": 1.0},
            "memory_working_set_bytes": {"value": memory_bytes, "coverage": 1.0},
        }
        for w in ("avg_1m", window, "max_avg_1h")
    }
    pod_uid = uid or f"uid-{namespace}-{name}"
    usage = {
        "cpu_cores": cpu_cores,
        "memory_working_set_bytes": working_set,
        "memory_anon_bytes": working_set // 2,
        "cpu_throttled_ratio": 0.0,
    }
    return {
        "namespace": namespace,
        "name": name,
        "uid": pod_uid,
        "qos": "burstable",
        "class": "online",
        **usage,
        "containers": [{"id": f"{pod_uid}-app", **usage}],
        "windows": windows,
        "batch": None,  # no kubernetes.io/batch-* resources
        "network": None,  # collectors.pod_network off (its default)
        "disk": None,  # the agent's disk collector is off
        "run_queue": None,  # not read yet (collectors.run_queue reads a pod on its turn)
    }
