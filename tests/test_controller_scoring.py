"""crane Dynamic plugin rules on a table of nodes, stale annotations, hot values, and the extender API."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from controller import load_annotations as ann
from controller.config import ClassifySettings
from controller.extender import Extender, create_app
from controller.hotvalue import BindingRecords
from controller.metrics import ControllerMetrics
from controller.pod_classifier import PodClassifier
from controller.policy import default_policy
from controller.scoring import ScoreBoard, Scorer

NOW = 1795341600.0  # 2026-11-22T10:00:00Z
FIVE_M = ("cpu_usage_avg_5m", "mem_usage_avg_5m")
ONE_H = ("cpu_usage_max_avg_1h", "mem_usage_max_avg_1h")
ONE_D = ("cpu_usage_max_avg_1d", "mem_usage_max_avg_1d")


def loads(usage: float, age: float = 0.0, **override: tuple[float, float]) -> dict[str, str]:
    """Annotations with every metric at `usage`, written `age` seconds ago; override=(usage, age)."""
    out = {}
    for name in FIVE_M + ONE_H + ONE_D:
        u, a = override.get(name, (usage, age))
        out[name] = ann.format_value(u, NOW - a)
    return out


def node(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": annotations}}


def board_with(nodes: dict[str, dict[str, str]]) -> ScoreBoard:
    board = ScoreBoard(Scorer(default_policy().spec))
    for name, anns in nodes.items():
        board.update_node(node(name, anns))
    return board


# name -> (annotations, expected score 0..100, overloaded?)
TABLE: dict[str, tuple[dict[str, str], int, bool]] = {
    "idle": (loads(0.0), 100, False),
    "half": (loads(0.5), 50, False),
    "busy-5m": (loads(0.3, cpu_usage_avg_5m=(0.66, 0)), 66, True),  # 0.66 > 0.65
    "at-limit": (loads(0.3, cpu_usage_avg_5m=(0.65, 0)), 66, False),  # not strictly above
    "busy-1h": (loads(0.3, mem_usage_max_avg_1h=(0.8, 0)), 62, True),
    "busy-1d-only": (loads(0.3, cpu_usage_max_avg_1d=(0.99, 0)), 52, False),  # 1d has no predicate
    # 3m + 5m = 480 s active: 479 s is fresh, 480 s is stale (crane: now.Before(ts + active)).
    "fresh-edge": (loads(0.3, cpu_usage_avg_5m=(0.9, 479)), 64, True),
    "stale-5m": (loads(0.3, cpu_usage_avg_5m=(0.9, 480)), 63, False),
    "all-stale": (loads(0.9, age=3 * 3600 + 301), 0, False),
    "nothing": ({}, 0, False),
    "garbage": ({"cpu_usage_avg_5m": "0.99", "mem_usage_avg_5m": "high,now"}, 0, False),
    "overused": (loads(1.5), 0, True),
}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_table_of_nodes(name: str) -> None:
    annotations, score, overloaded = TABLE[name]
    v = board_with({name: annotations}).verdict(name, NOW)
    assert v is not None
    assert v.score == score
    assert (v.overloaded is not None) == overloaded
    if overloaded:
        assert v.overloaded is not None and v.overloaded.startswith("Load[") and f"node[{name}]" in v.overloaded


def test_stale_missing_counts_zero_but_keeps_weight() -> None:
    # Only the 1d metrics (weight 0.5+0.5 of 2.0) are fresh at usage 0: 100 * 1.0 / 2.0 = 50.
    anns = loads(0.0, age=0, **{n: (0.0, 3600) for n in FIVE_M + ONE_H})
    assert board_with({"n": anns}).verdict("n", NOW).score == 50  # type: ignore[union-attr]


def test_hot_value_subtracts_ten_per_unit_and_expires_after_5_minutes() -> None:
    anns = loads(0.2)
    anns[ann.HOT_VALUE] = ann.format_value(3, NOW - 299)
    board = board_with({"n": anns})
    assert board.verdict("n", NOW).score == 50  # type: ignore[union-attr]  # 80 - 30
    assert board.verdict("n", NOW + 1).score == 80  # type: ignore[union-attr]  # hot value stale
    anns[ann.HOT_VALUE] = ann.format_value(9, NOW)
    board.update_node(node("n", anns))
    assert board.verdict("n", NOW).score == 0  # type: ignore[union-attr]  # clamped


def test_cached_verdict_expires_with_its_annotations() -> None:
    board = board_with({"n": loads(0.3, cpu_usage_avg_5m=(0.9, 0))})
    first = board.verdict("n", NOW)
    assert first is not None and first.overloaded and first.valid_until == NOW + 480
    assert board.verdict("n", NOW + 479) is first
    later = board.verdict("n", NOW + 480)
    assert later is not None and later is not first and later.overloaded is None


def test_hot_value_from_bindings() -> None:
    hot = default_policy().spec.hot_value  # 5m/5 and 1m/2
    clock = [NOW]
    records = BindingRecords(hot, clock=lambda: clock[0])

    def pod(uid: str, node_name: str, age: float) -> dict[str, Any]:
        stamp = ann.format_time(NOW - age)
        return {
            "metadata": {"uid": uid, "name": uid, "namespace": "d", "creationTimestamp": stamp},
            "spec": {"nodeName": node_name},
            "status": {"conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp}]},
        }

    for i in range(7):  # a: 7 in 5m of which 3 in the last minute -> 7//5 + 3//2 = 2
        records.observe(pod(f"a{i}", "a", 30 if i < 3 else 200))
    for i in range(4):  # b: 4 within 1m -> 0 + 2
        records.observe(pod(f"b{i}", "b", 10))
    records.observe(pod("b0", "b", 10))  # the same pod again (MODIFIED) counts once
    records.observe(pod("old", "c", 301))  # older than every range: ignored
    assert records.hot_values() == {"a": 2, "b": 2}
    clock[0] = NOW + 60
    assert records.hot_values() == {"a": 1}


def test_the_pod_informer_keeps_a_stub_of_recent_bindings_only() -> None:
    records = BindingRecords(default_policy().spec.hot_value, clock=lambda: NOW)
    big: dict[str, Any] = {
        "metadata": {
            "name": "p",
            "namespace": "d",
            "uid": "u1",
            "resourceVersion": "7",
            "creationTimestamp": ann.format_time(NOW - 40),
            "labels": {"app": "x"},
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]},
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": ann.format_time(NOW - 30)},
            ],
        },
    }
    stub = records.keep(big)
    assert stub == {
        "metadata": {"name": "p", "namespace": "d", "uid": "u1", "resourceVersion": "7"},
        "spec": {"nodeName": "n1"},
        "status": {
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-22T09:59:30Z"}]
        },
    }
    records.observe(stub)
    assert records.counts(300) == {"n1": 1}  # the stub is all `observe` needs
    # No condition: the creation time is the fallback, so it stays.
    unconditioned = {**big, "status": {"phase": "Running"}}
    kept = records.keep(unconditioned)
    assert kept is not None and kept["metadata"]["creationTimestamp"] == "2026-11-22T09:59:20Z"
    # Bound before the longest time range (5m), or not bound: nothing to keep.
    scheduled_long_ago = {"type": "PodScheduled", "status": "True", "lastTransitionTime": ann.format_time(NOW - 300)}
    old = {**big, "status": {"conditions": [scheduled_long_ago]}}
    assert records.keep(old) is None
    assert records.keep({**big, "spec": {"nodeName": ""}}) is None


# ---- extender --------------------------------------------------------------------------------------


@pytest.fixture
def client() -> TestClient:
    nodes = {name: anns for name, (anns, _, _) in TABLE.items()}
    for name, cpu in (("big", 8000), ("small", 2000)):
        anns = loads(0.5)
        anns[ann.PUBLISHED_CPU], anns[ann.PUBLISHED_MEMORY] = str(cpu), str(cpu << 20)
        nodes[name] = anns
    # The agent's capacity is trusted while the node's load annotations are fresh (its agent answers):
    # this one's were last written 481 s ago, past the shortest period (3m) plus crane's 5 minutes.
    stale = loads(0.5, age=481)
    stale[ann.PUBLISHED_CPU], stale[ann.PUBLISHED_MEMORY] = "9000", str(9 << 30)
    nodes["stale-over"] = stale
    extender = Extender(board_with(nodes), ClassifySettings(), clock=lambda: NOW)
    return TestClient(create_app(extender, ControllerMetrics()))


POD = {"metadata": {"name": "web", "namespace": "default"}, "spec": {"priority": 100}}
OFFLINE_POD = {"metadata": {"name": "batch", "namespace": "default", "labels": {"koordinator.sh/qosClass": "BE"}}}


def test_filter_with_node_names(client: TestClient) -> None:
    names = [*sorted(TABLE), "unknown-node"]
    r = client.post("/filter", json={"Pod": POD, "NodeNames": names})
    assert r.status_code == 200
    body = r.json()
    expected_failed = {n for n, (_, _, over) in TABLE.items() if over}
    assert set(body["FailedNodes"]) == expected_failed
    assert body["NodeNames"] == [n for n in names if n not in expected_failed]
    assert body["FailedAndUnresolvableNodes"] == {} and body["Error"] == "" and body["Nodes"] is None
    assert body["FailedNodes"]["busy-5m"] == "Load[cpu_usage_avg_5m] of node[busy-5m] is too high"


def test_filter_with_node_objects_and_lowercase_keys(client: TestClient) -> None:
    items = [node("busy-5m", {}), node("idle", {}), node("new", loads(0.9))]
    r = client.post("/filter", json={"pod": POD, "nodes": {"items": items}})
    body = r.json()
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["idle"]
    assert set(body["FailedNodes"]) == {"busy-5m", "new"}  # unknown to the cache: its own annotations


def test_filter_lets_daemonset_pods_through(client: TestClient) -> None:
    pod = {"metadata": {"name": "ds", "ownerReferences": [{"kind": "DaemonSet", "name": "x"}]}}
    body = client.post("/filter", json={"Pod": pod, "NodeNames": ["busy-5m", "idle"]}).json()
    assert body["NodeNames"] == ["busy-5m", "idle"] and body["FailedNodes"] == {}


def test_prioritize_scales_to_extender_range(client: TestClient) -> None:
    names = ["idle", "half", "busy-1d-only", "nothing", "unknown-node"]
    r = client.post("/prioritize", json={"Pod": POD, "NodeNames": names})
    assert r.status_code == 200
    assert r.json() == [
        {"Host": "idle", "Score": 10},
        {"Host": "half", "Score": 5},
        {"Host": "busy-1d-only", "Score": 5},
        {"Host": "nothing", "Score": 0},
        {"Host": "unknown-node", "Score": 0},
    ]


def test_prioritize_offline_pods_prefer_oversubscribable_nodes(client: TestClient) -> None:
    names = ["small", "big", "idle", "stale-over"]
    scores = {
        h["Host"]: h["Score"] for h in client.post("/prioritize", json={"Pod": OFFLINE_POD, "NodeNames": names}).json()
    }
    assert scores == {"big": 10, "small": 3, "idle": 0, "stale-over": 0}
    online = {h["Host"]: h["Score"] for h in client.post("/prioritize", json={"Pod": POD, "NodeNames": names}).json()}
    assert online["idle"] > online["big"]  # online pods follow load, not lendable capacity


def test_bad_requests(client: TestClient) -> None:
    assert client.post("/prioritize", content=b"{nope").status_code == 400
    assert client.post("/prioritize", json={"NodeNames": ["a"]}).status_code == 400
    body = client.post("/filter", json={"Pod": POD}).json()
    assert "neither Nodes nor NodeNames" in body["Error"]


def test_warnings_about_malformed_qos_levels_are_forgotten(caplog: pytest.LogCaptureFixture) -> None:
    """The classifier warns once per pod, and forgets pods it has not been asked about for a while."""

    class Clock:
        now = 0.0

        def __call__(self) -> float:
            return self.now

    clock = Clock()
    classify = PodClassifier(ClassifySettings(), forget_after=600, monotonic=clock)

    def pod(name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "uid": name, "annotations": {"volcano.sh/qos-level": "bogus"}}}

    def warnings() -> list[str]:
        return [r.getMessage().split(":")[0] for r in caplog.records if "qos-level" in r.getMessage()]

    for _ in range(3):
        assert classify(pod("stuck")) == "online"
    for i in range(100):  # pods asked about once (scheduled at the first try)
        classify(pod(f"once-{i}"))
    assert warnings() == ["pod None/stuck", *(f"pod None/once-{i}" for i in range(100))]
    clock.now = 600
    classify(pod("stuck"))  # the sweep keeps what was asked about since the last one: all of them
    clock.now = 1200
    classify(pod("stuck"))  # this sweep forgets the once-* pods: not asked about for a whole period
    classify(pod("once-0"))
    assert warnings()[101:] == ["pod None/once-0"]  # remembered no more: warned again (once)
    classify(pod("once-0"))
    assert len(warnings()) == 102


def test_health_metrics_and_scores(client: TestClient) -> None:
    assert client.get("/healthz").text == "ok"
    assert client.get("/readyz").status_code == 200
    client.post("/prioritize", json={"Pod": POD, "NodeNames": ["idle"]})
    text = client.get("/metrics").text
    assert 'colo_controller_extender_request_duration_seconds_count{verb="prioritize"} 1.0' in text
    assert client.get("/api/v1/scores").json()["half"] == {"score": 50, "overloaded": None}


def test_published_capacity_is_validated_against_allocatable() -> None:
    rejected: list[tuple[str, str]] = []
    board = ScoreBoard(Scorer(default_policy().spec), on_rejected=lambda n, r: rejected.append((n, r)))
    alloc = {"cpu": "4", "memory": "8Gi"}
    cases = {
        "ok": ("3000", str(6 << 30)),
        "too-much-cpu": ("4001", "0"),  # more than the node's 4 cores
        "too-much-memory": ("0", str((8 << 30) + 1)),
        "huge": ("9" * 301, "0"),  # the 301-digit number of issue 15
        "float": ("1e3", "0"),
        "negative": ("-1", "0"),
        "other-digits": ("٣", "0"),
    }
    for name, (cpu, mem) in cases.items():
        anns = {**loads(0.3), ann.PUBLISHED_CPU: cpu, ann.PUBLISHED_MEMORY: mem}
        board.update_node({"metadata": {"name": name, "annotations": anns}, "status": {"allocatable": alloc}})
    board.update_node(node("label-off", loads(0.3)))  # no capacity published: nothing to reject
    loads_ = {name: board.load(name) for name in [*cases, "label-off"]}
    assert loads_["ok"] is not None and loads_["ok"].oversubscription == ann.Oversubscription(3000, 6 << 30)
    assert all(v is not None and v.oversubscription is None for k, v in loads_.items() if k != "ok")
    assert sorted(rejected) == sorted(
        [("too-much-cpu", "out_of_range"), ("too-much-memory", "out_of_range"), ("huge", "malformed"),
         ("float", "malformed"), ("negative", "malformed"), ("other-digits", "malformed")]
    )  # fmt: skip
    # Unchanged inputs are not parsed (nor counted) again; a changed allocatable is.
    board.update_node({"metadata": {"name": "too-much-cpu", "annotations": {**loads(0.3), ann.PUBLISHED_CPU: "4001",
                       ann.PUBLISHED_MEMORY: "0"}}, "status": {"allocatable": alloc}})  # fmt: skip
    assert len(rejected) == 6
    board.update_node({"metadata": {"name": "too-much-cpu", "annotations": {**loads(0.3), ann.PUBLISHED_CPU: "4001",
                       ann.PUBLISHED_MEMORY: "0"}}, "status": {"allocatable": {"cpu": "5", "memory": "8Gi"}}})  # fmt: skip
    taken = board.load("too-much-cpu")
    assert len(rejected) == 6 and taken is not None and taken.oversubscription == ann.Oversubscription(4001, 0)
