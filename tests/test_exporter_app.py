"""The HTTP app: /metrics negotiation and caching, health, readiness, the JSON API; one real uvicorn run."""

from __future__ import annotations

import asyncio
import fnmatch
import gzip
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime

import httpx
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from starlette.applications import Starlette
from starlette.testclient import TestClient

from agent.snapshot import ContainerBatch, PodBatch
from agent.view import AgentView
from agent.windows.store import WINDOW_NAMES
from cgroup.kubelet_rules import BatchResources
from contract.agent_api import parse_pods_document
from exporter.api import pod_document
from exporter.app import accepts_gzip, close_app, create_app, make_server, serve, wants_openmetrics
from exporter.render import RenderCache
from tests.test_exporter_fixtures import QUOTA, container, feed, make_view, parse, pod, snapshot

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)


BATCH = PodBatch((ContainerBatch("main", "c-2a", BatchResources(500, 1000, 1 << 30, 2 << 30)),
                  ContainerBatch("side", None, BatchResources(250, 500, 1 << 20, 1 << 20))))  # fmt: skip


def populate(view: AgentView, seconds: int = 90, start: float | None = None) -> None:
    start = time.monotonic() - seconds if start is None else start
    for i in range(seconds):
        batch = pod("u2", None, None, qos="BestEffort", pod_class="offline", cpu=0.5, ws=1000,
                    containers=(container("c-2a", cpu=None),))  # fmt: skip
        batch.meta = replace(batch.meta, batch=BATCH)
        pods = [pod("u1", "team-a", "web", qos="Guaranteed", cpu=1.0, ws=2000, labels={QUOTA: "q1"}), batch]
        feed(view, snapshot(i + 1, start + i + 1, pods))


@pytest.fixture
def view() -> AgentView:
    return make_view()


@pytest.fixture
def app(view: AgentView) -> Iterator[Starlette]:
    application = create_app(view)
    yield application
    close_app(application)


@pytest.fixture
def client(app: Starlette) -> Iterator[TestClient]:
    with TestClient(app) as c:
        yield c


def cache_of(app: Starlette) -> RenderCache:
    cache: RenderCache = app.state.render_cache
    return cache


def raw_get(client: TestClient, path: str, headers: dict[str, str]) -> tuple[httpx.Response, bytes]:
    """The undecoded body (httpx would transparently gunzip it)."""
    with client.stream("GET", path, headers=headers) as resp:
        return resp, b"".join(resp.iter_raw())


# ---------------------------------------------------------------------- negotiation helpers


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        ("", False),
        ("*/*", False),
        ("text/plain;version=0.0.4", False),
        (PROMETHEUS_ACCEPT, True),
        ("application/openmetrics-text", True),
        ("application/openmetrics-text;version=1.0.0", True),
        ("application/openmetrics-text;version=2.0.0", False),
        ("application/openmetrics-text;q=0", False),
        ("text/plain;q=0.9, application/openmetrics-text;q=0.5", False),
        ("application/openmetrics-text; q=0.5, text/plain; q=0.5", True),
    ],
)
def test_wants_openmetrics(accept: str, expected: bool) -> None:
    assert wants_openmetrics(accept) is expected


@pytest.mark.parametrize(
    ("accept_encoding", "expected"),
    [
        ("", False),
        ("gzip", True),
        ("deflate, gzip;q=0.5", True),
        ("GZIP", True),
        ("gzip;q=0", False),
        ("identity", False),
        ("*", True),
        ("*, gzip;q=0", False),
        ("br, *;q=0.1", True),
    ],
)
def test_accepts_gzip(accept_encoding: str, expected: bool) -> None:
    assert accepts_gzip(accept_encoding) is expected


# ---------------------------------------------------------------------- /metrics


def test_metrics_text_is_valid_and_cached(client: TestClient, app: Starlette, view: AgentView) -> None:
    populate(view)
    resp = client.get("/metrics", headers={"Accept-Encoding": "identity"})
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "content-encoding" not in resp.headers
    m = parse(resp.text)
    assert m.one("colo_pod_cpu_usage_cores", uid="u1", namespace="team-a", pod="web") == 1.0
    assert m.one("colo_agent_snapshot_seq") == 90
    again = client.get("/metrics", headers={"Accept-Encoding": "identity"})
    assert again.content == resp.content
    assert cache_of(app).renders == 1


def test_metrics_openmetrics_negotiation(client: TestClient, view: AgentView) -> None:
    populate(view)
    resp = client.get("/metrics", headers={"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "identity"})
    assert resp.headers["content-type"] == "application/openmetrics-text; version=1.0.0; charset=utf-8"
    assert resp.text.endswith("# EOF\n")
    names = {f.name for f in om_parse(resp.text)}  # type: ignore[no-untyped-call]
    assert {"colo_node_cpu_usage_ratio", "cpu_usage_avg_5m", "colo_container_cpu_usage_cores"} <= names
    plain = client.get("/metrics", headers={"Accept": "text/plain", "Accept-Encoding": "identity"})
    assert not plain.text.endswith("# EOF\n")
    assert "Accept" in plain.headers["vary"]


def test_metrics_gzip_negotiation(client: TestClient, app: Starlette, view: AgentView) -> None:
    populate(view)
    plain = client.get("/metrics", headers={"Accept-Encoding": "identity"}).content
    resp, raw = raw_get(client, "/metrics", {"Accept-Encoding": "gzip"})
    assert resp.headers["content-encoding"] == "gzip"
    assert gzip.decompress(raw) == plain
    resp, raw = raw_get(client, "/metrics", {"Accept-Encoding": "gzip;q=0"})
    assert "content-encoding" not in resp.headers and raw == plain
    resp, raw = raw_get(client, "/metrics", {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"})
    assert resp.headers["content-encoding"] == "gzip"
    assert gzip.decompress(raw).endswith(b"# EOF\n")
    assert cache_of(app).renders == 1  # four variants, one render


def test_metrics_reflect_new_snapshots_and_vanished_pods(client: TestClient, view: AgentView) -> None:
    populate(view, start=0.0)
    assert 'uid="u2"' in client.get("/metrics").text
    feed(view, snapshot(91, 95.0, [pod("u1", "team-a", "web")]))  # 4 s later: beyond the staleness bound
    text = client.get("/metrics").text
    assert 'uid="u2"' not in text
    assert parse(text).one("colo_agent_snapshot_seq") == 91


def test_metrics_before_the_first_snapshot(client: TestClient) -> None:
    resp = client.get("/metrics")
    assert resp.status_code == 200
    assert "colo_node" not in resp.text


def test_metrics_render_failure_is_500(
    client: TestClient, app: Starlette, view: AgentView, monkeypatch: pytest.MonkeyPatch
) -> None:
    populate(view)

    def boom(_snap: object) -> list[object]:
        raise RuntimeError("bug")

    monkeypatch.setattr(app.state.collector, "collect_snapshot", boom)
    assert client.get("/metrics").status_code == 500


# ---------------------------------------------------------------------- health


def test_healthz_follows_the_sampling_loop(client: TestClient, view: AgentView) -> None:
    populate(view)
    view.last_tick_mono = time.monotonic()
    resp = client.get("/healthz")
    assert resp.status_code == 200 and resp.json()["status"] == "ok"
    view.last_tick_mono = time.monotonic() - (3 * view.interval + 6.0)  # the loop stalled
    resp = client.get("/healthz")
    assert resp.status_code == 503
    assert resp.json()["status"] == "stalled" and resp.json()["last_tick_age_seconds"] > 8.0


def test_readyz_before_and_after_the_first_snapshot(client: TestClient, view: AgentView) -> None:
    resp = client.get("/readyz")
    assert resp.status_code == 503 and resp.json()["snapshot"] is False
    populate(view, seconds=1)
    assert client.get("/readyz").status_code == 200
    view.cluster_synced = lambda: False
    assert client.get("/readyz").status_code == 503


# ---------------------------------------------------------------------- JSON API


def test_node_json(client: TestClient, view: AgentView) -> None:
    assert client.get("/api/v1/node").status_code == 503
    view.node_sections["oversubscription"] = lambda: {"offline_cpu_cores": 3.0}
    populate(view)
    resp = client.get("/api/v1/node")
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/json"
    doc = resp.json()
    assert doc["node_name"] == "node-a"
    assert doc["cpu_capacity_cores"] == 8.0 and doc["cpu_cores"] == 2.0 and doc["cpu_usage_ratio"] == 0.25
    assert doc["memory_total_bytes"] == 16 << 30 and doc["memory_used_bytes"] == 4 << 30
    assert doc["memory_usage_ratio"] == 0.25 and doc["memory_page_cache_bytes"] == 1 << 30
    assert doc["pressure"] == {"cpu": {"some": 0.5, "full": None}, "io": {"some": 0.25, "full": 0.125}}
    assert doc["network"]["total"] == {"receive_bytes_per_second": 1010.0, "transmit_bytes_per_second": 2020.0}
    assert doc["network"]["interfaces"]["cni0"]["physical"] is False
    expected = {f"{p}{w}" for p in ("cpu_usage_", "mem_usage_") for w in WINDOW_NAMES}
    assert set(doc["windows"]) == expected
    for key in (
        "cpu_usage_avg_1m",
        "cpu_usage_avg_5m",
        "mem_usage_max_avg_1h",
        "mem_usage_max_avg_1d",
        "cpu_usage_p95_5m",
    ):
        assert key in doc["windows"]
    assert doc["windows"]["cpu_usage_avg_1m"]["value"] == pytest.approx(0.25)  # a ratio, not percent
    assert doc["windows"]["mem_usage_avg_1m"]["coverage"] == pytest.approx(1.0)
    assert 0 < doc["windows"]["cpu_usage_avg_5m"]["coverage"] < 0.5
    units = doc["units"]
    for field in ("cpu_capacity_cores", "cpu_cores", "memory_total_bytes", "memory_usage_ratio", "network"):
        assert field in units
    assert (
        units["cpu_cores"] == "cores" and units["memory_used_bytes"] == "bytes" and units["cpu_usage_ratio"] == "ratio"
    )
    assert doc["seq"] == 90
    ts = doc["timestamp"]
    assert ts.endswith("Z") and datetime.fromisoformat(ts).timestamp() == pytest.approx(1_700_000_090.0)
    assert doc["oversubscription"] == {"offline_cpu_cores": 3.0}


def test_node_json_survives_a_failing_section(client: TestClient, view: AgentView) -> None:
    populate(view, seconds=2)

    def broken() -> dict[str, object]:
        raise ValueError("nope")

    view.node_sections["enforcement"] = broken
    doc = client.get("/api/v1/node").json()
    assert doc["enforcement"] == {"error": "ValueError: nope"}


def test_pods_json(client: TestClient, view: AgentView) -> None:
    assert client.get("/api/v1/pods").status_code == 503
    view.pod_sections["enforcement"] = lambda uid: {"throttled": True} if uid == "u2" else None
    populate(view, start=0.0)  # samples at t = 1..90 on the store's grid (phase 0): minute boundary 60 is complete
    resp = client.get("/api/v1/pods")
    assert resp.status_code == 200
    assert "/api/v1/units" in resp.headers["link"]
    pods = resp.json()
    assert [p["uid"] for p in pods] == ["u2", "u1"]  # standalone (namespace "") sorts first
    standalone, web = pods
    assert web["namespace"] == "team-a" and web["name"] == "web"
    assert standalone["namespace"] is None and standalone["name"] is None
    assert web["qos"] == "guaranteed" and standalone["qos"] == "besteffort"
    assert web["class"] == "online" and standalone["class"] == "offline"
    assert web["cpu_cores"] == 1.0 and web["memory_working_set_bytes"] == 2000 and web["memory_anon_bytes"] == 600
    assert web["cpu_throttled_ratio"] == 0.1
    assert web["containers"][0] == {
        "id": "u1-c0",
        "cpu_cores": 0.1,
        "memory_working_set_bytes": 100,
        "memory_anon_bytes": 60,
        "cpu_throttled_ratio": 0.05,
    }
    assert standalone["containers"][0]["cpu_cores"] is None
    assert list(web["windows"]) == list(WINDOW_NAMES)  # keyed by window name, in WINDOW_NAMES order
    for name in WINDOW_NAMES:
        assert set(web["windows"][name]) == {"cpu_cores", "memory_working_set_bytes"}
    assert web["windows"]["avg_1m"] == {
        "cpu_cores": {"value": pytest.approx(1.0), "coverage": pytest.approx(1.0)},  # cores
        "memory_working_set_bytes": {"value": pytest.approx(2000), "coverage": pytest.approx(1.0)},  # bytes
    }
    assert standalone["windows"]["avg_1m"]["cpu_cores"]["value"] == pytest.approx(0.5)
    assert standalone["windows"]["avg_1m"]["memory_working_set_bytes"]["value"] == pytest.approx(1000)
    # max_avg_1h: the 5-minute average at the one completed boundary (t=60) covers samples 1..60: the first
    # counts max_gap (5 s), the other 59 one second each, over the hour's 3600 s.
    hour = web["windows"]["max_avg_1h"]["memory_working_set_bytes"]
    assert hour == {"value": pytest.approx(2000), "coverage": pytest.approx(64 / 3600)}
    assert standalone["enforcement"] == {"throttled": True} and "enforcement" not in web


def test_units_endpoint(client: TestClient) -> None:
    doc = client.get("/api/v1/units").json()
    assert doc["pods"]["cpu_cores"] == "cores"
    assert doc["pods"]["windows.*.memory_working_set_bytes.value"] == "bytes"
    assert doc["pods"]["windows.*.cpu_cores.value"] == "cores"
    assert doc["pods"]["windows.*.*.coverage"] == "ratio"
    assert doc["node"]["windows.value"] == "ratio"


def _numeric_paths(doc: object, prefix: str = "") -> Iterator[str]:
    """Dotted paths of the numeric leaves of a JSON document; list indexes are left out."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _numeric_paths(value, f"{prefix}.{key}" if prefix else key)
    elif isinstance(doc, list):
        for value in doc:
            yield from _numeric_paths(value, prefix)
    elif isinstance(doc, int | float) and not isinstance(doc, bool):
        yield prefix


def test_units_name_every_numeric_field_of_a_pod(client: TestClient, view: AgentView) -> None:
    populate(view, seconds=5)
    units = client.get("/api/v1/units").json()["pods"]
    paths = set(_numeric_paths(client.get("/api/v1/pods").json()))
    assert "windows.p95_5m.memory_working_set_bytes.value" in paths
    unnamed = {p for p in paths if not any(fnmatch.fnmatchcase(p, pattern) for pattern in units)}
    assert unnamed == set()


def test_pods_show_their_batch_requests_and_limits(client: TestClient, view: AgentView) -> None:
    populate(view, seconds=3)
    body = client.get("/api/v1/pods").content
    by_uid = {p.uid: p for p in parse_pods_document(body)}  # as the controller reads it
    assert by_uid["u1"].batch is None
    batch = by_uid["u2"].batch
    assert batch is not None
    assert (batch.cpu_request_millicores, batch.cpu_limit_millicores) == (750, 1500)
    assert (batch.memory_request_bytes, batch.memory_limit_bytes) == ((1 << 30) + (1 << 20), (2 << 30) + (1 << 20))
    assert batch.problems == []
    # a request above its limit: shown, with why the agent does not write it
    broken = pod("u3", pod_class="offline")
    broken.meta = replace(broken.meta, batch=PodBatch((ContainerBatch("main", "x", BatchResources(900, 500)),)))
    doc = pod_document(view, broken, None)
    assert doc["batch"]["cpu_limit_millicores"] == 500
    assert doc["batch"]["problems"] == ["container main: batch-cpu request 900m above its limit 500m"]
    # an older agent's document has no batch key at all: still valid
    old = [{k: v for k, v in p.items() if k != "batch"} for p in client.get("/api/v1/pods").json()]
    assert all(p.batch is None for p in parse_pods_document(json.dumps(old)))


def test_pod_without_windows_has_every_window_unknown(view: AgentView) -> None:
    doc = pod_document(view, pod("u9"), None)
    assert list(doc["windows"]) == list(WINDOW_NAMES)
    unknown = {"value": None, "coverage": 0.0}
    assert doc["windows"]["max_avg_1d"] == {"cpu_cores": unknown, "memory_working_set_bytes": unknown}


def test_window_stats_are_computed_once_per_snapshot(client: TestClient, app: Starlette, view: AgentView) -> None:
    populate(view)
    client.get("/metrics")
    client.get("/api/v1/pods")
    client.get("/api/v1/node")
    assert app.state.windows.computations == 1


# ---------------------------------------------------------------------- real uvicorn


def test_real_uvicorn_server_in_a_thread(app: Starlette, view: AgentView) -> None:
    populate(view)
    server = make_server(app, "127.0.0.1", 0)
    thread = server.start_thread()
    try:
        base = f"http://127.0.0.1:{server.bound_port}"
        with httpx.Client(base_url=base, timeout=10.0) as http:
            resp = http.get("/metrics", headers={"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"})
            assert resp.status_code == 200 and resp.headers["content-encoding"] == "gzip"
            assert resp.text.endswith("# EOF\n")  # httpx gunzipped it
            assert http.get("/healthz").status_code == 200
            assert len(http.get("/api/v1/pods").json()) == 2
            assert http.get("/metrics").content == http.get("/metrics").content
    finally:
        server.stop()
        thread.join(10)
    assert not thread.is_alive()
    assert cache_of(app).renders == 1


def test_serve_in_an_event_loop_stops_on_the_event(app: Starlette, view: AgentView) -> None:
    populate(view, seconds=2)
    server = make_server(app, "127.0.0.1", 0)
    result: dict[str, object] = {}

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(serve(app, "127.0.0.1", 0, stop=stop, server=server))
        while not server.started:
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.bound_port}") as http:
            result["metrics"] = (await http.get("/metrics")).status_code
            result["ready"] = (await http.get("/readyz")).status_code
        stop.set()
        await asyncio.wait_for(task, 10)

    thread = threading.Thread(target=asyncio.run, args=(main(),))
    thread.start()
    thread.join(20)
    assert not thread.is_alive()
    assert result == {"metrics": 200, "ready": 200}


def test_json_documents_capped_with_503(view: AgentView) -> None:
    """At most max_concurrent documents are computed at once; past that the answer is 503 at once."""
    populate(view, seconds=5)
    application = create_app(view, max_concurrent=1)
    try:
        with TestClient(application) as c:
            assert c.get("/api/v1/pods").status_code == 200
            application.state.gate.enter()  # one document in progress
            r = c.get("/api/v1/node")
            assert r.status_code == 503 and "busy" in r.json()["error"]
            assert c.get("/healthz").status_code in (200, 503) and c.get("/metrics").status_code != 503
            application.state.gate.leave()
            assert c.get("/api/v1/node").status_code == 200
    finally:
        close_app(application)
