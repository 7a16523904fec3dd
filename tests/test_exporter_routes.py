"""The agent's route table: served by Starlette alone, or by FastAPI with its docs (``serving.api_docs``),
with the same answers either way; FastAPI is not loaded unless the docs are asked for."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from exporter.app import close_app, create_app
from tests.test_exporter_app import populate
from tests.test_exporter_fixtures import make_view

ROOT = Path(__file__).resolve().parents[1]
ROUTES = ("/metrics", "/healthz", "/readyz", "/api/v1/node", "/api/v1/pods", "/api/v1/units")


def _client(api_docs: bool) -> Iterator[TestClient]:
    view = make_view()
    populate(view, seconds=5, start=1000.0)
    view.last_tick_mono = time.monotonic()
    app = create_app(view, api_docs=api_docs)
    try:
        with TestClient(app) as client:
            yield client
    finally:
        close_app(app)


@pytest.fixture
def plain() -> Iterator[TestClient]:
    yield from _client(api_docs=False)


@pytest.fixture
def documented() -> Iterator[TestClient]:
    yield from _client(api_docs=True)


def test_the_agent_does_not_load_fastapi_without_docs() -> None:
    code = (
        "import sys\n"
        "from colo_agent.serve import build_server\n"
        "from exporter.app import close_app, create_app\n"
        "from tests.test_exporter_fixtures import make_view\n"
        "close_app(create_app(make_view()))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'opentelemetry')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60, cwd=ROOT)
    assert json.loads(out.stdout.replace("'", '"')) == []


def test_docs_are_off_by_default_and_served_with_api_docs(plain: TestClient, documented: TestClient) -> None:
    for path in ("/docs", "/redoc", "/openapi.json"):
        off = plain.get(path)
        assert (off.status_code, off.json()) == (404, {"detail": "Not Found"})
        assert documented.get(path).status_code == 200
    spec = documented.get("/openapi.json").json()
    assert spec["info"] == {
        "title": "colo-agent",
        "description": "Node and pod usage, rolling windows and the agent's state. Units: /api/v1/units.",
        "version": "1",
    }
    assert list(spec["paths"]) == list(ROUTES)
    assert all(list(spec["paths"][p]) == ["get"] and spec["paths"][p]["get"]["summary"] for p in ROUTES)
    assert "window name" in spec["paths"]["/api/v1/pods"]["get"]["description"]
    assert list(spec["paths"]["/api/v1/units"]["get"]["responses"]["200"]["content"]) == ["application/json"]
    assert "application/json" not in spec["paths"]["/metrics"]["get"]["responses"]["200"].get("content", {})


@pytest.mark.parametrize("path", ROUTES)
def test_both_apps_answer_alike(plain: TestClient, documented: TestClient, path: str) -> None:
    a, b = plain.get(path), documented.get(path)
    assert a.status_code == b.status_code == 200
    assert a.headers["content-type"] == b.headers["content-type"]
    if path in ("/api/v1/units", "/readyz"):
        assert a.content == b.content


@pytest.mark.parametrize("docs", [False, True])
def test_routing_errors_are_worded_alike(docs: bool, plain: TestClient, documented: TestClient) -> None:
    client = documented if docs else plain
    missing = client.get("/nope")
    assert (missing.status_code, missing.json()) == (404, {"detail": "Not Found"})
    for method in ("POST", "HEAD", "DELETE"):  # GET only, as the routes were declared
        wrong = client.request(method, "/metrics")
        assert wrong.status_code == 405 and wrong.headers["allow"] == "GET"
        assert wrong.headers["content-type"] == "application/json"
    assert client.post("/healthz").json() == {"detail": "Method Not Allowed"}
    redirect = client.get("/metrics/", follow_redirects=False)
    assert redirect.status_code == 307 and redirect.headers["location"].endswith("/metrics")


def test_the_app_is_a_starlette_app_either_way(plain: TestClient, documented: TestClient) -> None:
    for client in (plain, documented):
        app = client.app
        assert isinstance(app, Starlette)
        assert app.state.render_cache is not None and app.state.gate is not None
