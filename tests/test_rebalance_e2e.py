"""Rebalancing end to end: the controller against the fake API server and a fleet of agent documents.

The hot node's agent reports 90% CPU (14.4 of 16 cores, over the 75% = 12-core threshold) and per-pod
usage on /api/v1/pods; two cold nodes report 20%. Pods are real Pod objects in the fake API server,
evicted through policy/v1 Evictions (which the fake server answers 429 for a PDB-blocked pod).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controller.extender import create_app
from controller.rebalance.traits import TRAITS, Amounts
from controller.rebalance.usage import pod_usages
from controller.service import Controller
from kube import Kube
from tests.controller_fleet import T0, Clock, add_slice, config, fleet_fixture, start_synced, started_fixture  # noqa: F401
from tests.test_exporter_app import populate
from tests.test_exporter_fixtures import make_view
from testsupport.agentfleet import AgentFleet, agent_payload
from testsupport.kubeapi.fixtures import kube, kube_api  # noqa: F401
from testsupport.kubeapi.server import FakeKubeAPI
from testsupport.rebalance_objects import GIB, agent_pod, node, pod
from testsupport.waiting import wait_for

HOT_PODS = {  # name -> (cpu cores used, offline)
    "batch": (0.5, True),
    "web-a": (1.5, False),
    "web-b": (1.0, False),
    "web-c": (0.8, False),
    "web-d": (0.3, False),
}
PODS_PATH = "/api/v1/pods"


def node_doc(name: str, cpu: float, memory: float = 0.3) -> dict[str, Any]:
    return agent_payload(name, {"cpu_usage_avg_5m": cpu, "mem_usage_avg_5m": memory, "cpu_usage_avg_1m": cpu})


def cluster(api: FakeKubeAPI, fleet: AgentFleet) -> None:
    for name, cpu in (("hot", 0.9), ("cold1", 0.2), ("cold2", 0.2)):
        api.put("nodes", node(name))
        add_slice(api, name, fleet.add(name, node_doc(name, cpu)))
    agent_pods = []
    for name, (cores, offline) in HOT_PODS.items():
        api.put("pods", pod(name, "hot", offline=offline, cpu="500m", memory="1Gi"))
        agent_pods.append(agent_pod("default", name, cores, 1 * GIB))
    fleet.set("hot", paths={PODS_PATH: agent_pods})
    api.put("pods", pod("cold-web", "cold1"))


def rebalancing(dry_run: bool = False, **more: Any) -> dict[str, Any]:
    return {"enabled": True, "dry_run": dry_run, "consecutive_abnormalities": 2, "max_evictions_per_node": 5, **more}


@dataclass
class Rig:
    """The cluster of `cluster()` in the fake API server, its agents, and the controllers started on it."""

    api: FakeKubeAPI
    kube: Kube
    fleet: AgentFleet
    started: list[Controller]

    def start(self, clock: Clock | None = None, **cfg: Any) -> Controller:
        """A synced controller with these settings (rebalancing on unless given)."""
        cfg.setdefault("rebalance", rebalancing())
        return start_synced(self.kube, config(**cfg), self.started, clock=clock)


@pytest.fixture
def rig(
    kube_api: FakeKubeAPI,  # noqa: F811
    kube: Kube,  # noqa: F811
    fleet: AgentFleet,
    started: list[Controller],
) -> Rig:
    cluster(kube_api, fleet)
    return Rig(kube_api, kube, fleet, started)


def cycle(c: Controller) -> None:
    asyncio.run(c.cycle())


def evicted(api: FakeKubeAPI) -> list[str]:
    return [r.path.split("/")[-2] for r in api.requests_for("POST", r"/pods/[^/]+/eviction$")]


def events(api: FakeKubeAPI, reason: str) -> list[dict[str, Any]]:
    return [e for e in api.objects("events") if e["reason"] == reason]


def sample(c: Controller, name: str, labels: dict[str, str]) -> float:
    return c.metrics.registry.get_sample_value(name, labels) or 0.0


def test_hot_node_pods_are_evicted_until_it_is_under_its_threshold_and_no_further(rig: Rig) -> None:
    api, fleet = rig.api, rig.fleet
    clock = Clock(T0)
    c = rig.start(clock)
    # The informers keep the scheduling facts next to their slim objects, not whole Nodes and Pods.
    hot = c.nodes.get("hot")
    assert hot is not None and set(hot) == {"metadata", "status", TRAITS}
    assert hot[TRAITS].allocatable == Amounts(16, 64 * GIB) and hot[TRAITS].labels["kubernetes.io/hostname"] == "hot"
    web_a = c.pods.get("default/web-a") if c.pods is not None else None
    assert web_a is not None and set(web_a) <= {"metadata", "spec", "status", TRAITS}
    assert web_a.get("spec", {}) in ({}, {"nodeName": "hot"})  # the hot-value stub (created "now" > T0)
    assert web_a[TRAITS].requests == Amounts(0.5, GIB) and web_a[TRAITS].owner_kinds == ("ReplicaSet",)
    cycle(c)
    assert evicted(api) == []  # high once: not confirmed yet
    assert PODS_PATH not in fleet.paths.get("hot", [])  # no pod polls before a source is confirmed
    cycle(c)
    # 14.4 cores: batch (offline first) -> 13.9, web-a (largest) -> 12.4, web-b -> 11.4 <= 12: stop
    assert evicted(api) == ["batch", "web-a", "web-b"]
    assert {p["metadata"]["name"] for p in api.objects("pods")} == {"web-c", "web-d", "cold-web"}
    assert all(PODS_PATH not in fleet.paths[n] for n in ("cold1", "cold2"))  # only the source's pods polled
    (ev,) = [e for e in events(api, "ColoRebalanced") if e["involvedObject"]["name"] == "web-a"]
    assert ev["involvedObject"]["kind"] == "Pod" and ev["metadata"]["namespace"] == "default"
    # the source's usage as projected after the earlier evictions of the cycle: 14.4 - 0.5 = 13.9 cores
    assert "node hot" in ev["message"] and "cpu 86.9% > 75%" in ev["message"] and "1.50 cores" in ev["message"]
    assert sample(c, "colo_controller_rebalance_evictions_total", {"reason": "cpu", "result": "evicted"}) == 3

    plan = TestClient(create_app(c.extender, c.metrics, rebalance=c.rebalance_document)).get("/api/v1/rebalance")
    doc = plan.json()
    assert doc["enabled"] and not doc["dry_run"] and doc["leader"] and doc["sources"] == ["hot"]
    assert [n["node"] for n in doc["nodes"]["high"]] == ["hot"] and {n["node"] for n in doc["nodes"]["low"]} == {
        "cold1",
        "cold2",
    }
    assert doc["budget"]["cpu_cores"] == pytest.approx(2 * (12 - 3.2))
    assert [(m["pod"], m["result"]) for m in doc["moves"]] == [
        ("default/batch", "evicted"),
        ("default/web-a", "evicted"),
        ("default/web-b", "evicted"),
    ]
    assert doc["moves"][-1]["source_after"]["cpu_percent"] == pytest.approx(71.25)
    assert [c_["pod"] for c_ in doc["candidates"]["hot"]][:2] == ["default/batch", "default/web-a"]

    # The agent's window still shows the evicted load for a while: the node settles, nothing more goes.
    for _ in range(3):
        cycle(c)
    assert len(evicted(api)) == 3 and c.rebalance_document()["nodes"]["high"][0]["abnormal_cycles"] == 0
    # 5 minutes later (the agent here still says 90%) it is confirmed afresh: the pods that are left go.
    wait_for(lambda: c.pods is not None and len(c.pods.items()) == 3, what="the pod informer sees the evictions")
    clock.now = T0 + 300
    cycle(c)
    assert len(evicted(api)) == 3
    cycle(c)
    assert evicted(api)[3:] == ["web-c", "web-d"]
    assert c.rebalance_document()["skipped_pods"]["hot"] == {"unknown_pod": 3}  # evicted, still in the agent's list


def test_pdb_429_moves_on_to_the_next_candidate(rig: Rig) -> None:
    api = rig.api
    api.block_eviction("default", "web-a")
    c = rig.start()
    cycle(c)
    cycle(c)
    # web-a refused: 14.4 - 0.5 (batch) - 1.0 (web-b) - 0.8 (web-c) = 12.1 > 12, so web-d goes too
    assert evicted(api) == ["batch", "web-a", "web-b", "web-c", "web-d"]
    assert {p["metadata"]["name"] for p in api.objects("pods")} == {"web-a", "cold-web"}
    assert sample(c, "colo_controller_rebalance_evictions_total", {"reason": "cpu", "result": "blocked"}) == 1
    results = {m["pod"]: m["result"] for m in c.rebalance_document()["moves"]}
    assert results["default/web-a"] == "blocked" and results["default/web-d"] == "evicted"
    assert not [e for e in events(api, "ColoRebalanced") if e["involvedObject"]["name"] == "web-a"]


def test_dry_run_evicts_nothing(rig: Rig) -> None:
    api = rig.api
    c = rig.start(rebalance=rebalancing(dry_run=True))
    for _ in range(2):
        cycle(c)
    doc = c.rebalance_document()
    assert doc["dry_run"] and [m["result"] for m in doc["moves"]] == ["dry_run"] * 3
    assert evicted(api) == [] and len(api.objects("pods")) == len(HOT_PODS) + 1
    assert api.objects("events") == []  # a dry run writes nothing at all
    assert sample(c, "colo_controller_rebalance_evictions_total", {"reason": "cpu", "result": "dry_run"}) == 3


def test_an_agent_that_stops_answering_removes_its_node_from_both_sides(rig: Rig) -> None:
    api, fleet = rig.api, rig.fleet
    c = rig.start()
    cycle(c)  # hot: high once
    fleet.set("cold1", mode="status")
    fleet.set("cold2", mode="hang")
    cycle(c)  # hot confirmed, but no low node answers: nothing may move
    doc = c.rebalance_document()
    assert doc["gate"] == "no_low_node" and doc["nodes"]["unknown"] == 2 and evicted(api) == []
    (skipped,) = events(api, "ColoRebalanceSkipped")
    assert skipped["involvedObject"] == {"kind": "Node", "name": "hot", "apiVersion": "v1"}
    assert "no_low_node" in skipped["message"] and "cpu 90.0% / 75%" in skipped["message"]
    fleet.set("cold1", mode="ok")
    fleet.set("cold2", mode="ok")
    fleet.set("hot", mode="status")
    cycle(c)  # hot unknown: neither source nor destination, and its count is gone
    doc = c.rebalance_document()
    assert doc["sources"] == [] and doc["nodes"]["high"] == [] and doc["nodes"]["unknown"] == 1
    fleet.set("hot", mode="ok")
    cycle(c)
    assert c.rebalance_document()["nodes"]["high"] == [{"node": "hot", "cpu_percent": 90.0, "memory_percent": 30.0,
                                                         "abnormal_cycles": 1}]  # fmt: skip
    assert evicted(api) == []
    cycle(c)
    assert evicted(api) == ["batch", "web-a", "web-b"]


def test_leadership_loss_stops_evictions(rig: Rig) -> None:
    api = rig.api
    le = {"enabled": True, "identity": "a", "lease_duration": 1.0, "renew_deadline": 0.6, "retry_period": 0.1}
    c = rig.start(leader_election=le)
    wait_for(c.is_leader, what="leadership")
    cycle(c)
    api.inject(None, r"/leases", status=500, times=None)  # renewals fail from now on
    wait_for(lambda: not c.is_leader(), what="the lease runs out")
    cycle(c)  # a cycle that was already running when the lease was lost
    assert evicted(api) == []
    doc = c.rebalance_document()
    assert not doc["leader"] and doc["stopped"] == "not_leader"
    assert sample(c, "colo_controller_rebalance_evictions_total", {"reason": "cpu", "result": "not_leader"}) == 1


def test_the_pod_usage_parser_reads_the_real_agent_document() -> None:
    """The controller's parser against the agent's own /api/v1/pods (exporter.api), not a hand-made copy."""
    from exporter.app import close_app
    from exporter.app import create_app as agent_app

    view = make_view()
    app = agent_app(view)
    try:
        with TestClient(app) as client:
            populate(view, start=0.0)
            body = client.get(PODS_PATH).content
    finally:
        close_app(app)
    usages = {(u.namespace, u.name): u.usage for u in pod_usages(body, "avg_5m")}
    assert usages[("team-a", "web")].cpu == pytest.approx(1.0)
    assert usages[("team-a", "web")].memory == pytest.approx(2000)
    assert len(usages) == 1  # the pod without a namespace/name (standalone) cannot be evicted
    # the tests' agent documents have the real shape
    assert set(agent_pod("a", "b", 1.0, 1.0)) == set(json.loads(body)[0])


def test_an_api_server_that_does_not_answer_stops_the_cycles_evictions(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    api = rig.api
    c = rig.start()
    cycle(c)
    fault = api.inject("POST", r"/eviction$", status=503, times=None)
    with caplog.at_level(logging.WARNING, logger="controller.rebalance.rebalancer"):
        cycle(c)
        assert fault.hits == 1 and len(api.objects("pods")) == len(HOT_PODS) + 1  # one try, then stop
        doc = c.rebalance_document()
        assert doc["stopped"] == "unavailable" and [m["result"] for m in doc["moves"]] == ["unavailable"]
        cycle(c)  # the same failure again within a minute: counted, not logged again
    assert fault.hits == 2
    failed = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failed) == 1 and "evicting default/" in failed[0].getMessage()
    api.clear_faults()
    cycle(c)  # nothing was evicted, so the node is still confirmed: the next cycle tries again
    assert {p["metadata"]["name"] for p in api.objects("pods")} == {"web-c", "web-d", "cold-web"}


@pytest.mark.parametrize(
    ("pod_list", "rejection"),
    [
        ({"not": "a pod list"}, "not_object"),
        # an agent of another version that renamed a key: rejected and counted, never read as 0
        ([{**{k: v for k, v in agent_pod("default", "web-a", 1.5, GIB).items() if k != "cpu_cores"},
           "cpu_usage_cores": 1.5}], "missing_field"),
    ],
)  # fmt: skip
def test_a_source_whose_pod_list_cannot_be_read_is_skipped_with_that_reason(
    rig: Rig, pod_list: object, rejection: str
) -> None:
    api, fleet = rig.api, rig.fleet
    fleet.set("hot", paths={PODS_PATH: pod_list})
    c = rig.start()
    cycle(c)
    cycle(c)
    doc = c.rebalance_document()
    assert doc["skips"] == [{"node": "hot", "reason": "pods_unreadable_bad_payload", "details": {}}]
    assert doc["pod_poll_failed"] == {"hot": "bad_payload"} and evicted(api) == []
    assert sample(c, "colo_controller_rebalance_pod_polls_total", {"result": "bad_payload"}) == 1
    assert sample(c, "colo_controller_rebalance_pod_lists_rejected_total", {"reason": rejection}) == 1
