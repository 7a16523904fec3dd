"""API objects as the API server would return them, for the tests' fake API server."""

from __future__ import annotations

from typing import Any

NODE = "colo-node-1"


def node(name: str = NODE, *, cpu: str = "16", memory: str = "64Gi", labels: dict[str, str] | None = None,
         annotations: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {},
        "status": {"capacity": {"cpu": cpu, "memory": memory}, "allocatable": {"cpu": cpu, "memory": memory}},
    }


def pod(
    name: str,
    uid: str,
    *,
    namespace: str = "default",
    node_name: str = NODE,
    qos: str = "Burstable",
    container_ids: list[str] | None = None,
    cpu_request: str | None = None,
    memory_request: str | None = None,
    cpu_limit: str | None = None,
    memory_limit: str | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    priority: int | None = None,
    priority_class: str | None = None,
    created: str = "2026-11-22T10:00:00Z",
    phase: str = "Running",
) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu_request), ("memory", memory_request)) if v}
    limits = {k: v for k, v in (("cpu", cpu_limit), ("memory", memory_limit)) if v}
    ids = container_ids or []
    # the first container carries the resources; the statuses name the containers as the spec does
    spec: dict[str, Any] = {
        "nodeName": node_name,
        "containers": [
            {"name": f"c{i}", "image": "busybox",
             "resources": {"requests": requests, "limits": limits} if i == 0 else {}}
            for i in range(max(1, len(ids)))
        ],
    }  # fmt: skip
    if priority is not None:
        spec["priority"] = priority
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "annotations": annotations or {},
            "labels": labels or {},
            "creationTimestamp": created,
        },
        "spec": spec,
        "status": {
            "phase": phase,
            "qosClass": qos,
            "containerStatuses": [
                {"name": f"c{i}", "containerID": f"containerd://{cid}", "ready": True} for i, cid in enumerate(ids)
            ],
        },
    }


def kube_api_access_volume() -> dict[str, Any]:
    """The projected service-account volume the API server adds to every pod (token, CA, namespace)."""
    return {
        "name": "kube-api-access-x7k2p",
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace",
                                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ],
        },
    }  # fmt: skip


def container_id_of(cgroup_path: str) -> str:
    """The container ID a V1Tree container cgroup was named after."""
    leaf = cgroup_path.rsplit("/", 1)[1]
    return leaf.removeprefix("cri-containerd-").removesuffix(".scope")
