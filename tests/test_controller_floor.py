"""The controller floors the batch capacity of nodes whose agent went silent (issue 22): after
`polling.floor_silent_after` cycles without an answer, `kubernetes.io/batch-*` = the allocated amount and
`volcano.sh/oversubscription-*` = 0, an Event and a gauge; once the agent answers it stops touching them."""

from __future__ import annotations

from typing import Any

import pytest

from agent.sense.pod_source import pod_meta
from contract.annotations import BATCH_CPU, BATCH_MEMORY, LOAD_SCORE, OVERSUBSCRIPTION_CPU, OVERSUBSCRIPTION_MEMORY
from contract.classify import Classifier as AgentClassifier
from controller.floor import SilentAgents, allocated_by_node, batch_facts, floor_writes
from controller.service import Controller
from kube import Kube
from kube.resources import pod_batch_requests
from tests.controller_fleet import (  # noqa: F401
    add_slice,
    config,
    fleet_fixture,
    run_cycle,
    start_synced,
    started_fixture,
)
from testsupport.agentfleet import AgentFleet, agent_payload
from testsupport.kubeapi.fixtures import kube, kube_api  # noqa: F401
from testsupport.kubeapi.server import FakeKubeAPI
from testsupport.waiting import wait_for

MI = 1 << 20


def container(name: str, cpu: int | None = None, memory: int | None = None, **extra: Any) -> dict[str, Any]:
    requests: dict[str, str] = {}
    if cpu is not None:
        requests[BATCH_CPU] = str(cpu)
    if memory is not None:
        requests[BATCH_MEMORY] = str(memory)
    return {"name": name, "resources": {"requests": requests, "limits": dict(requests)}, **extra}


def pod(name: str, node: str, containers: list[dict[str, Any]], phase: str = "Running", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "batch", "uid": f"uid-{name}"},
        "spec": {"nodeName": node, "containers": containers, **spec},
        "status": {"phase": phase},
    }


# ---- the arithmetic: the same as the agent's, and kubelet's admission on top of it -------------------


@pytest.mark.parametrize(
    "spec",
    [
        {"containers": [container("a", 300, 256 * MI), container("b", 200)]},
        {"containers": [container("a", 100, 64 * MI)], "initContainers": [container("i", 500, 512 * MI)]},
        {
            "containers": [container("a", 100, 64 * MI)],
            "initContainers": [container("s", 50, 32 * MI, restartPolicy="Always"), container("i", 120, 10 * MI)],
        },
        {"containers": [container("a", 100, MI)], "overhead": {"cpu": "250m", "memory": "100Mi"}},
    ],
)
def test_pod_batch_requests_equal_the_agents(spec: dict[str, Any]) -> None:
    p = pod("p", "n1", spec.pop("containers"), **spec)
    meta = pod_meta(p, AgentClassifier())
    assert meta.batch is not None
    assert pod_batch_requests(p) == (meta.batch.cpu_request_milli, meta.batch.memory_request_bytes)


def test_finished_and_plain_pods_hold_no_batch_requests() -> None:
    assert pod_batch_requests(pod("done", "n1", [container("a", 300, MI)], phase="Succeeded")) is None
    assert pod_batch_requests(pod("failed", "n1", [container("a", 300, MI)], phase="Failed")) is None
    assert pod_batch_requests(pod("plain", "n1", [{"name": "a", "resources": {"requests": {"cpu": "1"}}}])) is None


def test_silence_is_counted_per_node_and_ends_with_an_answer() -> None:
    s = SilentAgents(after=3)
    assert s.observe({"n1", "n2"}, {"n1"}).floor == frozenset()
    assert s.observe({"n1", "n2"}, {"n1"}).floor == frozenset()
    assert s.observe({"n1", "n2"}, {"n1"}).floor == {"n2"}
    s.floored.add("n2")
    assert s.observe({"n1", "n2"}, set()).floor == {"n2"}  # n1 missed once only
    back = s.observe({"n1", "n2"}, {"n1", "n2"})
    assert back.answered == {"n2"} and back.floor == frozenset() and s.floored == set()
    assert SilentAgents(after=0).observe({"n1"}, set()).floor == frozenset()  # 0: switched off
    s2 = SilentAgents(after=1)
    assert s2.observe(set(), set()).floor == frozenset()  # a node that publishes nothing is never floored


def kubelet_admits(allocatable: dict[str, str], pods: list[dict[str, Any]]) -> bool:
    """kubelet's re-admission at start: every running pod's batch requests fit in allocatable together."""
    held = allocated_by_node({**p, "colo.io/batch-requests": batch_facts(p)} for p in pods)
    cpu, memory = held.get("n1", (0, 0))
    return cpu <= int(allocatable.get(BATCH_CPU, "0")) and memory <= int(allocatable.get(BATCH_MEMORY, "0"))


@pytest.mark.parametrize("published", [(0, 0), (100, MI), (400, 300 * MI), (5000, 8 << 30)])
def test_the_floor_readmits_every_running_pod_and_frees_nothing(published: tuple[int, int]) -> None:
    pods = [
        pod("a", "n1", [container("a", 300, 256 * MI)]),
        pod("b", "n1", [container("b", 100, 64 * MI)], phase="Pending"),
        pod("c", "n1", [container("c", 900, MI)], phase="Succeeded"),
    ]
    node = {
        "metadata": {"name": "n1", "annotations": {OVERSUBSCRIPTION_CPU: "7", OVERSUBSCRIPTION_MEMORY: "9"}},
        "status": {"allocatable": {BATCH_CPU: str(published[0]), BATCH_MEMORY: str(published[1])}},
    }
    allocated = allocated_by_node({**p, "colo.io/batch-requests": batch_facts(p)} for p in pods)["n1"]
    assert allocated == (400, 320 * MI)
    resources, annotations = floor_writes(node, allocated)
    assert annotations == {OVERSUBSCRIPTION_CPU: "0", OVERSUBSCRIPTION_MEMORY: "0"}
    floored = {**node["status"]["allocatable"], **resources}
    assert kubelet_admits(floored, pods)
    assert int(floored[BATCH_CPU]) - allocated[0] == 0 and int(floored[BATCH_MEMORY]) - allocated[1] == 0
    node["status"]["allocatable"] = floored
    node["metadata"]["annotations"] = {OVERSUBSCRIPTION_CPU: "0", OVERSUBSCRIPTION_MEMORY: "0"}
    assert floor_writes(node, allocated) == ({}, {})  # already floored: nothing to write


# ---- against the API server ---------------------------------------------------------------------------


def publishing_node(api: FakeKubeAPI, name: str, *, scored: bool = False) -> None:
    """A node carrying batch capacity; `scored`: the controller once wrote its load score there."""
    annotations = {OVERSUBSCRIPTION_CPU: "1500", OVERSUBSCRIPTION_MEMORY: str(2 << 30)}
    if scored:
        annotations[LOAD_SCORE] = "42,2026-11-25T10:00:00Z"
    api.put(
        "nodes",
        {
            "metadata": {"name": name, "uid": f"uid-{name}", "annotations": annotations},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "192.0.2.10"}],
                "capacity": {"cpu": "8", BATCH_CPU: "1500", BATCH_MEMORY: str(2 << 30)},
                "allocatable": {"cpu": "8", "memory": "16Gi", BATCH_CPU: "1500", BATCH_MEMORY: str(2 << 30)},
            },
        },
    )


def node_writes(api: FakeKubeAPI, name: str) -> int:
    return len(api.requests_for("PATCH", rf"/api/v1/nodes/{name}(/status)?$"))


def floored_gauge(c: Controller) -> float | None:
    return c.metrics.registry.get_sample_value("colo_controller_nodes_floored")


def events(api: FakeKubeAPI, reason: str) -> list[dict[str, Any]]:
    return [e for e in api.objects("events") if e.get("reason") == reason]


def test_silent_agents_nodes_are_floored_and_released(
    kube_api: FakeKubeAPI,  # noqa: F811
    kube: Kube,  # noqa: F811
    fleet: AgentFleet,
    started: list[Controller],
) -> None:
    for name in ("answering", "failing"):
        add_slice(kube_api, name, fleet.add(name, agent_payload(name, 0.3, oversubscription=(1500, 2 << 30))))
        publishing_node(kube_api, name)
    publishing_node(kube_api, "gone", scored=True)  # its agent was deleted: no endpoint at all
    publishing_node(kube_api, "koordlet", scored=False)  # another agent publishes there: never Colo's to floor
    kube_api.put("nodes", {"metadata": {"name": "plain"}, "status": {}})  # never had an agent: not touched
    for p in (
        pod("run", "failing", [container("a", 300, 256 * MI)]),
        pod("wait", "failing", [container("a", 100, 64 * MI)], phase="Pending"),
        pod("done", "failing", [container("a", 700, 512 * MI)], phase="Succeeded"),
        pod("web", "failing", [{"name": "a", "resources": {"requests": {"cpu": "2"}}}]),
        pod("other", "answering", [container("a", 200, MI)]),
    ):
        kube_api.put("pods", p)
    fleet.set("failing", mode="status")
    c = start_synced(kube, config(polling={"floor_silent_after": 3}), started)
    before = {n: node_writes(kube_api, n) for n in ("answering", "failing", "gone", "plain", "koordlet")}

    for _ in range(2):
        run_cycle(c)
    assert kube_api.get("nodes", None, "failing")["status"]["allocatable"][BATCH_CPU] == "1500"  # not yet
    assert floored_gauge(c) == 0

    run_cycle(c)  # the third silent cycle
    for name in ("failing", "gone"):
        node = kube_api.get("nodes", None, name)
        held = (400, 320 * MI) if name == "failing" else (0, 0)
        for part in ("capacity", "allocatable"):
            assert node["status"][part][BATCH_CPU] == str(held[0]), (name, part)
            assert node["status"][part][BATCH_MEMORY] == str(held[1]), (name, part)
        anns = node["metadata"]["annotations"]
        assert anns[OVERSUBSCRIPTION_CPU] == "0" and anns[OVERSUBSCRIPTION_MEMORY] == "0"
        assert node["status"]["allocatable"]["cpu"] == "8"  # the rest of status is not the controller's
    assert kube_api.get("nodes", None, "answering")["status"]["allocatable"][BATCH_CPU] == "1500"
    assert node_writes(kube_api, "plain") == before["plain"]
    assert node_writes(kube_api, "koordlet") == before["koordlet"]
    assert kube_api.get("nodes", None, "koordlet")["status"]["allocatable"][BATCH_CPU] == "1500"
    assert floored_gauge(c) == 2
    floored = events(kube_api, "BatchCapacityFloored")
    assert sorted(e["involvedObject"]["name"] for e in floored) == ["failing", "gone"]
    assert all(e["type"] == "Warning" and e["metadata"]["namespace"] == "default" for e in floored)
    assert "400 milli-cores" in next(e["message"] for e in floored if e["involvedObject"]["name"] == "failing")

    writes = {n: node_writes(kube_api, n) for n in ("failing", "gone")}
    run_cycle(c)  # still silent, already floored: nothing more to write, no second Event
    assert {n: node_writes(kube_api, n) for n in ("failing", "gone")} == writes
    assert len(events(kube_api, "BatchCapacityFloored")) == 2

    kube_api.delete("pods", "batch", "run")  # a batch pod left: the floor follows the allocated amount down
    pods = c.cluster.pods
    assert pods is not None
    wait_for(lambda: pods.get("batch/run") is None, what="the deletion in the controller's pod informer")
    run_cycle(c)
    assert kube_api.get("nodes", None, "failing")["status"]["allocatable"][BATCH_CPU] == "100"

    fleet.set("failing", mode="ok")  # the agent answers again: it is its node's publisher once more
    run_cycle(c)
    assert floored_gauge(c) == 1
    assert [e["involvedObject"]["name"] for e in events(kube_api, "BatchCapacityReleased")] == ["failing"]
    writes = node_writes(kube_api, "failing")
    kube.patch_node_extended_resources("failing", {BATCH_CPU: "1200", BATCH_MEMORY: str(MI)})  # the agent's own
    for _ in range(4):
        run_cycle(c)
    assert node_writes(kube_api, "failing") == writes + 1  # only the agent's
    assert kube_api.get("nodes", None, "failing")["status"]["allocatable"][BATCH_CPU] == "1200"


def test_floor_switched_off(
    kube_api: FakeKubeAPI,  # noqa: F811
    kube: Kube,  # noqa: F811
    started: list[Controller],
) -> None:
    publishing_node(kube_api, "gone")
    c = start_synced(kube, config(polling={"floor_silent_after": 0}), started)
    for _ in range(5):
        run_cycle(c)
    assert kube_api.get("nodes", None, "gone")["status"]["allocatable"][BATCH_CPU] == "1500"
    assert c.floorer is None


def test_an_agent_that_publishes_but_cannot_be_reached_is_left_alone(
    kube_api: FakeKubeAPI,  # noqa: F811
    kube: Kube,  # noqa: F811
    fleet: AgentFleet,
    started: list[Controller],
) -> None:
    """A NetworkPolicy or a certificate keeps the controller from the agent, which runs and publishes: after
    one floor, the agent's own write says it is alive, and the controller stops writing against it."""
    add_slice(kube_api, "n1", fleet.add("n1", agent_payload("n1", 0.3, oversubscription=(1500, 2 << 30))))
    publishing_node(kube_api, "n1")
    fleet.set("n1", mode="status")
    c = start_synced(kube, config(polling={"floor_silent_after": 2}), started)
    for _ in range(2):
        run_cycle(c)
    assert kube_api.get("nodes", None, "n1")["status"]["allocatable"][BATCH_CPU] == "0", "floored"
    kube.patch_node_extended_resources("n1", {BATCH_CPU: "1200", BATCH_MEMORY: str(MI)})  # the agent's own write
    writes = node_writes(kube_api, "n1")
    for _ in range(4):
        run_cycle(c)
    assert node_writes(kube_api, "n1") == writes, "no write against the publishing agent"
    assert kube_api.get("nodes", None, "n1")["status"]["allocatable"][BATCH_CPU] == "1200"
    assert c.metrics.registry.get_sample_value("colo_controller_nodes_unreachable_publishing") == 1
    assert floored_gauge(c) == 0
    fleet.set("n1", mode="ok")
    run_cycle(c)
    assert c.metrics.registry.get_sample_value("colo_controller_nodes_unreachable_publishing") == 0
