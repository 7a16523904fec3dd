"""Secure serving: bearer tokens through TokenReview and SubjectAccessReview against the fake API server
(allow, deny, cache, API away), probes and extender calls open, and TLS certificates reloaded."""

from __future__ import annotations

import shutil
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from controller.config import ClassifySettings
from controller.extender import EXTENDER_PATHS, Extender, create_app
from controller.metrics import ControllerMetrics
from controller.policy import default_policy
from controller.scoring import ScoreBoard, Scorer
from kube import Kube
from serving.server import Server, make_server, secure
from serving.settings import ServingSettings
from testsupport.certs import have_openssl, make_cert
from testsupport.kubeapi.fixtures import kube, kube_api  # noqa: F401
from testsupport.kubeapi.server import ACCESS_REVIEWS, TOKEN_REVIEWS, FakeKubeAPI
from testsupport.waiting import wait_for

PROMETHEUS = "prometheus-token"
STRANGER = "stranger-token"


def controller_app() -> object:
    extender = Extender(ScoreBoard(Scorer(default_policy().spec)), ClassifySettings())
    return create_app(extender, ControllerMetrics())


@pytest.fixture
def client(kube_api: FakeKubeAPI, kube: Kube) -> TestClient:  # noqa: F811
    kube_api.add_user(PROMETHEUS, "system:serviceaccount:monitoring:prometheus-k8s", groups=["system:serviceaccounts"])
    kube_api.add_user(STRANGER, "system:serviceaccount:default:default")
    kube_api.grant("system:serviceaccount:monitoring:prometheus-k8s", "get", "/metrics")
    app = controller_app()
    secure(app, ServingSettings(authenticate=True), kube, open_paths=EXTENDER_PATHS)  # type: ignore[arg-type]
    return TestClient(app)  # type: ignore[arg-type]


def reviews(api: FakeKubeAPI) -> list[str]:
    return [r.path for r in api.requests if r.path in (TOKEN_REVIEWS, ACCESS_REVIEWS)]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_allowed_token_scrapes_and_the_answer_is_cached(client: TestClient, kube_api: FakeKubeAPI) -> None:  # noqa: F811
    r = client.get("/metrics", headers=bearer(PROMETHEUS))
    assert r.status_code == 200 and "colo_controller" in r.text
    assert reviews(kube_api) == [TOKEN_REVIEWS, ACCESS_REVIEWS]
    sar = next(r for r in kube_api.requests if r.path == ACCESS_REVIEWS).body
    assert sar["spec"]["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
    assert sar["spec"]["user"] == "system:serviceaccount:monitoring:prometheus-k8s"
    assert "system:authenticated" in sar["spec"]["groups"]
    for _ in range(5):
        assert client.get("/metrics", headers=bearer(PROMETHEUS)).status_code == 200
    assert len(reviews(kube_api)) == 2, "decisions are cached"


def test_denied_and_unknown_tokens(client: TestClient, kube_api: FakeKubeAPI) -> None:  # noqa: F811
    r = client.get("/metrics")
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
    assert client.get("/metrics", headers={"Authorization": "Basic abc"}).status_code == 401
    assert client.get("/metrics", headers=bearer("no-such-token")).status_code == 401
    assert client.get("/metrics", headers=bearer(STRANGER)).status_code == 403
    assert client.get("/api/v1/scores", headers=bearer(PROMETHEUS)).status_code == 403  # only /metrics granted
    kube_api.grant("group:system:serviceaccounts", "get", "/api/*")
    assert client.get("/api/v1/scores", headers=bearer(PROMETHEUS)).status_code == 403  # the denial is cached
    assert client.get("/api/v1/scores", headers=bearer(STRANGER)).status_code == 403  # not in the group


def test_probes_and_extender_open(client: TestClient, kube_api: FakeKubeAPI) -> None:  # noqa: F811
    assert client.get("/healthz").status_code == 200 and client.get("/readyz").status_code == 200
    body = {"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["a"]}
    assert client.post("/prioritize", json=body).status_code == 200  # kube-scheduler has no token to send
    assert client.get("/docs").status_code == 401  # off, and not even its absence is told to strangers
    assert reviews(kube_api) == []


def test_api_away_is_503_not_500(client: TestClient, kube_api: FakeKubeAPI) -> None:  # noqa: F811
    kube_api.stop()
    r = client.get("/metrics", headers=bearer(PROMETHEUS))
    assert r.status_code == 503 and "unreachable" in r.json()["error"]
    kube_api.start()
    assert client.get("/metrics", headers=bearer(PROMETHEUS)).status_code == 200  # 503 is not cached


def test_authentication_needs_a_cluster() -> None:
    with pytest.raises(ValueError, match="needs a cluster"):
        secure(controller_app(), ServingSettings(authenticate=True), None)  # type: ignore[arg-type]


# ---- TLS -----------------------------------------------------------------------------------------


def served_certificate(port: int) -> bytes:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw, ctx.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def der_of(cert: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.read_text())


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[Server, Path, Path]]:
    if not have_openssl():
        pytest.skip("needs the openssl CLI")
    first_cert, first_key = make_cert(tmp_path, "first")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(first_cert, cert)
    shutil.copy(first_key, key)
    settings = ServingSettings(tls_cert_file=str(cert), tls_key_file=str(key), tls_reload_seconds=0.1)
    server = make_server(controller_app(), "127.0.0.1", 0, settings)  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started)
    try:
        yield server, tmp_path, first_cert
    finally:
        server.stop()
        server.close()
        thread.join(10)


def test_https_with_certificates_reloaded_when_they_change(tls_server: tuple[Server, Path, Path]) -> None:
    server, tmp_path, first_cert = tls_server
    port = server.bound_port
    r = httpx.get(
        f"https://127.0.0.1:{port}/healthz", verify=ssl.create_default_context(cafile=str(first_cert)), timeout=30
    )
    assert r.status_code == 200 and r.text == "ok"
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/healthz")  # plain HTTP is not served
    assert served_certificate(port) == der_of(first_cert)
    second_cert, second_key = make_cert(tmp_path, "second")
    # A Secret volume swaps its files by renaming; a half-written pair must not be loaded either.
    shutil.copy(second_key, tmp_path / "tls.key.new")
    shutil.copy(second_cert, tmp_path / "tls.crt.new")
    (tmp_path / "tls.key.new").rename(tmp_path / "tls.key")
    (tmp_path / "tls.crt.new").rename(tmp_path / "tls.crt")

    def swapped() -> bool:
        try:
            return served_certificate(port) == der_of(second_cert)
        except OSError:  # a handshake cut while the server swaps its context: ask again
            return False

    wait_for(swapped, timeout=60)  # generous: a busy machine
    ctx = ssl.create_default_context(cafile=str(second_cert))
    assert httpx.get(f"https://127.0.0.1:{port}/healthz", verify=ctx, timeout=30).status_code == 200


def test_a_bad_certificate_update_keeps_the_old_one(tls_server: tuple[Server, Path, Path]) -> None:
    server, tmp_path, first_cert = tls_server
    (tmp_path / "tls.crt").write_text("not a certificate\n")
    time.sleep(0.5)  # several reload attempts
    assert server.tls is not None
    assert served_certificate(server.bound_port) == der_of(first_cert)


def test_unloadable_certificate_files_fail_at_start(tmp_path: Path) -> None:
    (tmp_path / "bad.crt").write_text("not a certificate")  # a missing file: self-signed until it appears
    settings = ServingSettings(tls_cert_file=str(tmp_path / "bad.crt"), tls_key_file=str(tmp_path / "bad.crt"))
    with pytest.raises(ValueError, match=r"bad\.crt"):
        make_server(controller_app(), "127.0.0.1", 0, settings)  # type: ignore[arg-type]


def test_controller_polls_agents_over_https(tls_server: tuple[Server, Path, Path]) -> None:
    """With agent.scheme https the poller verifies the agents' certificate (issued for a name, reached by IP)."""
    import asyncio

    from controller.config import AgentSettings
    from controller.httpget import FetchError, agent_fetch

    server, tmp_path, first_cert = tls_server
    url = f"https://127.0.0.1:{server.bound_port}/healthz"
    fetch = agent_fetch(AgentSettings(scheme="https", tls_ca_file=str(first_cert)))
    assert asyncio.run(fetch(url, 1024)) == b"ok"
    other, _ = make_cert(tmp_path, "other")
    untrusted = agent_fetch(AgentSettings(scheme="https", tls_ca_file=str(other)))
    with pytest.raises(FetchError) as err:
        asyncio.run(untrusted(url, 1024))
    assert err.value.reason == "tls"
    wrong_name = agent_fetch(AgentSettings(scheme="https", tls_ca_file=str(first_cert), tls_server_name="elsewhere"))
    with pytest.raises(FetchError):
        asyncio.run(wrong_name(url, 1024))


def test_a_flood_of_new_tokens_is_not_a_flood_of_reviews(kube_api: FakeKubeAPI, kube: Kube) -> None:  # noqa: F811
    """Reviews in flight are capped (503 past the cap), so random tokens cannot hammer the API server."""
    import asyncio

    from serving.auth import MAX_REVIEWS_IN_FLIGHT

    app = controller_app()
    secure(app, ServingSettings(authenticate=True), kube)  # type: ignore[arg-type]
    kube_api.inject("POST", TOKEN_REVIEWS, status=None, delay=0.5, times=None)

    async def flood() -> list[int]:
        transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://colo") as client:
            answers = await asyncio.gather(
                *(client.get("/metrics", headers=bearer(f"random-{i}")) for i in range(3 * MAX_REVIEWS_IN_FLIGHT))
            )
        return [r.status_code for r in answers]

    codes = asyncio.run(flood())
    assert codes.count(401) == MAX_REVIEWS_IN_FLIGHT and codes.count(503) == 2 * MAX_REVIEWS_IN_FLIGHT
    assert len(reviews(kube_api)) == MAX_REVIEWS_IN_FLIGHT


def test_poller_sends_its_token_over_https_only(
    kube_api: FakeKubeAPI,  # noqa: F811
    kube: Kube,  # noqa: F811
    tmp_path: Path,
) -> None:
    """agent.bearer_token_file: the controller's token reaches an authenticating server over HTTPS (read at
    every poll, so a rotated token is used), and is never sent over plain HTTP."""
    import asyncio

    from controller.config import AgentSettings
    from controller.httpget import FetchError, agent_fetch

    if not have_openssl():
        pytest.skip("needs the openssl CLI")
    cert, key = make_cert(tmp_path, "agent")
    kube_api.add_user("controller-token", "system:serviceaccount:colo-system:colo-controller")
    kube_api.grant("system:serviceaccount:colo-system:colo-controller", "get", "/api/v1/scores")
    app = controller_app()
    settings = ServingSettings(authenticate=True, tls_cert_file=str(cert), tls_key_file=str(key))
    secure(app, settings, kube)  # type: ignore[arg-type]
    server = make_server(app, "127.0.0.1", 0, settings)  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started)
    try:
        token_file = tmp_path / "token"
        token_file.write_text("stale-token\n")
        url = f"https://127.0.0.1:{server.bound_port}/api/v1/scores"
        fetch = agent_fetch(AgentSettings(scheme="https", tls_ca_file=str(cert), bearer_token_file=str(token_file)))
        with pytest.raises(FetchError, match="401"):
            asyncio.run(fetch(url, 1 << 16))
        token_file.write_text("controller-token\n")  # rotated in place
        assert asyncio.run(fetch(url, 1 << 16)) == b"{}"
    finally:
        server.stop()
        server.close()
        thread.join(10)
    plain = agent_fetch(AgentSettings(bearer_token_file=str(token_file)))
    assert plain.tls is None and plain.token is None  # plain HTTP: no token at all
