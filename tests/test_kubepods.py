"""A pod object's running containers by ID: the CPU limits, memory values and batch values of agent/sense/pod_source.py
come from one name -> ID map over both status lists (init containers, sidecars included, and app containers);
a status without a parseable ID leaves its container out of every view alike."""

from __future__ import annotations

from typing import Any

from agent.sense.pod_source import pod_meta
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


def test_batch_requests_are_unknown_until_a_listing_made_after_the_informer_synced(tmp_path: Any) -> None:
    """The floor of the batch resources: a listing of a cache that had not synced yet says nothing (an empty
    cache is not an empty node), and a sync during the wait for the next pass does not make the old one true."""
    from agent.sense.pod_source import KubePodSource
    from cgroup import PathModel
    from cgroup.layout import Layout, Mount

    synced = False
    items: list[dict[str, Any]] = []
    source = KubePodSource(lambda: items, Layout("v2", {}, Mount(str(tmp_path))), PathModel("systemd", "/"),
                           Classifier(), synced=lambda: synced)  # fmt: skip
    source.pods(0.0)
    assert source.batch_requests is None, "listed before the sync"
    items.append(batch_pod())
    synced = True
    assert source.batch_requests is None, "synced, but no pass has listed since"
    source.pods(1.0)
    assert source.batch_requests is not None
    assert (source.batch_requests.pods, source.batch_requests.cpu_milli) == (1, 600)


def test_an_unchanged_listing_gives_the_same_answer_and_a_change_a_new_one(tmp_path: Any) -> None:
    """The informer replaces an object that changed (never edits it): the same objects as the last pass give
    the last answer as it was; a changed object, a vanished cgroup or a pod whose cgroup is not there yet
    (looked for again every pass after `retry_seconds`) give a new one."""
    from agent.sense.pod_source import KubePodSource
    from cgroup import PathModel, parse_container_id
    from testsupport.v2tree import V2Cgroup, V2Tree

    tree, model = V2Tree(str(tmp_path)), PathModel("systemd")
    first, later = pod("a", "uid-a", container_ids=["a" * 64]), pod("b", "uid-b", container_ids=["b" * 64])
    tree.put(model.pod("burstable", "uid-a"), V2Cgroup())
    tree.put(model.container("burstable", "uid-a", parse_container_id("containerd://" + "a" * 64)), V2Cgroup())
    items = [first, later]
    source = KubePodSource(lambda: list(items), tree.layout, model, Classifier(), retry_seconds=5.0)
    listed = source.pods(0.0)
    assert [m.uid for m, _ in listed] == ["uid-a"]  # b has no cgroup yet
    tree.put(model.pod("burstable", "uid-b"), V2Cgroup())
    assert [m.uid for m, _ in source.pods(1.0)] == ["uid-a"]  # looked for again after retry_seconds only
    found = source.pods(6.0)
    assert [m.uid for m, _ in found] == ["uid-a", "uid-b"]
    assert source.pods(7.0) is found  # the same objects: the same answer
    items[0] = pod("a", "uid-a", container_ids=["a" * 64], labels={"changed": "yes"})
    items[0]["metadata"]["resourceVersion"] = "2"  # the API server's mark of a change
    changed = source.pods(8.0)
    assert changed is not found and changed[0][0].labels == {"changed": "yes"}
    source.vanished("uid-b")  # its cgroup went: looked for again at once
    assert source.pods(9.0) is not changed
