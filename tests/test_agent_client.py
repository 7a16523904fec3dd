"""The controller's kept-alive agent connections (controller/httpget.py AgentClient) against real loopback
servers: reuse across polling cycles over HTTP and HTTPS, a transparent retry when the agent closed a kept
connection, the bound on idle connections, and agents that do not keep connections."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.httpget import AgentClient, FetchError
from controller.policy import AGENT_WINDOWS
from controller.poller import AgentPoller, PollResult
from tests.controller_fleet import fleet_fixture  # noqa: F401
from testsupport.agentfleet import AgentFleet, agent_payload
from testsupport.certs import have_openssl, make_cert

NAME = "colo-agent.colo-system.svc"


def start_fleet(fleet: AgentFleet, n: int) -> dict[str, str]:
    scheme = "https" if fleet.tls is not None else "http"
    for i in range(n):
        fleet.add(f"n{i}", agent_payload(f"n{i}"))
    return {k: f"{scheme}://{h}:{p}/api/v1/node" for k, (h, p) in fleet.addresses.items()}


def cycles(client: AgentClient, targets: dict[str, str], n: int, between: object = None) -> list[PollResult]:
    """`n` polling cycles in one event loop (as the controller's polling thread runs them)."""
    poller = AgentPoller(wanted=sorted(AGENT_WINDOWS), concurrency=4, timeout=5, fetch=client)

    async def run() -> list[PollResult]:
        out = []
        for i in range(n):
            if i and callable(between):
                between()
                await asyncio.sleep(0.05)
            out.append(await poller.poll_all(targets))
        return out

    return asyncio.run(run())


@pytest.fixture
def tls_fleet(tmp_path: Path) -> Iterator[tuple[AgentFleet, ssl.SSLContext]]:
    if not have_openssl():
        pytest.skip("needs the openssl CLI")
    cert, key = make_cert(tmp_path, "agent", f"DNS:{NAME}")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    f = AgentFleet(server)
    yield f, ssl.create_default_context(cafile=str(cert))
    f.close()


def test_one_connection_per_agent_across_cycles(fleet: AgentFleet) -> None:
    targets = start_fleet(fleet, 3)
    client = AgentClient()
    results = cycles(client, targets, 3)
    assert all(r.failed == {} and len(r.samples) == 3 for r in results)
    assert [fleet.stats[k].requests for k in targets] == [3, 3, 3]
    assert [fleet.stats[k].connections for k in targets] == [1, 1, 1]
    assert client.connects == 3 and client.idle == 3


def test_https_connections_reused_and_reopened_after_the_agent_hangs_up(
    tls_fleet: tuple[AgentFleet, ssl.SSLContext],
) -> None:
    fleet, context = tls_fleet
    targets = start_fleet(fleet, 2)
    client = AgentClient(tls=context, server_name=NAME)
    results = cycles(client, targets, 3)
    assert all(r.failed == {} for r in results)
    assert [fleet.stats[k].connections for k in targets] == [1, 1]  # one handshake per agent, not per poll
    results = cycles(client, targets, 2, between=fleet.close_idle_connections)  # as the idle timeout does
    assert all(r.failed == {} and len(r.samples) == 2 for r in results)
    assert [fleet.stats[k].connections for k in targets] == [3, 3]  # a new loop, then the hang-up


def test_kept_connection_closed_by_the_agent_mid_request_is_retried_once() -> None:
    """The race the idle check cannot see: the agent closes the kept connection as the request arrives
    (its idle timer fired). The poll must succeed on a fresh connection, within the same call."""
    body = b'{"ok": true}'
    answered: list[int] = []

    async def run() -> tuple[list[bytes | str], int]:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            served = 0
            while True:
                try:
                    await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                if served == 1:
                    writer.close()  # the second request on a kept connection: hang up unanswered
                    return
                served += 1
                answered.append(served)
                head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
                writer.write(head + body)

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = AgentClient()
        out: list[bytes | str] = []
        for _ in range(3):
            try:
                out.append(await client(f"http://127.0.0.1:{port}/api/v1/node", 1024))
            except FetchError as err:
                out.append(str(err))
        server.close()
        return out, client.connects

    out, connects = asyncio.run(run())
    assert out == [body, body, body]
    # Each connection answers one request and hangs up on the next: polls 2 and 3 each tried the kept
    # connection first, then succeeded on a fresh one.
    assert connects == 3 and answered == [1, 1, 1]


def test_retry_is_once_only() -> None:
    """An agent that hangs up on every request fails the poll (no retry loop), naming the cause."""

    async def run() -> str:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            await AgentClient()(f"http://127.0.0.1:{port}/", 1024)
        except FetchError as err:
            return err.reason
        finally:
            server.close()
        return "ok"

    assert asyncio.run(run()) == "bad_response"


def test_idle_connections_are_bounded(fleet: AgentFleet) -> None:
    targets = start_fleet(fleet, 4)
    client = AgentClient(max_idle=2)
    results = cycles(client, targets, 3)
    assert all(r.failed == {} for r in results)
    assert client.idle == 2
    # A full pool keeps the connections it has (evicting would leave none to reuse in a round-robin).
    assert sorted(fleet.stats[k].connections for k in targets) == [1, 1, 3, 3]


def test_agents_that_close_after_each_answer_are_not_kept() -> None:
    fleet = AgentFleet(keep_alive=False)
    try:
        targets = start_fleet(fleet, 2)
        client = AgentClient()
        results = cycles(client, targets, 2)
        assert all(r.failed == {} for r in results)
        assert client.idle == 0 and [fleet.stats[k].connections for k in targets] == [2, 2]
    finally:
        fleet.close()


def test_failed_answers_do_not_keep_the_connection(fleet: AgentFleet) -> None:
    targets = start_fleet(fleet, 1)
    fleet.set("n0", mode="status", status=503)
    client = AgentClient()
    (result,) = cycles(client, targets, 1)
    assert result.failed == {"n0": "http_status"} and client.idle == 0


def test_no_idle_connections_when_switched_off(fleet: AgentFleet) -> None:
    """polling.max_idle_connections: 0 reconnects at every poll (the behaviour before connections were kept)."""
    from controller.config import build_config
    from controller.httpget import agent_fetch

    cfg = build_config({"polling": {"max_idle_connections": 0}})
    targets = start_fleet(fleet, 2)
    client = agent_fetch(cfg.agent, cfg.polling.max_idle_connections)
    assert all(r.failed == {} for r in cycles(client, targets, 2))
    assert client.idle == 0 and [fleet.stats[k].connections for k in targets] == [2, 2]
