"""colo-controller against the tests' Kubernetes API server and real agent HTTP servers on loopback."""

from __future__ import annotations

import time
from typing import Any

import pytest

from controller import load_annotations as ann
from controller.policy import API_VERSION, KIND, DynamicSchedulerPolicy, parse_policy
from controller.service import Controller
from kube import Kube
from tests.controller_fleet import (  # noqa: F401
    NS,
    T0,
    Clock,
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

METRICS = (
    "cpu_usage_avg_5m",
    "cpu_usage_max_avg_1h",
    "cpu_usage_max_avg_1d",
    "mem_usage_avg_5m",
    "mem_usage_max_avg_1h",
    "mem_usage_max_avg_1d",
)


def add_node(api: FakeKubeAPI, name: str, ip: str = "192.0.2.10", labels: dict[str, str] | None = None) -> None:
    api.put(
        "nodes",
        {
            "metadata": {"name": name, "annotations": {"other.io/keep": "yes"}, "labels": labels or {}},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}]},
        },
    )


def node_annotations(api: FakeKubeAPI, node: str) -> dict[str, str]:
    obj = api.get("nodes", None, node)
    assert obj is not None
    return dict(obj["metadata"].get("annotations") or {})


def patches(api: FakeKubeAPI) -> list[Any]:
    return api.requests_for("PATCH", r"/api/v1/nodes/")


def ok_patches(c: Controller) -> float:
    return c.metrics.registry.get_sample_value("colo_controller_node_patches_total", {"result": "ok"}) or 0.0


def fast_policy(period: str = "1s") -> DynamicSchedulerPolicy:
    return parse_policy(
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "spec": {
                "syncPolicy": [{"name": m, "period": period} for m in METRICS],
                "predicate": [{"name": "cpu_usage_avg_5m", "maxLimitPecent": 0.65}],
                "priority": [{"name": m, "weight": 1} for m in METRICS],
                "hotValue": [{"timeRange": "1m", "count": 2}],
            },
        }
    )


def test_annotations_byte_for_byte_and_periods(
    kube_api: FakeKubeAPI,  # noqa: F811
    kube: Kube,  # noqa: F811
    fleet: AgentFleet,
    started: list[Controller],
) -> None:
    usage = dict.fromkeys(METRICS, 0.2)
    usage["cpu_usage_avg_5m"] = 0.352118
    usage["mem_usage_avg_5m"] = 0.0
    usage["mem_usage_max_avg_1d"] = -0.005  # within the contract's tolerance: clamped to 0
    fallback_port = fleet.add("n3", agent_payload("n3", 0.5, oversubscription=None))
    for name in ("n1", "n2"):
        port = fleet.add(name, agent_payload(name, usage, oversubscription=(1500, 1 << 30)))
        add_slice(kube_api, name, port)
        add_node(kube_api, name, labels=AGENT_LABEL)
    add_node(kube_api, "n3", ip="127.0.0.1", labels=AGENT_LABEL)  # no endpoint: InternalIP + agent port
    add_node(kube_api, "n4", ip="127.0.0.1", labels=AGENT_LABEL)  # its "agent" is n3's: wrong node_name, so it fails
    add_node(kube_api, "n5", ip="127.0.0.1")  # not selected: out of scope
    clock = Clock(T0)
    c = start_synced(kube, config(fallback_port, node_selector="colo.io/agent=true"), started, clock=clock)

    run_cycle(c)
    a1 = node_annotations(kube_api, "n1")
    assert a1 == {
        "other.io/keep": "yes",
        "cpu_usage_avg_5m": "0.35212,2026-11-22T10:00:00Z",
        "cpu_usage_max_avg_1h": "0.20000,2026-11-22T10:00:00Z",
        "cpu_usage_max_avg_1d": "0.20000,2026-11-22T10:00:00Z",
        "mem_usage_avg_5m": "0.00000,2026-11-22T10:00:00Z",
        "mem_usage_max_avg_1h": "0.20000,2026-11-22T10:00:00Z",
        "mem_usage_max_avg_1d": "0.00000,2026-11-22T10:00:00Z",
        "node_hot_value": "0.00000,2026-11-22T10:00:00Z",
        # int((0.64788*0.2 + 0.8*0.3 + 0.8*0.5 + 1*0.2 + 0.8*0.3 + 1*0.5) * 100 / 2) = int(85.48)
        "colo.io/load-score": "85,2026-11-22T10:00:00Z",
    }
    assert node_annotations(kube_api, "n3")["cpu_usage_avg_5m"] == "0.50000,2026-11-22T10:00:00Z"
    assert "cpu_usage_avg_5m" not in node_annotations(kube_api, "n4")
    sent = patches(kube_api)
    assert sorted(r.path.rsplit("/", 1)[-1] for r in sent) == ["n1", "n2", "n3", "n4"]  # one per node in scope
    assert c.nodes.get("n5") is None and c.nodes.get("n1") is not None  # the informer does not even see n5
    for r in sent:
        assert r.content_type == "application/merge-patch+json"
        assert list(r.body) == ["metadata"] and list(r.body["metadata"]) == ["annotations"]
    n4 = next(r for r in sent if r.path.endswith("/n4")).body["metadata"]["annotations"]
    assert set(n4) == {"colo.io/load-score"}  # failed poll: no load annotations; a hot value of 0 needs none

    def keys_written_at(t: float) -> set[str]:
        before = len(patches(kube_api))
        clock.now = t
        run_cycle(c)
        bodies = [r.body["metadata"]["annotations"] for r in patches(kube_api)[before:] if r.path.endswith("/n1")]
        assert len(bodies) <= 1
        return set(bodies[0]) if bodies else set()

    def nothing_written_at(t: float) -> bool:
        """No node at all is patched (whether or not the informer has seen our previous patches yet)."""
        before = len(patches(kube_api))
        clock.now = t
        run_cycle(c)
        return len(patches(kube_api)) == before

    every = set(METRICS) | {"node_hot_value", "colo.io/load-score"}
    # Steady values are renewed only before crane would stop trusting the 5m windows (3m period + 5m),
    # all together so that their stamps stay in step; the 1h and 1d windows ride along.
    assert nothing_written_at(T0 + 60)
    assert nothing_written_at(T0 + 180)
    assert nothing_written_at(T0 + 400)
    assert keys_written_at(T0 + 475) == every
    assert node_annotations(kube_api, "n1")["cpu_usage_max_avg_1d"] == "0.20000,2026-11-22T10:07:55Z"
    usage["cpu_usage_avg_5m"] = 0.38  # noise: below writer.min_change (0.05)
    fleet.set("n1", payload=agent_payload("n1", usage, oversubscription=(1500, 1 << 30)))
    assert keys_written_at(T0 + 500) == set()
    usage["cpu_usage_avg_5m"] = 0.42  # a real move, but the values were written 25 s ago: min_interval (120 s)
    fleet.set("n1", payload=agent_payload("n1", usage, oversubscription=(1500, 1 << 30)))
    assert keys_written_at(T0 + 500) == set()
    assert keys_written_at(T0 + 590) == set()
    assert keys_written_at(T0 + 595) == every
    assert node_annotations(kube_api, "n1")["cpu_usage_avg_5m"] == "0.42000,2026-11-22T10:09:55Z"
    usage["cpu_usage_avg_5m"] = 0.66  # above the predicate's 0.65: written at once, the filter's answer changes
    fleet.set("n1", payload=agent_payload("n1", usage, oversubscription=(1500, 1 << 30)))
    assert keys_written_at(T0 + 600) == every
    fleet.set("n2", mode="status")  # n2's agent breaks: its load annotations are left to age
    assert keys_written_at(T0 + 600 + 475) == every
    a1, a2 = node_annotations(kube_api, "n1"), node_annotations(kube_api, "n2")
    assert a1["cpu_usage_max_avg_1d"] == "0.20000,2026-11-22T10:17:55Z"
    assert a2["cpu_usage_max_avg_1d"] == "0.20000,2026-11-22T10:07:55Z"
    assert a2["cpu_usage_avg_5m"] == "0.35212,2026-11-22T10:07:55Z"


AGENT_LABEL = {"colo.io/agent": "true"}


def test_scope_defaults_to_nodes_with_an_agent_endpoint(
    kube_api: FakeKubeAPI,  # noqa: F811
    kube: Kube,  # noqa: F811
    fleet: AgentFleet,
    started: list[Controller],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Without a node selector only nodes whose agent has an endpoint are polled and annotated; agent
    failures are logged when their count changes, not every cycle."""
    port = fleet.add("a1", agent_payload("a1", 0.3, oversubscription=None))
    add_slice(kube_api, "a1", port)
    add_node(kube_api, "a1")
    fleet.add("a2", agent_payload("a2", 0.3, oversubscription=None))
    add_slice(kube_api, "a2", fleet.add("a2-broken", b"{}"))  # answers, but not with a sample
    add_node(kube_api, "a2")
    add_node(kube_api, "no-agent", ip="127.0.0.1")  # would answer on the fallback port: never asked
    c = start_synced(kube, config(port), started)
    caplog.set_level("INFO", logger="controller.service")
    for _ in range(3):
        run_cycle(c)
    assert sorted(r.path.rsplit("/", 1)[-1] for r in patches(kube_api)) == ["a1", "a2"]
    assert node_annotations(kube_api, "no-agent") == {"other.io/keep": "yes"}
    assert "cpu_usage_avg_5m" in node_annotations(kube_api, "a1")
    failures = [r.getMessage() for r in caplog.records if "agents failing" in r.getMessage()]
    assert len(failures) == 1 and failures[0].startswith("1 of 2 agents failing")
    fleet.set("a1", mode="status")
    run_cycle(c)
    run_cycle(c)
    failures = [r.getMessage() for r in caplog.records if "agents failing" in r.getMessage()]
    assert len(failures) == 2 and failures[1].startswith("2 of 2 agents failing")


def test_hot_value_from_bound_pods(
    kube_api: FakeKubeAPI,  # noqa: F811
    kube: Kube,  # noqa: F811
    fleet: AgentFleet,
    started: list[Controller],
) -> None:
    port = fleet.add("n1", agent_payload("n1", 0.2))
    add_slice(kube_api, "n1", port)
    add_node(kube_api, "n1")
    for i in range(7):  # 7 in 5 minutes, 3 of them in the last minute: 7//5 + 3//2 = 2
        stamp = ann.format_time(T0 - (20 if i < 3 else 200))
        kube_api.put(
            "pods",
            {
                "metadata": {"name": f"p{i}", "namespace": "default"},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]},
                "status": {"conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp}]},
            },
        )
    kube_api.put("pods", {"metadata": {"name": "pending", "namespace": "default"}, "spec": {}})
    c = start_synced(kube, config(), started)
    run_cycle(c)
    a = node_annotations(kube_api, "n1")
    assert a["node_hot_value"] == "2.00000,2026-11-22T10:00:00Z"
    assert a["colo.io/load-score"] == "60,2026-11-22T10:00:00Z"  # 80 - 2 * 10


def test_overload_slow_agent_and_overrunning_cycles(
    kube_api: FakeKubeAPI,  # noqa: F811
    kube: Kube,  # noqa: F811
    fleet: AgentFleet,
    started: list[Controller],
) -> None:
    for name in ("ok1", "ok2", "hung"):
        add_slice(kube_api, name, fleet.add(name, agent_payload(name, 0.1)))
        add_node(kube_api, name)
    fleet.set("hung", mode="hang")
    # Each cycle waits for the hung agent's 0.5 s deadline: longer than the 0.1 s interval.
    cfg = config(polling={"interval": 0.1, "timeout": 0.5, "concurrency": 2})
    c = Controller(kube, cfg, fast_policy(), clock=time.time)
    started.append(c)
    c.start()
    sample = c.metrics.registry.get_sample_value
    wait_for(lambda: (sample("colo_controller_cycles_total") or 0) >= 3, what="three cycles")
    assert (sample("colo_controller_cycle_overruns_total") or 0) >= 2
    assert fleet.stats["hung"].peak == 1  # cycles never overlapped
    assert fleet.stats["hung"].requests >= 3
    assert "cpu_usage_avg_5m" in node_annotations(kube_api, "ok1")
    assert "cpu_usage_avg_5m" not in node_annotations(kube_api, "hung")
    assert c.last_report is not None and c.last_report.failed == {"hung": "timeout"}


def test_leader_failover(
    kube_api: FakeKubeAPI,  # noqa: F811
    kube: Kube,  # noqa: F811
    fleet: AgentFleet,
    started: list[Controller],
) -> None:
    add_slice(kube_api, "n1", fleet.add("n1", agent_payload("n1", 0.3)))
    add_node(kube_api, "n1")
    le = {"enabled": True, "lease_duration": 1.0, "renew_deadline": 0.6, "retry_period": 0.1}
    a = Controller(kube, config(leader_election={**le, "identity": "a"}), fast_policy(), clock=time.time)
    b = Controller(kube, config(leader_election={**le, "identity": "b"}), fast_policy(), clock=time.time)
    started.extend([a, b])
    a.start()
    wait_for(a.is_leader, what="a leads")
    b.start()

    def follower_score() -> int:
        v = b.board.verdict("n1", time.time())
        return v.score if v is not None else -1

    wait_for(lambda: follower_score() > 0, what="the follower sees the leader's annotations")
    assert a.is_leader() and not b.is_leader()
    lease = kube_api.get("leases", NS, "colo-controller")
    assert lease is not None and lease["spec"]["holderIdentity"] == "a"
    # The follower answers the extender from the leader's annotations, but never writes.
    body = b.extender.prioritize({"metadata": {"name": "p"}}, None, ["n1"])
    assert body == [{"Host": "n1", "Score": 7}]
    assert ok_patches(b) == 0
    # The server stores a patch before it answers: the writer counts it only once the response is back.
    wait_for(lambda: ok_patches(a) >= 1, what="a counts its patch")

    a.stop()  # releases the lease; a patch in flight is answered (and counted) before it returns
    written_by_a = ok_patches(a)
    wait_for(b.is_leader, what="b takes over")
    fleet.set("n1", payload=agent_payload("n1", 0.9))
    wait_for(lambda: node_annotations(kube_api, "n1")["cpu_usage_avg_5m"].startswith("0.90000,"), what="b writes")
    wait_for(lambda: ok_patches(b) >= 1, what="b counts its patch")
    assert kube_api.get("leases", NS, "colo-controller")["spec"]["holderIdentity"] == "b"  # type: ignore[index]
    assert ok_patches(a) == written_by_a


def test_lagging_node_informer_causes_no_rewrites(
    kube_api: FakeKubeAPI,  # noqa: F811
    kube: Kube,  # noqa: F811
    fleet: AgentFleet,
    started: list[Controller],
) -> None:
    """The planner must not take its own not-yet-watched patch for a missing annotation."""
    for name in ("n1", "n2"):
        add_slice(kube_api, name, fleet.add(name, agent_payload(name, 0.2, oversubscription=(1500, 1 << 30))))
        add_node(kube_api, name)
    clock = Clock(T0)
    c = start_synced(kube, config(), started, clock=clock)

    # Freeze the node informer: cut its watch and hold its re-watch until released (at most `lag`).
    lag = 120.0
    watches = len(kube_api.requests_for("GET", r"^/api/v1/nodes$", watch=True))
    hold = kube_api.inject("GET", r"^/api/v1/nodes$", status=None, delay=lag, watch=True)
    kube_api.drop_watches()
    wait_for(lambda: hold.hits == 1, what="the node informer's delayed re-watch")
    frozen_at = time.monotonic()
    assert len(kube_api.requests_for("GET", r"^/api/v1/nodes$", watch=True)) == watches + 1

    run_cycle(c)
    first = patches(kube_api)
    assert sorted(r.path.rsplit("/", 1)[-1] for r in first) == ["n1", "n2"]
    for r in first:
        assert set(r.body["metadata"]["annotations"]) == set(METRICS) | {"node_hot_value", "colo.io/load-score"}
    clock.now = T0 + 60  # inside every period
    run_cycle(c)
    # The premise: the informer still has not seen the first cycle's patches.
    assert not hold.released.is_set() and time.monotonic() - frozen_at < lag
    for name in ("n1", "n2"):
        cached = c.nodes.get(name)
        assert cached is not None and "cpu_usage_avg_5m" not in cached["metadata"]["annotations"]
    assert len(patches(kube_api)) == 2  # nothing written again

    # Once the informer catches up, its objects are used again: still nothing to write.
    def caught_up() -> bool:
        cached = c.nodes.get("n2")
        return cached is not None and "cpu_usage_avg_5m" in cached["metadata"]["annotations"]

    hold.release()
    wait_for(caught_up, timeout=30, what="the node informer catches up")
    clock.now = T0 + 120
    run_cycle(c)
    assert len(patches(kube_api)) == 2
    # ...and a change by someone else, newer than our patch, wins over our memory of that patch.
    assert c.latest.ahead_of_informer() == 0
    edited = kube_api.get("nodes", None, "n1")
    assert edited is not None and edited["metadata"]["annotations"].pop("cpu_usage_max_avg_1d")
    kube_api.put("nodes", edited)

    def removal_seen() -> bool:
        cached = c.nodes.get("n1")
        return cached is not None and "cpu_usage_max_avg_1d" not in cached["metadata"]["annotations"]

    wait_for(removal_seen, what="the node informer sees the removal")
    clock.now = T0 + 150
    run_cycle(c)
    sent = patches(kube_api)[2:]
    assert [r.path.rsplit("/", 1)[-1] for r in sent] == ["n1"]
    assert "cpu_usage_max_avg_1d" in sent[0].body["metadata"]["annotations"]
    assert node_annotations(kube_api, "n1")["cpu_usage_max_avg_1d"] == "0.20000,2026-11-22T10:02:30Z"


def test_informers_keep_only_what_the_controller_reads(
    kube_api: FakeKubeAPI,  # noqa: F811
    kube: Kube,  # noqa: F811
    fleet: AgentFleet,
    started: list[Controller],
) -> None:
    add_slice(kube_api, "n1", fleet.add("n1", agent_payload("n1", 0.2)))
    kube_api.put(
        "nodes",
        {
            "metadata": {
                "name": "n1",
                "labels": {"kubernetes.io/hostname": "n1"},
                "annotations": {"other.io/keep": "yes", "node_hot_value": "1.00000,2026-11-22T09:58:00Z"},
            },
            "spec": {"podCIDR": "10.0.0.0/24"},
            "status": {
                "addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "192.0.2.1"}],
                "images": [{"names": [f"registry.example/image-{i}:v1"], "sizeBytes": 1 << 20} for i in range(50)],
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )

    def pod(name: str, bound_ago: float) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "x"}},
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "c", "image": "x", "env": [{"name": "A", "value": "1"}]}],
            },
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": ann.format_time(T0 - bound_ago)},
                ],
            },
        }

    kube_api.put("pods", pod("recent", 30))
    kube_api.put("pods", pod("old", 3600))  # bound long before every hotValue time range: never counts again
    c = start_synced(kube, config(), started)

    cached = c.nodes.get("n1")  # shared with the informer: look, don't touch
    assert cached is not None and cached["metadata"]["resourceVersion"].isdigit()
    node = {**cached, "metadata": {k: v for k, v in cached["metadata"].items() if k != "resourceVersion"}}
    assert node == {
        "metadata": {"name": "n1", "annotations": {"node_hot_value": "1.00000,2026-11-22T09:58:00Z"}},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.0.2.1"}]},
    }
    assert c.pods is not None
    (kept,) = c.pods.items()
    assert set(kept) == {"metadata", "spec", "status"} and kept["spec"] == {"nodeName": "n1"}
    assert set(kept["metadata"]) == {"name", "namespace", "uid", "resourceVersion"}
    assert [cond["type"] for cond in kept["status"]["conditions"]] == ["PodScheduled"]
    for kind in ("nodes", "pods", "endpointslices"):
        (listed,) = kube_api.requests_for("GET", f"/{kind}$", watch=False)
        assert listed.query["limit"] == "500"  # paged lists

    run_cycle(c)
    assert node_annotations(kube_api, "n1")["node_hot_value"] == "0.00000,2026-11-22T10:00:00Z"  # 1 binding < 2
    current = c.latest.get(c.nodes.get("n1") or {})
    assert set(current) == {"metadata", "status"}  # our PATCH response, slimmed the same way
    assert "other.io/keep" not in current["metadata"]["annotations"]
    assert current["metadata"]["annotations"]["cpu_usage_avg_5m"] == "0.20000,2026-11-22T10:00:00Z"


def test_liveness_fails_for_a_stalled_polling_loop(
    kube_api: FakeKubeAPI,  # noqa: F811
    kube: Kube,  # noqa: F811
    fleet: AgentFleet,
    started: list[Controller],
) -> None:
    from fastapi.testclient import TestClient

    from controller.extender import create_app

    for name in ("h1", "h2"):
        add_slice(kube_api, name, fleet.add(name, agent_payload(name, 0.2)))
        add_node(kube_api, name)
        fleet.set(name, mode="hang")
    mono = Clock(1000.0)
    # Two hung agents polled one at a time: a legitimate cycle takes 2 x 0.5 s. The loop may take
    # 3 intervals + 2 rounds of timeouts = 0.15 + 1.0 s before it counts as stalled.
    cfg = config(polling={"interval": 0.05, "timeout": 0.5, "concurrency": 1})
    c = Controller(kube, cfg, fast_policy(), monotonic=mono)
    started.append(c)
    client = TestClient(create_app(c.extender, c.metrics, unhealthy=c.unhealthy))
    assert c.unhealthy() is None  # not started yet
    c.start()
    wait_for(lambda: fleet.total_in_flight() == 1, what="the loop inside a cycle, waiting for a hung agent")
    assert c.stall_limit() == pytest.approx(1.15)
    mono.now += 1.1  # a long cycle, but a possible one
    assert c.unhealthy() is None
    assert client.get("/healthz").status_code == 200
    mono.now += 0.1
    reason = c.unhealthy()
    assert reason is not None and "polling loop" in reason
    r = client.get("/healthz")
    assert (r.status_code, r.text) == (503, reason)
    wait_for(lambda: c.unhealthy() is None, what="the loop completes its pass")


def test_liveness_fails_when_a_thread_died(
    kube_api: FakeKubeAPI,  # noqa: F811
    kube: Kube,  # noqa: F811
    started: list[Controller],
) -> None:
    c = Controller(kube, config(), fast_policy())
    started.append(c)
    c.start(run_loop=False)
    wait_for(c.synced, what="informers")
    assert c.unhealthy() is None
    assert c.pods is not None
    c.pods.stop()
    assert c.unhealthy() == "thread(s) died: informer-pods"
    c.writer.stop()
    assert c.unhealthy() == "thread(s) died: informer-pods, colo-writer"
