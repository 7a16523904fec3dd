"""Batch pods end to end on the tests' API server and this machine's real cgroup v1 hierarchy (issue 11):

a colocation profile (colo-controller's webhook over HTTPS) converts a pod's cpu/memory to
kubernetes.io/batch-* → the converted pod, as the JSON patch leaves it, bound to the node with its container
statuses → the agent's informer lists it and classifies it offline (by its batch resources alone: the
profile sets no other marker) → the node advertises batch capacity in status, with the pod's requests
allocated → the agent writes the pod's batch limits into its cgroups (agent/enforce/strategies/batch_limits.py)."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch  # type: ignore[import-untyped]
import pytest

from agent.pipeline import ClusterPipeline
from agent.runtime import Agent
from cgroup import CgroupReader, CgroupWriter
from controller.admission.server import AdmissionWebhook
from controller.admission.settings import AdmissionSettings
from controller.metrics import ControllerMetrics
from kube import Kube
from tests.agentbuild import build_agent
from tests.test_admission_server import free_port, make_cert, post
from testsupport.admission_reviews import container, pod, review
from testsupport.certs import have_openssl
from testsupport.cgtree import V1Tree
from testsupport.k8sobjects import NODE, container_id_of, node
from testsupport.k8sobjects import pod as running_pod
from testsupport.kubeapi.server import FakeKubeAPI
from testsupport.waiting import wait_for

pytestmark = [
    pytest.mark.cgroupv1,
    pytest.mark.skipif(not have_openssl(), reason="openssl (to make the webhook's certificate) missing"),
]
MI = 1 << 20
BATCH_CPU, BATCH_MEMORY = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"
PROFILE = {
    "name": "spark-batch",
    "namespaceSelector": {"matchLabels": {"colo.io/colocation": "batch"}},
    "selector": {"matchLabels": {"spark-role": "executor"}},
    "batch_resources": True,  # nothing else: the batch resources alone make the pod offline
}


@pytest.fixture
def webhook(kube: Kube, kube_api: FakeKubeAPI, tmp_path: Path) -> Iterator[AdmissionWebhook]:
    kube_api.put("namespaces", {"metadata": {"name": "spark", "labels": {"colo.io/colocation": "batch"}}})
    crt, key = make_cert(tmp_path / "webhook-tls", "colo-controller")
    settings = AdmissionSettings.model_validate(
        {"listen": f"127.0.0.1:{free_port()}", "cert_file": str(crt), "key_file": str(key), "profiles": [PROFILE]}
    )
    hook = AdmissionWebhook(kube, settings, ControllerMetrics())
    hook.start()
    try:
        wait_for(lambda: hook.server.started and hook.namespaces.synced.is_set())
        yield hook
    finally:
        hook.stop()


@pytest.fixture
def agent(v1tree_cgroupfs: V1Tree, kube: Kube, tmp_path: Path) -> Iterator[tuple[Agent, ClusterPipeline]]:
    tree = v1tree_cgroupfs
    # no history needed, a short peak window, extended_resources left at its default
    agent, link = build_agent(
        tree.layout, tree.model, kube, str(tmp_path / "ledger.json"), interval=0.2,
        oversubscription={"min_history_seconds": 0, "update_interval_seconds": 1.0, "peak_window": "avg_1m",
                          "publish_window_seconds": 1.0},
    )  # fmt: skip
    try:
        yield agent, link
    finally:
        agent.stop()


def convert(hook: AdmissionWebhook) -> dict[str, Any]:
    """A Spark executor created in namespace spark, through the webhook; the pod as the patch leaves it."""
    resources = {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"cpu": "300m", "memory": "256Mi"}}
    created = pod(labels={"spark-role": "executor"}, containers=[container("executor", resources)])
    resp = post(hook, json.dumps(review(created)).encode())
    assert resp.status_code == 200
    answer = resp.json()["response"]
    assert answer["allowed"] is True and answer["patchType"] == "JSONPatch"
    converted: dict[str, Any] = jsonpatch.apply_patch(created, json.loads(base64.b64decode(answer["patch"])))
    return converted


def bind(converted: dict[str, Any], uid: str, container_cgroup: str) -> dict[str, Any]:
    """What the API server, the scheduler and kubelet add to the created pod: name and uid, the node, the
    status of a running BestEffort pod (kubelet's view of a pod without cpu/memory requests)."""
    obj = json.loads(json.dumps(converted))
    meta = obj["metadata"]
    meta.update(name=meta.pop("generateName") + uid[:5], uid=uid, resourceVersion="1",
                creationTimestamp="2026-11-24T10:00:00Z")  # fmt: skip
    obj["spec"]["nodeName"] = NODE
    # the fake API server's own pod helper gives the running status; only its status is taken
    status = running_pod("x", uid, qos="BestEffort", container_ids=[container_id_of(container_cgroup)])["status"]
    status["containerStatuses"][0]["name"] = obj["spec"]["containers"][0]["name"]
    obj["status"] = status
    return obj


def test_profile_to_converted_pod_to_batch_capacity_to_enforced_limits(
    webhook: AdmissionWebhook,
    agent: tuple[Agent, ClusterPipeline],
    v1tree_cgroupfs: V1Tree,
    kube_api: FakeKubeAPI,
) -> None:
    tree = v1tree_cgroupfs
    the_agent, link = agent
    # an online pod whose idle request is the node's reclaimable capacity
    kube_api.put("nodes", node(labels={"volcano.sh/oversubscription": "true"}))
    web_uid, _, (web_ctr,) = tree.pod("burstable")
    kube_api.put("pods", running_pod("web", web_uid, container_ids=[container_id_of(web_ctr)], cpu_request="1500m",
                                     memory_request="4Gi"))  # fmt: skip

    # 1. the profile converts the pod
    converted = convert(webhook)
    (ctr_spec,) = converted["spec"]["containers"]
    assert ctr_spec["resources"] == {
        "requests": {BATCH_CPU: "200", BATCH_MEMORY: str(256 * MI)},
        "limits": {BATCH_CPU: "300", BATCH_MEMORY: str(256 * MI)},
    }
    assert "qos-level" not in json.dumps(converted["metadata"]), "the profile sets no offline marker"

    # 2. bound to the node and running in the besteffort tier, as kubelet puts a pod without cpu/memory requests
    uid = str(uuid.uuid4())
    _, pod_cgroup, ctr = tree.pod("besteffort", uid=uid)
    w = CgroupWriter(tree.layout)
    for cg in (pod_cgroup, ctr[0]):
        w.set_cpu_shares(cg, 2)
    kube_api.put("pods", bind(converted, uid, ctr[0]))
    the_agent.start()

    # 3. the informer lists it, and it is offline with its batch requests
    def seen() -> Any:
        snap = the_agent.view.snapshot
        return None if snap is None else snap.pods.get(uid)

    wait_for(lambda: seen() is not None)
    meta = seen().meta
    assert meta.pod_class == "offline" and meta.cpu_request_cores == 0.0
    assert meta.batch is not None and (meta.batch.cpu_request_milli, meta.batch.memory_request_bytes) == (200, 256 * MI)

    # 4. the node advertises batch capacity in status, and the pod's requests are allocated against it
    def status_values() -> dict[str, str]:
        obj = kube_api.get("nodes", None, NODE) or {}
        return {k: v for k, v in (obj.get("status") or {}).get("allocatable", {}).items() if k.startswith("kubernetes")}

    # above the floor (what the batch pod requests, published from the first round): computed capacity
    wait_for(lambda: int(status_values().get(BATCH_CPU, "0")) > 200
             and int(status_values().get(BATCH_MEMORY, "0")) > 256 * MI)  # fmt: skip
    allocatable = status_values()
    obj = kube_api.get("nodes", None, NODE)
    assert obj is not None and obj["status"]["capacity"][BATCH_CPU] == allocatable[BATCH_CPU]
    # batch-* lends what nobody requested too (issue 20); Volcano's annotation, added on top of allocatable, at
    # most the web pod's idle request
    assert int(allocatable[BATCH_CPU]) > 1500, "batch-cpu: capacity nobody requested is lent too"

    # the annotations are decided apart from batch-* (their own rise waits update_interval_seconds after the 0
    # written before the first pass)
    def annotation() -> int:
        node_obj = kube_api.get("nodes", None, NODE) or {}
        return int(
            ((node_obj.get("metadata") or {}).get("annotations") or {}).get("volcano.sh/oversubscription-cpu", 0)
        )

    wait_for(lambda: annotation() > 0)
    assert 0 < annotation() <= 1500, "the annotation: at most the web pod's idle request"
    batch = link.oversubscription.section()["batch"]
    assert batch["pods"] == 1
    assert batch["cpu"]["allocated"] == 200 and batch["memory"]["allocated"] == 256 * MI
    assert batch["cpu"]["free"] == batch["cpu"]["allocatable"] - 200

    # 5. the agent writes the pod's own limits from its batch values, as kubelet would have for cpu 200m/300m and
    #    memory 256Mi: quota 30000 per 100000 (suppression may hold the pod's lower), shares 204, memory limit
    reader = CgroupReader(tree.layout)
    wait_for(lambda: reader.memory_limit(ctr[0]) == 256 * MI and reader.cpu_settings(ctr[0]).quota_us is not None)
    assert reader.cpu_settings(ctr[0]).shares == 204 and reader.memory_limit(pod_cgroup) == 256 * MI
    assert 0 < (reader.cpu_settings(ctr[0]).quota_us or 0) <= 30_000
    assert 0 < (reader.cpu_settings(pod_cgroup).quota_us or 0) <= 30_000
    assert reader.memory_limit(web_ctr) is None and reader.cpu_settings(web_ctr).quota_us is None, "online untouched"
