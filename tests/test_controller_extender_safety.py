"""Extender safety (issue 22): offline pods pass crane's load predicates by default (their batch capacity is
computed from the load already), and a filter that would drop every candidate drops none (fail open); both
switchable. The start-up line names the scheme the controller serves."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from common.listen import url_of
from controller import load_annotations as ann
from controller.config import ClassifySettings, ExtenderSettings
from controller.extender import Extender, create_app
from controller.metrics import ControllerMetrics
from controller.policy import default_policy
from controller.run import serves_tls
from controller.scoring import ScoreBoard, Scorer
from serving.server import make_server
from serving.settings import ServingSettings
from testsupport.certs import have_openssl, make_cert

NOW = 1795341600.0
METRICS = tuple(s.name for s in default_policy().spec.sync_policy)
ONLINE = {"metadata": {"name": "web", "namespace": "default"}, "spec": {"priority": 100}}
BATCH_RESOURCES = {
    "metadata": {"name": "job", "namespace": "batch"},
    "spec": {"containers": [{"name": "a", "resources": {"requests": {"kubernetes.io/batch-cpu": "500"}}}]},
}
OFFLINE_CLASS = {"metadata": {"name": "be", "namespace": "batch"}, "spec": {"priorityClassName": "koord-batch"}}


def loads(cpu_1h: float) -> dict[str, str]:
    """Every window at 0.3 but cpu_usage_max_avg_1h (limit 0.75 in crane's default policy)."""
    out = {m: ann.format_value(0.3, NOW) for m in METRICS}
    out["cpu_usage_max_avg_1h"] = ann.format_value(cpu_1h, NOW)
    return out


def client(nodes: dict[str, float], settings: ExtenderSettings) -> tuple[TestClient, ControllerMetrics]:
    board = ScoreBoard(Scorer(default_policy().spec))
    for name, cpu_1h in nodes.items():
        board.update_node({"metadata": {"name": name, "annotations": loads(cpu_1h)}})
    metrics = ControllerMetrics()
    extender = Extender(board, ClassifySettings(), clock=lambda: NOW, settings=settings, metrics=metrics)
    return TestClient(create_app(extender, metrics)), metrics


def filtered(c: TestClient, pod: dict[str, Any], names: list[str]) -> tuple[list[str], set[str]]:
    body = c.post("/filter", json={"Pod": pod, "NodeNames": names}).json()
    assert body["Error"] == ""
    return body["NodeNames"], set(body["FailedNodes"])


def fail_opens(metrics: ControllerMetrics) -> float:
    return metrics.registry.get_sample_value("colo_controller_extender_fail_open_total") or 0.0


@pytest.mark.parametrize("pod", [BATCH_RESOURCES, OFFLINE_CLASS], ids=["batch-resources", "offline-class"])
def test_offline_pods_pass_the_load_predicates_by_default(pod: dict[str, Any]) -> None:
    c, _ = client({"busy": 0.9, "idle": 0.1}, ExtenderSettings())
    assert filtered(c, pod, ["busy", "idle"]) == (["busy", "idle"], set())
    assert filtered(c, ONLINE, ["busy", "idle"]) == (["idle"], {"busy"})  # online pods are filtered as before
    c, _ = client({"busy": 0.9, "idle": 0.1}, ExtenderSettings(filter_offline=True))
    assert filtered(c, pod, ["busy", "idle"]) == (["idle"], {"busy"})


def test_fail_open_when_every_candidate_would_be_filtered() -> None:
    c, metrics = client({"a": 0.9, "b": 0.8}, ExtenderSettings())
    assert filtered(c, ONLINE, ["a", "b"]) == (["a", "b"], set())
    assert fail_opens(metrics) == 1
    items = [{"metadata": {"name": n}} for n in ("a", "b")]
    body = c.post("/filter", json={"Pod": ONLINE, "Nodes": {"items": items}}).json()  # nodeCacheCapable: false
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["a", "b"] and body["FailedNodes"] == {}
    assert fail_opens(metrics) == 2
    c, metrics = client({"a": 0.9, "b": 0.8, "c": 0.1}, ExtenderSettings())
    assert filtered(c, ONLINE, ["a", "b", "c"]) == (["c"], {"a", "b"})  # one node left: the filter holds
    assert fail_opens(metrics) == 0
    assert filtered(c, ONLINE, []) == ([], set()) and fail_opens(metrics) == 0  # nothing to filter


def test_fail_closed_when_switched_off() -> None:
    c, metrics = client({"a": 0.9, "b": 0.8}, ExtenderSettings(fail_open=False))
    assert filtered(c, ONLINE, ["a", "b"]) == ([], {"a", "b"})
    assert fail_opens(metrics) == 0


def _scheme(settings: ServingSettings) -> str:
    server = make_server(FastAPI(), "127.0.0.1", 0, settings)
    try:
        return "https" if serves_tls(server) else "http"
    finally:
        server.close()


@pytest.mark.skipif(not have_openssl(), reason="needs openssl to make a certificate")
def test_the_start_up_line_names_the_scheme_served(tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path, "controller")
    assert _scheme(ServingSettings(tls_cert_file=str(cert), tls_key_file=str(key))) == "https"
    assert _scheme(ServingSettings()) == "http"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        assert url_of(sock, "https") == f"https://127.0.0.1:{sock.getsockname()[1]}"
