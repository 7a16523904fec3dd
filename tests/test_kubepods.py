"""A pod object's running containers by ID: the CPU limits, memory values and batch values of agent/kubepods.py
come from one name -> ID map over both status lists (init containers, sidecars included, and app containers);
a status without a parseable ID leaves its container out of every view alike."""

from __future__ import annotations

from typing import Any

from agent.kubepods import pod_meta
from contract.classify import Classifier
from testsupport.k8sobjects import pod

MI = 1 << 20


def batch_pod() -> dict[str, Any]:
    """Two app containers (the second's status has a malformed ID) and a running sidecar."""
    obj = pod("job", "uid-1", qos="BestEffort", container_ids=["a" * 64, "b" * 64])
    obj["status"]["containerStatuses"][1]["containerID"] = "not-an-id"
    batch = {"kubernetes.io/batch-cpu": "200", "kubernetes.io/batch-memory": str(256 * MI)}
    for c in obj["spec"]["containers"]:
        c["resources"] = {"requests": dict(batch), "limits": dict(batch)}
    obj["spec"]["initContainers"] = [{"name": "proxy", "restartPolicy": "Always",
                                      "resources": {"requests": dict(batch), "limits": dict(batch)}}]  # fmt: skip
    obj["status"]["initContainerStatuses"] = [{"name": "proxy", "containerID": "containerd://" + "c" * 64}]
    return obj


def test_every_view_maps_the_same_running_containers() -> None:
    meta = pod_meta(batch_pod(), Classifier())
    assert meta.batch is not None
    assert {c.name: c.id for c in meta.batch.containers} == {"proxy": "c" * 64, "c0": "a" * 64, "c1": None}
    # the plain cpu/memory views cover app containers only (a sidecar's are kubelet's to write)
    assert meta.container_cpu_limits == {"a" * 64: None}
    assert meta.container_memory == {"a" * 64: (0, None)}


def test_a_pod_without_statuses_has_no_running_container() -> None:
    obj = batch_pod()
    obj["status"] = {"phase": "Pending"}
    meta = pod_meta(obj, Classifier())
    assert meta.batch is not None and all(c.id is None for c in meta.batch.containers)
    assert meta.container_cpu_limits == {} and meta.container_memory == {}
