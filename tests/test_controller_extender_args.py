"""Malformed ExtenderArgs of any shape are a one-line 400, never a 500; nothing a request sends is kept
unbounded or logged whole."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controller.config import ClassifySettings
from controller.extender import Extender, create_app
from controller.metrics import ControllerMetrics
from controller.pod_classifier import PodClassifier
from controller.policy import default_policy
from controller.scoring import ScoreBoard, Scorer

POD = {"metadata": {"name": "web", "namespace": "default"}, "spec": {"priority": 100}}


@pytest.fixture
def client() -> TestClient:
    extender = Extender(ScoreBoard(Scorer(default_policy().spec)), ClassifySettings())
    return TestClient(create_app(extender, ControllerMetrics()), raise_server_exceptions=False)


MALFORMED: list[tuple[str, Any]] = [
    ("metadata a string", {"Pod": {"metadata": "web"}, "NodeNames": ["a"]}),
    ("labels a string", {"Pod": {"metadata": {"labels": "app=web"}}, "NodeNames": ["a"]}),
    ("annotations a string", {"Pod": {"metadata": {"annotations": "x"}}, "NodeNames": ["a"]}),
    (
        "annotation not a string",
        {"Pod": {"metadata": {"annotations": {"volcano.sh/qos-level": -1}}}, "NodeNames": ["a"]},
    ),
    ("label a list", {"Pod": {"metadata": {"labels": {"koordinator.sh/qosClass": ["BE"]}}}, "NodeNames": ["a"]}),
    ("priorityClassName a list", {"Pod": {"spec": {"priorityClassName": ["koord-batch"]}}, "NodeNames": ["a"]}),
    ("priority a string", {"Pod": {"spec": {"priority": "high"}}, "NodeNames": ["a"]}),
    ("priority a bool", {"Pod": {"spec": {"priority": True}}, "NodeNames": ["a"]}),
    ("spec a list", {"Pod": {"spec": []}, "NodeNames": ["a"]}),
    ("uid an object", {"Pod": {"metadata": {"uid": {}}}, "NodeNames": ["a"]}),
    ("ownerReferences a string", {"Pod": {"metadata": {"ownerReferences": "DaemonSet"}}, "NodeNames": ["a"]}),
    ("Pod a list", {"Pod": [], "NodeNames": ["a"]}),
    ("Nodes a list", {"Pod": POD, "Nodes": []}),
    ("Nodes items an object", {"Pod": POD, "Nodes": {"items": {}}}),
    ("Node a string", {"Pod": POD, "Nodes": {"items": ["node-a"]}}),
    ("Node without a name", {"Pod": POD, "Nodes": {"items": [{"metadata": {}}]}}),
    ("Node metadata a string", {"Pod": POD, "Nodes": {"items": [{"metadata": "a"}]}}),
    ("Node annotations a list", {"Pod": POD, "Nodes": {"items": [{"metadata": {"name": "a", "annotations": []}}]}}),
    ("NodeNames a string", {"Pod": POD, "NodeNames": "a"}),
    ("NodeNames of numbers", {"Pod": POD, "NodeNames": [1]}),
    ("a number", 7),
    ("a long key with a newline", {"Pod": {"metadata": {"labels": {"a\n" * 100_000: 1}}}, "NodeNames": ["a"]}),
]


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
@pytest.mark.parametrize(("case", "doc"), MALFORMED, ids=[c for c, _ in MALFORMED])
def test_malformed_args_answered_400_with_one_line(client: TestClient, verb: str, case: str, doc: Any) -> None:
    r = client.post(f"/{verb}", json=doc)
    assert r.status_code == 400, (case, r.status_code, r.text)
    message = r.json()["Error" if verb == "filter" else "error"]
    assert message and "\n" not in message and len(message) < 200


def test_garbage_bodies_answered_400(client: TestClient) -> None:
    for body in (b"", b"{", b"\xff\xfe", b"[" * 100_000, b'{"Pod": {}, "NodeNames": ["a"]' + b" " * 10):
        r = client.post("/prioritize", content=body)
        assert r.status_code == 400 and "\n" not in r.json()["error"]


def test_valid_args_still_answered(client: TestClient) -> None:
    assert client.post("/filter", json={"Pod": POD, "NodeNames": ["a"]}).json()["NodeNames"] == ["a"]
    nodes = {"items": [{"metadata": {"name": "a", "annotations": {}}}]}
    assert client.post("/prioritize", json={"Pod": POD, "Nodes": nodes}).json() == [{"Host": "a", "Score": 0}]
    assert client.post("/filter", json={"Pod": POD, "Nodes": None, "NodeNames": []}).json()["NodeNames"] == []


def test_docs_off_unless_asked_for(client: TestClient) -> None:
    assert client.get("/docs").status_code == 404 and client.get("/openapi.json").status_code == 404


def test_request_data_kept_bounded_and_clipped_in_logs(caplog: pytest.LogCaptureFixture) -> None:
    """Huge UIDs and qos-level values: remembered in at most 128 characters each, logged in at most ~80."""
    classify = PodClassifier(ClassifySettings())
    caplog.set_level(logging.WARNING)
    for i in range(3):
        uid = f"{i}" + "u" * (20 << 20)
        pod = {"metadata": {"name": "p", "uid": uid, "annotations": {"volcano.sh/qos-level": "x" * (1 << 20)}}}
        assert classify(pod) == "online"
    kept = classify._seen | classify._classifier._warned
    assert len(kept) == 3 and all(len(k) <= 128 for k in kept)
    lines = [r.getMessage() for r in caplog.records if "qos-level" in r.getMessage()]
    assert len(lines) == 3 and all(len(line) < 400 for line in lines)


def test_remembered_pods_capped_in_number() -> None:
    from contract.classify import MAX_WARNED

    classify = PodClassifier(ClassifySettings())
    for i in range(MAX_WARNED + 100):
        classify({"metadata": {"uid": f"u{i}", "annotations": {"volcano.sh/qos-level": "bogus"}}})
    assert len(classify._seen) <= MAX_WARNED and len(classify._classifier._warned) <= MAX_WARNED
