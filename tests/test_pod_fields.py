"""The agent's pod transform (agent/sense/pod_fields.py): every reader of a pod object gives the same answer on the
slim pod as on the whole one, the informer's identity fields stay, and odd input never makes it raise (a
raising transform would hide the pod)."""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.node_state import batch_requests
from agent.sense.pod_fields import pod_transform, slim_pod
from agent.sense.pod_source import FINISHED_PHASES, KubePodSource, cgroup_uid, container_ids, pod_meta
from agent.snapshot import PodMeta
from cgroup import PathModel, parse_container_id
from contract.annotations import ENABLE_QUOTA_BURST, KOORD_QOS_CLASS, QOS_LEVEL, QUOTA_BURST_TIME
from contract.classify import Classifier, has_batch_resources
from kube import Informer, Kube
from kube.resources import pod_batch_requests, pod_limits, pod_requests
from testsupport.cgtree import V1Tree
from testsupport.k8sobjects import NODE
from testsupport.kubeapi.server import FakeKubeAPI
from testsupport.realistic_pod import realistic_pod
from testsupport.v2tree import V2Cgroup, V2Tree

pytest_plugins = ["testsupport.kubeapi.fixtures"]

QUOTA_LABEL = "quota.scheduling.koordinator.sh/name"  # the agent's default aggregate_label_keys
LABEL_KEYS = (QUOTA_LABEL, "team")


def _guaranteed(pod: dict[str, Any]) -> dict[str, Any]:
    """Every container limited (the pod has CPU and memory limits)."""
    for c in pod["spec"]["containers"] + pod["spec"]["initContainers"]:
        c["resources"]["limits"] = {"cpu": "2", "memory": "1Gi"}
        c["resources"]["requests"] = {"cpu": "2", "memory": "1Gi"}
    pod["status"]["qosClass"] = "Guaranteed"
    return pod


def _pending(pod: dict[str, Any]) -> dict[str, Any]:
    pod["status"] = {"phase": "Pending", "qosClass": pod["status"]["qosClass"], "conditions": []}
    return pod


VARIANTS: dict[str, Callable[[], dict[str, Any]]] = {
    "online": lambda: realistic_pod(labels={QUOTA_LABEL: "shop", "team": "web"}),
    "offline by qos-level": lambda: realistic_pod(annotations={QOS_LEVEL: "-1"}, qos="BestEffort"),
    "malformed qos-level": lambda: realistic_pod(annotations={QOS_LEVEL: "very"}),
    "offline by koordinator label": lambda: realistic_pod(labels={KOORD_QOS_CLASS: "BE", QUOTA_LABEL: "batch"}),
    "offline by priority class": lambda: realistic_pod(priority_class="koord-batch", priority=5000),
    "offline by low priority": lambda: realistic_pod(priority=-10),
    "critical priority": lambda: realistic_pod(annotations={QOS_LEVEL: "BE"}, priority=2_000_001_000),
    "batch resources": lambda: realistic_pod(batch=True, qos="BestEffort"),
    "quota burst": lambda: realistic_pod(annotations={ENABLE_QUOTA_BURST: "true", QUOTA_BURST_TIME: "500ms"}),
    "static pod mirror": lambda: realistic_pod(annotations={"kubernetes.io/config.mirror": "f00d" * 8}),
    "guaranteed": lambda: _guaranteed(realistic_pod(qos="Guaranteed")),
    "container not started": lambda: realistic_pod(waiting=True),
    "pending": lambda: _pending(realistic_pod()),
    "succeeded": lambda: realistic_pod(phase="Succeeded"),
    "no priority": lambda: realistic_pod(priority=None),
}
CLASSIFIERS = [Classifier(), Classifier(("koord-batch", "batch-low"), 100), Classifier((), -5)]


def _as_read(meta: PodMeta) -> PodMeta:
    """The PodMeta with only the labels anything reads (classification and `aggregate_label_keys`): the
    slim pod keeps no others."""
    return dataclasses.replace(
        meta, labels={k: v for k, v in meta.labels.items() if k in (KOORD_QOS_CLASS, *LABEL_KEYS)}
    )


def readers(pod: dict[str, Any]) -> dict[str, Any]:
    """What every agent reader of a pod object answers (agent/sense/pod_source.py and what it calls)."""
    metas = [pod_meta(pod, c) for c in CLASSIFIERS]
    return {
        "classes": [c.classify(pod) for c in CLASSIFIERS],
        "meta": [_as_read(m) for m in metas],
        "batch requests": batch_requests(metas[:1]),
        "batch": has_batch_resources(pod),
        "requests": pod_requests(pod),
        "limits": pod_limits(pod),
        "scheduler batch requests": pod_batch_requests(pod),
        "container ids": container_ids(pod),
        "cgroup uid": cgroup_uid(pod),
        "finished": (pod.get("status") or {}).get("phase") in FINISHED_PHASES,
        "qos class": (pod.get("status") or {}).get("qosClass"),
        "eviction target": (metas[0].namespace, metas[0].name),
    }


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_reader_answers_the_same_on_the_slim_pod(variant: str) -> None:
    full = VARIANTS[variant]()
    kept = copy.deepcopy(full)
    slim = slim_pod(full, LABEL_KEYS)
    assert readers(slim) == readers(full)
    assert full == kept, "the transform never edits what it is given"
    meta = slim["metadata"]
    assert (meta["name"], meta["namespace"], meta["resourceVersion"]) == (
        full["metadata"]["name"], full["metadata"]["namespace"], full["metadata"]["resourceVersion"],
    )  # fmt: skip


def test_the_readers_see_what_the_variants_are_about() -> None:
    """The comparison above is not vacuous: the variants take the readers' different branches."""
    answers = {name: readers(make()) for name, make in VARIANTS.items()}
    assert answers["online"]["classes"][0] == "online"
    assert {answers[v]["classes"][1] for v in ("offline by qos-level", "offline by koordinator label",
                                               "offline by priority class", "batch resources")} == {"offline"}  # fmt: skip
    assert answers["critical priority"]["classes"] == ["online"] * 3
    assert answers["batch resources"]["meta"][0].batch is not None
    assert answers["batch resources"]["batch requests"].cpu_milli == 500
    assert answers["guaranteed"]["limits"][0] is not None
    assert answers["online"]["meta"][0].labels == {QUOTA_LABEL: "shop", "team": "web"}
    assert answers["quota burst"]["meta"][0].annotations == {ENABLE_QUOTA_BURST: "true", QUOTA_BURST_TIME: "500ms"}
    assert answers["static pod mirror"]["cgroup uid"] == "f00d" * 8
    assert len(answers["container not started"]["container ids"]) == 4
    assert answers["succeeded"]["finished"] and answers["pending"]["container ids"] == ()
    assert answers["online"]["meta"][0].creation_timestamp is not None
    assert len(answers["online"]["meta"][0].container_memory) == 3
    assert answers["online"]["meta"][0].pod_ip == "10.244.3.17"  # where the opt-in SLO scrape goes


def test_the_slim_pod_drops_what_nobody_reads() -> None:
    full = realistic_pod(labels={QUOTA_LABEL: "shop"}, annotations={QOS_LEVEL: "1"})
    slim = slim_pod(full, LABEL_KEYS)
    assert set(slim["metadata"]) == {"name", "namespace", "resourceVersion", "uid", "creationTimestamp", "labels",
                                     "annotations"}  # fmt: skip
    assert slim["metadata"]["labels"] == {QUOTA_LABEL: "shop"}
    assert slim["metadata"]["annotations"] == {QOS_LEVEL: "1"}
    app = slim["spec"]["containers"][0]
    assert app == {"name": "app", "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                                                "limits": {"cpu": "1", "memory": "512Mi"}}}  # fmt: skip
    assert set(slim["status"]) == {"phase", "qosClass", "podIP", "containerStatuses", "initContainerStatuses"}
    assert len(repr(slim)) * 5 < len(repr(full))


def _tree_for(pods: list[dict[str, Any]], root: Path) -> tuple[V2Tree, PathModel]:
    """A cgroup v2 tree with each running pod's cgroup and its containers' (a static pod under its mirror's
    UID)."""
    tree, model = V2Tree(str(root)), PathModel("systemd")
    for pod in pods:
        qos = {"Guaranteed": "guaranteed", "Burstable": "burstable", "BestEffort": "besteffort"}[
            pod["status"]["qosClass"]
        ]
        uid = cgroup_uid(pod)
        tree.put(model.pod(qos, uid), V2Cgroup())  # type: ignore[arg-type]
        for cid in container_ids(pod):
            tree.put(model.container(qos, uid, cid), V2Cgroup())  # type: ignore[arg-type]
    return tree, model


def test_the_pod_source_lists_the_same_pods_and_cgroups(tmp_path: Path) -> None:
    """End to end through KubePodSource (classes, QoS tier, the cgroup found by container IDs, batch
    requests): the slim listing gives what the whole one gives."""
    full = [_on_node(make(), i) for i, make in enumerate(VARIANTS.values())]
    tree, model = _tree_for(full, tmp_path)
    slim = [slim_pod(p, LABEL_KEYS) for p in full]
    answers = []
    for items in (full, slim):
        source = KubePodSource(lambda items=items: items, tree.layout, model, Classifier(("koord-batch",), 100))
        listed = source.pods(0.0)
        answers.append(([(_as_read(m), cg) for m, cg in listed], source.batch_requests))
    assert answers[0] == answers[1]
    assert len(answers[0][0]) == len(VARIANTS) - 1  # the succeeded pod is not listed
    assert answers[0][1] is not None and answers[0][1].pods == 1


def _on_node(pod: dict[str, Any], i: int) -> dict[str, Any]:
    """The variant under its own UID and name (one node's pods)."""
    pod["metadata"]["uid"] = f"{i:08d}-52c3-4d7e-9f21-3c6d2e1a9b70"
    pod["metadata"]["name"] = f"pod-{i}"
    return pod


ODD: list[Any] = [
    None, [], "pod", 7, {}, {"metadata": None}, {"metadata": []},
    {"metadata": {"name": "odd", "namespace": "ns", "resourceVersion": "9", "labels": ["a"], "annotations": "x",
                  "creationTimestamp": 5, "uid": None}},
    {"metadata": {"name": "odd"}, "spec": [], "status": "Running"},
    {"metadata": {"name": "odd"}, "spec": {"containers": {"name": "c"}, "initContainers": ["c", None, 3],
                                           "priority": "7", "priorityClassName": ["koord-batch"], "overhead": "1"}},
    {"metadata": {"name": "odd"}, "spec": {"containers": [{"name": None, "resources": ["cpu"]},
                                                          {"resources": {"requests": "1", "limits": None}},
                                                          {"resources": {"requests": {"cpu": {"x": 1}, "memory": 5}}},
                                                          {"restartPolicy": 1}],
                                           "priority": True}},
    {"metadata": {"name": "odd"}, "status": {"phase": ["Failed"], "qosClass": 3, "containerStatuses": "c",
                                             "initContainerStatuses": [None, {"name": "i", "containerID": 42},
                                                                       {"containerID": "containerd://" + "a" * 64}]}},
]  # fmt: skip


@pytest.mark.parametrize("odd", ODD, ids=[str(i) for i in range(len(ODD))])
def test_odd_input_gives_a_sane_slim_pod_the_readers_take(odd: Any, tmp_path: Path) -> None:
    slim = slim_pod(odd, LABEL_KEYS)
    assert isinstance(slim, dict)
    meta = odd.get("metadata") if isinstance(odd, dict) else None
    if isinstance(meta, dict):
        assert all(slim["metadata"][k] == meta[k] for k in ("name", "namespace", "resourceVersion") if k in meta)
    readers(slim)  # no reader raises on what the transform kept
    odd_uid = copy.deepcopy(slim)
    odd_uid.setdefault("metadata", {})["uid"] = "uid-odd"  # listed, not skipped for want of a UID
    source = KubePodSource(lambda: [slim, odd_uid], V2Tree(str(tmp_path)).layout, PathModel("systemd"), Classifier())
    assert source.pods(0.0) == []  # no cgroup for it: not listed, and nothing raised


def test_odd_fields_answer_as_absent_ones() -> None:
    odd = ODD[-1]
    slim = slim_pod(odd, LABEL_KEYS)
    assert slim["status"]["initContainerStatuses"] == [{"name": "i"}, {"containerID": "containerd://" + "a" * 64}]
    assert container_ids(slim) == (parse_container_id("containerd://" + "a" * 64),)
    assert pod_meta(slim_pod(ODD[9], LABEL_KEYS), Classifier()).pod_class == "online"
    limits = pod_limits(slim_pod(ODD[10], LABEL_KEYS))
    assert limits == (None, None)


@pytest.fixture
def informer(kube: Kube) -> Iterator[Callable[[], Informer]]:
    started: list[Informer] = []

    def make() -> Informer:
        inf = Informer(kube, "pods", field_selector="spec.nodeName=colo-node-1", transform=pod_transform(LABEL_KEYS),
                       page_size=2, backoff_initial=0.05, backoff_max=0.2, watch_timeout=30)  # fmt: skip
        inf.start()
        started.append(inf)
        assert inf.synced.wait(5.0)
        return inf

    yield make
    for inf in started:
        inf.stop()


def test_the_informer_caches_slim_pods_under_their_keys(
    kube_api: FakeKubeAPI, informer: Callable[[], Informer]
) -> None:
    """Through the fake API server: the pods listed (in pages) and then watched are cached slim, keyed as
    whole ones were, and a pod with odd fields is still there (the transform did not raise)."""
    kube_api.put("pods", realistic_pod("a-1", "uid-a", labels={QUOTA_LABEL: "q"}))
    odd = realistic_pod("odd-1", "uid-odd")
    odd["spec"]["containers"][0]["resources"] = "lots"
    odd["status"]["containerStatuses"] = {"app": "running"}
    kube_api.put("pods", odd)
    kube_api.put("pods", realistic_pod("c-1", "uid-c", annotations={"kubernetes.io/config.mirror": "m"}))
    inf = informer()
    assert [r.query.get("limit") for r in kube_api.requests_for("GET", "^/api/v1/pods$", watch=False)] == ["2", "2"]
    kube_api.put("pods", realistic_pod("b-1", "uid-b", annotations={QOS_LEVEL: "-1"}))
    deadline = time.monotonic() + 5.0
    while inf.get("shop/b-1") is None and time.monotonic() < deadline:
        time.sleep(0.01)
    cached = {k: inf.get(f"shop/{k}") for k in ("a-1", "odd-1", "b-1", "c-1")}
    assert all(v is not None for v in cached.values())
    assert cached["a-1"] == slim_pod(kube_api.get("pods", "shop", "a-1"), LABEL_KEYS)
    assert cached["b-1"] is not None and "managedFields" not in cached["b-1"]["metadata"]
    assert pod_meta(cached["b-1"], Classifier()).pod_class == "offline"
    assert cached["c-1"] is not None and cgroup_uid(cached["c-1"]) == "m"


@pytest.mark.cgroupv1
def test_the_cluster_agent_caches_slim_pods_listed_in_small_pages(kube: Kube, kube_api: FakeKubeAPI,
                                                                  v1tree_cgroupfs: V1Tree, tmp_path: Path) -> None:  # fmt: skip
    """As colo-agent builds it: the pod informer keeps slim pods with the configured aggregate label keys,
    and a (re)list holds one small page of whole pods before the transform cuts them down."""
    from agent.config import AgentConfig
    from agent.main import build_agent
    from agent.pipeline import ClusterPipeline
    from agent.sense.pod_fields import POD_LIST_PAGE_SIZE
    from kube.client import LIST_PAGE_SIZE

    cfg = AgentConfig.model_validate({
        "cgroup_root": v1tree_cgroupfs.cgroup_root, "cgroup_driver": "cgroupfs", "state_file": "",
        "node_name": NODE, "enforcement": {"ledger_file": str(tmp_path / "ledger.json")},
        "aggregate_label_keys": ["team"],
    })  # fmt: skip
    whole = realistic_pod(labels={"team": "web", QUOTA_LABEL: "shop"})
    kube_api.put("pods", whole)
    agent = build_agent(cfg, kube=kube, layout=v1tree_cgroupfs.layout, backoff_initial=0.05, backoff_max=0.5)
    (link,) = agent.services
    assert isinstance(link, ClusterPipeline)
    try:
        link.cluster.pods.start()
        assert link.cluster.pods.synced.wait(5.0)
        cached = link.cluster.pods.get(f"{whole['metadata']['namespace']}/{whole['metadata']['name']}")
        assert cached == slim_pod(kube_api.get("pods", "shop", whole["metadata"]["name"]), ("team",))
        assert cached is not None and cached["metadata"]["labels"] == {"team": "web"}
        lists = kube_api.requests_for("GET", "^/api/v1/pods$", watch=False)
        assert [r.query.get("limit") for r in lists] == [str(POD_LIST_PAGE_SIZE)]
        assert POD_LIST_PAGE_SIZE < LIST_PAGE_SIZE
    finally:
        link.cluster.pods.stop()
        agent.stop()
