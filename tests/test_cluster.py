"""The agent in a cluster: real cgroups on this machine, the tests' Kubernetes API server, the official client."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.config import AgentConfig
from agent.main import build_agent, wants_cluster
from agent.pipeline import ClusterPipeline
from agent.runtime import Agent
from cgroup import CgroupWriter
from kube import Kube
from testsupport.cgtree import V1Tree
from testsupport.k8sobjects import NODE, container_id_of, node, pod
from testsupport.kubeapi.server import FakeKubeAPI
from testsupport.waiting import wait_for

pytestmark = pytest.mark.cgroupv1
CPU_KEY, MEM_KEY = "volcano.sh/oversubscription-cpu", "volcano.sh/oversubscription-memory"


def node_annotations(api: FakeKubeAPI) -> dict[str, str]:
    obj = api.get("nodes", None, NODE)
    assert obj is not None
    return dict(obj["metadata"].get("annotations") or {})


def in_cluster(cfg: AgentConfig, kube: Kube, tree: V1Tree) -> tuple[Agent, ClusterPipeline]:
    """The agent as colo-agent builds it in a cluster (test-sized backoff), and its link to the API."""
    agent = build_agent(cfg, kube=kube, layout=tree.layout, backoff_initial=0.05, backoff_max=0.5)
    (link,) = agent.services
    assert isinstance(link, ClusterPipeline)
    return agent, link


@pytest.fixture
def agent_in_cluster(
    v1tree_cgroupfs: V1Tree, kube: Kube, kube_api: FakeKubeAPI, tmp_path: Path
) -> Iterator[tuple[Agent, ClusterPipeline, V1Tree]]:
    tree = v1tree_cgroupfs
    cfg = AgentConfig.model_validate(
        {
            "interval": 0.2,
            "cgroup_root": tree.cgroup_root,
            "cgroup_driver": "cgroupfs",
            "state_file": "",
            "node_name": NODE,
            "enforcement": {"ledger_file": str(tmp_path / "ledger.json")},  # never the node's real ledger
            # a short peak window so a test does not wait for minute boundaries
            "oversubscription": {
                "predictor": "node_peak",  # the rule these tests were written for, trusted at once
                "trust_seconds": 0,
                "min_history_seconds": 0,
                "update_interval_seconds": 1.0,
                "peak_window": "avg_1m",
                "publish_window_seconds": 0.5,
            },
        }
    )
    agent, link = in_cluster(cfg, kube, tree)
    try:
        yield agent, link, tree
    finally:
        agent.stop()


def test_pods_mapped_classified_and_capacity_published(
    agent_in_cluster: tuple[Agent, ClusterPipeline, V1Tree], kube_api: FakeKubeAPI
) -> None:
    agent, link, tree = agent_in_cluster
    kube_api.put("nodes", node(labels={"volcano.sh/oversubscription": "true"}, annotations={"other.io/keep": "yes"}))
    on_uid, _, (on_ctr,) = tree.pod("burstable")
    off_uid, _, (off_ctr,) = tree.pod("besteffort")
    CgroupWriter(tree.layout).set_cpu_quota(on_ctr, 20_000)
    tree.start(on_ctr)
    kube_api.put(
        "pods", pod("web", on_uid, container_ids=[container_id_of(on_ctr)], cpu_request="1500m", memory_request="4Gi")
    )
    kube_api.put("pods", pod("batch", off_uid, qos="BestEffort", container_ids=[container_id_of(off_ctr)],
                             annotations={"volcano.sh/qos-level": "-1"}))  # fmt: skip
    kube_api.put("pods", pod("elsewhere", "other-uid", node_name="another-node"))
    assert not agent.view.ready()
    agent.start()
    wait_for(agent.view.ready)
    snap = wait_for(
        lambda: (s := agent.view.snapshot) and len(s.pods) == 2 and s.pods[on_uid].cpu_cores is not None and s
    )
    assert snap.pods[on_uid].meta.pod_class == "online" and snap.pods[on_uid].meta.name == "web"  # type: ignore[union-attr]
    assert snap.pods[off_uid].meta.pod_class == "offline"  # type: ignore[union-attr]
    assert snap.pods[on_uid].meta.cpu_request_cores == 1.5  # type: ignore[union-attr]
    # the pod list is this node's only
    lists = kube_api.requests_for("GET", r"/api/v1/pods$", watch=False)
    assert lists and lists[0].query.get("fieldSelector") == f"spec.nodeName={NODE}"

    annotations = wait_for(lambda: (a := node_annotations(kube_api)) and int(a.get(CPU_KEY, "0")) > 0 and a)
    section = link.oversubscription.section()
    assert section["reason"] == "computed"
    reclaimable = section["cpu"]["reclaimable"]
    assert 1.2 <= reclaimable <= 1.5  # 1.5 requested, at most 0.2 used (less on a busy machine)
    mem = section["memory"]
    assert mem["reclaimable"] == pytest.approx(4 * 2**30 - snap.pods[on_uid].memory_working_set_bytes, rel=0.05)  # type: ignore[union-attr]
    assert int(annotations[CPU_KEY]) == pytest.approx(
        max(0, min(reclaimable, section["cpu"]["headroom"])) * 1000, abs=150
    )
    assert int(annotations[MEM_KEY]) > 2**30
    assert annotations["other.io/keep"] == "yes"  # a merge patch on annotations alone
    patches = kube_api.requests_for("PATCH", rf"/api/v1/nodes/{NODE}$")
    assert patches and all(r.content_type == "application/merge-patch+json" for r in patches)
    assert all(set(r.body) == {"metadata"} and set(r.body["metadata"]) == {"annotations"} for r in patches)

    # the JSON API sees the class; the node section explains the number
    assert agent.view.node_sections["oversubscription"]()["cpu_millicores"] >= 0


def test_the_agent_writes_the_node_as_colo_agent(
    v1tree_cgroupfs: V1Tree, kube_api: FakeKubeAPI, tmp_path: Path
) -> None:
    """colo-agent's client (colo_agent.main.connect) names its writes: the Node's managedFields say colo-agent
    for the annotations and for the status (batch resources), not the client library's default."""
    from colo_agent.main import FIELD_MANAGER, connect

    tree = v1tree_cgroupfs
    kube = connect(kube_api.kubeconfig(tmp_path / "kubeconfig"))
    assert kube is not None and FIELD_MANAGER == "colo-agent"
    cfg = AgentConfig.model_validate({
        "interval": 0.2, "cgroup_root": tree.cgroup_root, "cgroup_driver": "cgroupfs", "state_file": "",
        "node_name": NODE, "enforcement": {"ledger_file": str(tmp_path / "ledger.json")},
        "oversubscription": {"min_history_seconds": 0, "peak_window": "avg_1m", "publish_window_seconds": 0.5,
                             "predictor": "node_peak", "trust_seconds": 0},
    })  # fmt: skip
    kube_api.put("nodes", node(labels={"volcano.sh/oversubscription": "true"}))
    agent, _ = in_cluster(cfg, kube, tree)
    agent.start()
    try:
        managed = wait_for(
            lambda: {(e["manager"], e.get("subresource", ""))
                     for e in (kube_api.get("nodes", None, NODE) or {})["metadata"].get("managedFields") or []}
            >= {("colo-agent", ""), ("colo-agent", "status")},
            what="the agent's annotations and status written",
        )  # fmt: skip
        assert managed
    finally:
        agent.stop()
        kube.close()
    writes = kube_api.requests_for("PATCH", rf"/api/v1/nodes/{NODE}(/status)?$")
    assert writes and all(r.query.get("fieldManager") == "colo-agent" for r in writes)
    assert all(r.headers["user-agent"].startswith("colo-agent/") for r in writes)


def test_types_switch_off_and_throttling(
    agent_in_cluster: tuple[Agent, ClusterPipeline, V1Tree], kube_api: FakeKubeAPI
) -> None:
    agent, link, tree = agent_in_cluster
    uid, _, (ctr,) = tree.pod("burstable")
    kube_api.put("nodes", node(labels={"volcano.sh/oversubscription": "true"},
                               annotations={"volcano.sh/oversubscription-types": "cpu"}))  # fmt: skip
    kube_api.put("pods", pod("web", uid, container_ids=[container_id_of(ctr)], cpu_request="1", memory_request="2Gi"))
    agent.start()
    wait_for(lambda: CPU_KEY in node_annotations(kube_api))
    assert node_annotations(kube_api)[MEM_KEY] == "0"  # memory not selected
    # small wobbles are not written more often than the update interval
    n_before = len(kube_api.requests_for("PATCH", rf"/api/v1/nodes/{NODE}$"))
    time.sleep(0.6)
    assert len(kube_api.requests_for("PATCH", rf"/api/v1/nodes/{NODE}$")) - n_before <= 1
    # switched off: Colo's annotations are removed, others' stay
    obj = kube_api.get("nodes", None, NODE)
    assert obj is not None
    obj["metadata"]["labels"] = {}
    obj["metadata"]["annotations"]["other.io/keep"] = "yes"
    kube_api.put("nodes", obj)
    wait_for(lambda: CPU_KEY not in node_annotations(kube_api) and MEM_KEY not in node_annotations(kube_api))
    assert node_annotations(kube_api)["other.io/keep"] == "yes"
    assert link.oversubscription.section()["enabled"] is False


def test_api_outage_and_faults(agent_in_cluster: tuple[Agent, ClusterPipeline, V1Tree], kube_api: FakeKubeAPI) -> None:
    agent, link, tree = agent_in_cluster
    uid, _, (ctr,) = tree.pod("burstable")
    CgroupWriter(tree.layout).set_cpu_quota(ctr, 20_000)
    tree.start(ctr)
    kube_api.put("nodes", node(labels={"volcano.sh/oversubscription": "true"}))
    kube_api.put("pods", pod("web", uid, container_ids=[container_id_of(ctr)], cpu_request="1", memory_request="1Gi"))
    # the first patches fail: 500, then 429 with Retry-After, then a dropped connection
    kube_api.inject("PATCH", r"/api/v1/nodes/", status=500)
    kube_api.inject("PATCH", r"/api/v1/nodes/", status=429, retry_after=0.3)
    kube_api.inject("PATCH", r"/api/v1/nodes/", drop=True)
    agent.start()
    wait_for(lambda: CPU_KEY in node_annotations(kube_api))
    assert link.publisher.failures >= 3

    # the API server goes away; the agent keeps measuring and exporting
    kube_api.stop()
    seq = agent.view.snapshot.seq  # type: ignore[union-attr]
    time.sleep(1.0)
    assert agent.view.snapshot.seq >= seq + 3  # type: ignore[union-attr]
    assert agent.view.healthy()
    # meanwhile the node's truth changes: the oversubscription types (written by someone else)
    obj = kube_api.get("nodes", None, NODE)
    assert obj is not None
    obj["metadata"]["annotations"]["volcano.sh/oversubscription-types"] = "cpu"
    kube_api.put("nodes", obj)
    kube_api.start()
    # back: the informer resyncs and the annotation converges to the current value
    wait_for(lambda: node_annotations(kube_api).get(MEM_KEY) == "0")
    assert uid in agent.view.snapshot.pods  # type: ignore[union-attr]


def test_stalled_sampling_publishes_zero(
    agent_in_cluster: tuple[Agent, ClusterPipeline, V1Tree], kube_api: FakeKubeAPI
) -> None:
    agent, link, tree = agent_in_cluster
    uid, _, (ctr,) = tree.pod("burstable")
    kube_api.put("nodes", node(labels={"volcano.sh/oversubscription": "true"}))
    kube_api.put("pods", pod("web", uid, container_ids=[container_id_of(ctr)], cpu_request="1", memory_request="1Gi"))
    agent.start()
    wait_for(lambda: int(node_annotations(kube_api).get(CPU_KEY, "0")) > 0)
    agent.loop.stop()  # sampling stalls
    wait_for(lambda: node_annotations(kube_api).get(CPU_KEY) == "0" and node_annotations(kube_api).get(MEM_KEY) == "0")
    assert "stalled" in link.oversubscription.section()["reason"]


def test_standalone_without_cluster_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert Kube.connect(None) is None  # no kubeconfig and not in a pod: no client
    assert wants_cluster(False, None) is False
    assert wants_cluster(False, "/etc/kubeconfig") is True and wants_cluster(True, "/etc/kubeconfig") is False
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    assert wants_cluster(False, None) is True and wants_cluster(True, None) is False


def test_the_link_is_a_service_and_its_stage_stops_nothing(
    agent_in_cluster: tuple[Agent, ClusterPipeline, V1Tree],
) -> None:
    """Shutdown (last capacity round, restore) must run once: the stage is not the service."""
    agent, link, _ = agent_in_cluster
    assert link in agent.services and link not in agent.stages
    assert not any(s is t for s in agent.stages for t in agent.services)
    assert [type(s).__name__ for s in agent.stages] == ["ProtectionStage"]


def test_everything_is_wired_once_by_the_composition_root(
    agent_in_cluster: tuple[Agent, ClusterPipeline, V1Tree],
) -> None:
    """The sampler reads the link's pod source from the start; the view's sections cannot be swapped later."""
    agent, link, _ = agent_in_cluster
    assert agent.sampler.source is link.cluster.source and agent.stages == (link.stage,)
    assert agent.view.node_sections["enforcement"] == link.enforcement_section
    with pytest.raises(RuntimeError):
        agent.view.install(node_sections={}, metric_sources={})


def test_api_reachability_ignores_refusals(
    agent_in_cluster: tuple[Agent, ClusterPipeline, V1Tree], kube_api: FakeKubeAPI
) -> None:
    agent, link, tree = agent_in_cluster
    uid, _, (ctr,) = tree.pod("burstable")
    kube_api.put("nodes", node(labels={"volcano.sh/oversubscription": "true"}))
    kube_api.put("pods", pod("web", uid, container_ids=[container_id_of(ctr)], cpu_request="1", memory_request="1Gi"))
    kube_api.inject("PATCH", r"/api/v1/nodes/", status=403, times=None)  # RBAC refuses: the server is there
    agent.start()
    wait_for(lambda: link.publisher.failures >= 3)
    assert link.publisher.last_status == 403 and link.cluster.api_healthy()
    kube_api.clear_faults()
    kube_api.inject("PATCH", r"/api/v1/nodes/", status=503, times=None)
    wait_for(lambda: link.publisher.last_status == 503)
    assert not link.cluster.api_healthy()
    kube_api.clear_faults()  # any successful call clears it
    wait_for(link.cluster.api_healthy)
    assert CPU_KEY in node_annotations(kube_api) and link.publisher.last_status is None
    # the watches lose the server: unreachable until they are back
    kube_api.stop()
    wait_for(lambda: not link.cluster.api_healthy())
    kube_api.start()
    wait_for(link.cluster.api_healthy)


def batch_pod(name: str, uid: str, cpu_milli: int, memory: int) -> dict[str, Any]:
    """A bound batch pod (no cgroup needed: the scheduler and kubelet count it all the same)."""
    obj = pod(name, uid, qos="BestEffort", annotations={"volcano.sh/qos-level": "-1"})
    obj["spec"]["containers"][0]["resources"] = {
        "requests": {"kubernetes.io/batch-cpu": str(cpu_milli), "kubernetes.io/batch-memory": str(memory)},
        "limits": {"kubernetes.io/batch-cpu": str(cpu_milli), "kubernetes.io/batch-memory": str(memory)},
    }
    return obj


def batch_status(api: FakeKubeAPI) -> tuple[str | None, ...]:
    obj = api.get("nodes", None, NODE) or {}
    st = obj.get("status") or {}
    return tuple(st.get(f, {}).get(k) for f in ("capacity", "allocatable")
                 for k in ("kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"))  # fmt: skip


def test_shutdown_publishes_zero_annotations_and_floors_batch_resources(
    v1tree_cgroupfs: V1Tree, kube: Kube, kube_api: FakeKubeAPI
) -> None:
    """At shutdown Volcano's annotations go to 0 and the batch resources to what the node's batch pods request
    (kubelet re-admits them at its restart). The last round decides on the node as the API server has it:
    the informer's copy may still show an earlier write (the first pass publishes cpu 0, its CPU rate not
    known yet), and a round deciding on it skipped the value it believed already 0 (issue 22's flaky test)."""
    tree = v1tree_cgroupfs
    cfg = AgentConfig.model_validate(
        {"interval": 0.2, "cgroup_root": tree.cgroup_root, "cgroup_driver": "cgroupfs", "state_file": "",
         "node_name": NODE, "enforcement": {"ledger_file": ""},
         "oversubscription": {"min_history_seconds": 0, "peak_window": "avg_1m", "publish_window_seconds": 0.5,
                              "update_interval_seconds": 0.5, "predictor": "node_peak", "trust_seconds": 0}}
    )  # fmt: skip
    agent, _ = in_cluster(cfg, kube, tree)
    uid, _, (ctr,) = tree.pod("burstable")
    kube_api.put("nodes", node(labels={"volcano.sh/oversubscription": "true"}, annotations={"other.io/keep": "yes"}))
    kube_api.put("pods", pod("web", uid, container_ids=[container_id_of(ctr)], cpu_request="1", memory_request="1Gi"))
    kube_api.put("pods", batch_pod("spark", "spark-uid", 300, 256 << 20))
    agent.start()
    try:
        wait_for(lambda: int(node_annotations(kube_api).get(CPU_KEY, "0")) > 0)
        wait_for(lambda: int(node_annotations(kube_api).get(MEM_KEY, "0")) > 0)
    finally:
        agent.stop()
    annotations = node_annotations(kube_api)
    assert (annotations[CPU_KEY], annotations[MEM_KEY], annotations["other.io/keep"]) == ("0", "0", "yes")
    assert batch_status(kube_api) == ("300", str(256 << 20)) * 2


def test_shutdown_removes_the_evicting_mark_and_taint(
    v1tree_cgroupfs: V1Tree, kube: Kube, kube_api: FakeKubeAPI
) -> None:
    """Evicting when the agent stops: the mark and the NoSchedule taint it set go with it (issue 22)."""
    tree = v1tree_cgroupfs
    cfg = AgentConfig.model_validate(
        {"interval": 0.2, "cgroup_root": tree.cgroup_root, "cgroup_driver": "cgroupfs", "state_file": "",
         "node_name": NODE, "enforcement": {"ledger_file": "", "eviction": {"taint": True}}}
    )  # fmt: skip
    agent, link = in_cluster(cfg, kube, tree)
    # any memory use is above a 1% high watermark of 64 MiB: the node evicts (nothing to evict: no offline pod);
    # of the default 64 GiB node's (655 MiB), a quiet machine's usage (500 MB of 24 GB, seen) stays below it
    kube_api.put("nodes", node(memory="64Mi", annotations={"volcano.sh/evicting-memory-high-watermark": "1",
                                                           "volcano.sh/evicting-memory-low-watermark": "0"}))  # fmt: skip
    kube_api.put("pods", batch_pod("spark", "spark-uid", 300, 256 << 20))

    def taints() -> list[str]:
        obj = kube_api.get("nodes", None, NODE) or {}
        return [t["key"] for t in (obj.get("spec") or {}).get("taints") or []]

    agent.start()
    try:
        wait_for(lambda: node_annotations(kube_api).get("volcano.sh/offline-job-evicting") == "true")
        wait_for(lambda: taints() == ["volcano.sh/offline-job-evicting"])
    finally:
        agent.stop()
    assert "volcano.sh/offline-job-evicting" not in node_annotations(kube_api) and taints() == []
    assert link.evictor.is_evicting(), "the state itself is the agent's; only what it wrote on the node goes"


def test_the_overcommit_rule_shares_the_publishers_definition(
    v1tree_cgroupfs: V1Tree, kube: Kube, kube_api: FakeKubeAPI
) -> None:
    tree = v1tree_cgroupfs
    cfg = AgentConfig.model_validate(
        {"cgroup_root": tree.cgroup_root, "cgroup_driver": "cgroupfs", "state_file": "", "node_name": NODE,
         "enforcement": {"ledger_file": ""}, "oversubscription": {"enabled_on_all_nodes": True}}
    )  # fmt: skip
    _, link = in_cluster(cfg, kube, tree)
    unlabelled = node()
    assert link.oversubscription.enabled(unlabelled) and link.evictor.oversubscribed(unlabelled)


def test_extended_resources_by_default(v1tree_cgroupfs: V1Tree, kube: Kube, kube_api: FakeKubeAPI) -> None:
    tree = v1tree_cgroupfs
    cfg = AgentConfig.model_validate(
        {"interval": 0.2, "cgroup_root": tree.cgroup_root, "cgroup_driver": "cgroupfs", "state_file": "",
         "node_name": NODE, "enforcement": {"ledger_file": ""},
         "oversubscription": {"min_history_seconds": 0, "peak_window": "avg_1m", "publish_window_seconds": 0.5,
                              "update_interval_seconds": 0.5, "predictor": "node_peak", "trust_seconds": 0}}
    )  # fmt: skip
    agent, _ = in_cluster(cfg, kube, tree)
    uid, _, (ctr,) = tree.pod("burstable")
    kube_api.put("nodes", node(labels={"volcano.sh/oversubscription": "true"}))
    kube_api.put("pods", pod("web", uid, container_ids=[container_id_of(ctr)], cpu_request="1", memory_request="1Gi"))
    agent.start()
    try:

        def batch_cpu() -> int:
            obj = kube_api.get("nodes", None, NODE)
            return int(((obj or {}).get("status") or {}).get("allocatable", {}).get("kubernetes.io/batch-cpu", "0"))

        wait_for(lambda: batch_cpu() > 0)
        status = kube_api.requests_for("PATCH", rf"/api/v1/nodes/{NODE}/status$")
        assert status and set(status[0].body) == {"status"}
        obj = kube_api.get("nodes", None, NODE)
        assert obj is not None and "kubernetes.io/batch-memory" in obj["status"]["capacity"]
    finally:
        agent.stop()


def test_static_pod_mirror_maps_to_its_cgroup(v1tree_cgroupfs: V1Tree) -> None:
    """A mirror pod's UID is not its cgroup's: kubelet names the cgroup after the config hash."""
    from agent.sense.pod_source import KubePodSource
    from contract.classify import Classifier

    tree = v1tree_cgroupfs
    config_hash, pod_path, (ctr,) = tree.pod("burstable")
    mirror = pod("kube-apiserver", "mirror-uid-1234", container_ids=[container_id_of(ctr)],
                 annotations={"kubernetes.io/config.mirror": config_hash})  # fmt: skip
    source = KubePodSource(lambda: [mirror], tree.layout, tree.model, Classifier())
    ((meta, cg),) = source.pods(0.0)
    assert meta.uid == "mirror-uid-1234" and cg.path == pod_path and len(cg.containers) == 1
