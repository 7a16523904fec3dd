"""Simulated colo agents for the controller's tests and benchmark: one tiny asyncio HTTP server per node on
loopback, each answering the agent's real GET /api/v1/node document. Each agent can be slowed down, broken or
hung, and the fleet records per-agent request counts and peak concurrency."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from testsupport.agent_document import real_node_document


def agent_payload(
    node: str | None,
    usage: float | Mapping[str, float | None] = 0.3,
    *,
    oversubscription: tuple[int, int] | None = (1000, 2 << 30),
) -> dict[str, Any]:
    """The agent's real GET /api/v1/node document (testsupport.agent_document), with the same ratio in every window
    unless given, and the published capacity (None: the node is not labelled for oversubscription)."""
    return real_node_document(
        node, usage, oversubscription=oversubscription, oversubscribed=oversubscription is not None
    )


@dataclass
class AgentBehavior:
    """How one simulated agent answers. mode: ok | status | garbage | close | hang | huge."""

    body: bytes
    delay: float = 0.0
    mode: str = "ok"
    status: int = 500
    by_path: dict[str, bytes] = field(default_factory=dict)  # bodies of other paths (e.g. /api/v1/pods)


@dataclass
class AgentStats:
    requests: int = 0
    in_flight: int = 0
    peak: int = 0
    connections: int = 0  # accepted so far


def _response(status: int, body: bytes, keep_alive: bool = False) -> bytes:
    reason = "OK" if status == 200 else "Error"
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    connection = b"Connection: keep-alive\r\n\r\n" if keep_alive else b"Connection: close\r\n\r\n"
    return head.encode() + connection + body


class _AgentProtocol(asyncio.Protocol):
    def __init__(self, fleet: AgentFleet, key: str) -> None:
        self.fleet = fleet
        self.key = key
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.counted = False  # a request is being answered
        self.keep = False  # this request's connection stays open after the answer
        self.path = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.fleet._opened(self.key, self)

    def data_received(self, data: bytes) -> None:
        if self.counted:
            return
        self.buf += data
        if b"\r\n\r\n" not in self.buf:
            return
        self.counted = True
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        request_line = head.split(b"\r\n", 1)[0].split(b" ")
        self.path = request_line[1].decode("latin-1") if len(request_line) > 1 else ""
        self.keep = self.fleet.keep_alive and b"connection: close" not in head.lower()
        self.fleet._begin(self.key, self.path)
        behavior = self.fleet.behaviors[self.key]
        loop = asyncio.get_running_loop()
        if behavior.delay > 0:
            loop.call_later(behavior.delay, self._answer, behavior)
        else:
            self._answer(behavior)

    def _answer(self, b: AgentBehavior) -> None:
        t = self.transport
        if t is None or t.is_closing():
            return
        if b.mode == "hang":
            return  # the client's deadline must cut us off
        keep = self.keep and b.mode in ("ok", "status")
        if b.mode == "ok":
            t.write(_response(200, b.by_path.get(self.path, b.body), keep))
        elif b.mode == "status":
            t.write(_response(b.status, b'{"error":"broken"}', keep))
        elif b.mode == "garbage":
            t.write(_response(200, b"{not json"))
        elif b.mode == "huge":
            t.write(_response(200, b"[" + b"0," * (3 << 20) + b"0]"))
        self.counted = False
        self.fleet._end(self.key)
        if keep:
            if b"\r\n\r\n" in self.buf:  # a pipelined request (our client never sends one)
                self.data_received(b"")
        else:
            t.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.counted:
            self.fleet._end(self.key)
            self.counted = False
        self.fleet._closed(self.key, self)
        self.transport = None

    def close_if_idle(self) -> None:
        if self.transport is not None and not self.counted:
            self.transport.close()


class AgentFleet:
    """Many simulated agents served by one asyncio loop on a background thread; over TLS with `tls` (a server
    context), and keeping connections open between requests unless `keep_alive` is off (as the real agent
    does until its `serving.idle_timeout`)."""

    def __init__(self, tls: ssl.SSLContext | None = None, *, keep_alive: bool = True) -> None:
        self.tls = tls
        self.keep_alive = keep_alive
        self._open: set[_AgentProtocol] = set()
        self.behaviors: dict[str, AgentBehavior] = {}
        self.stats: dict[str, AgentStats] = {}
        self.paths: dict[str, list[str]] = {}  # key -> paths requested, in order
        self.addresses: dict[str, tuple[str, int]] = {}
        self._servers: list[asyncio.Server] = []
        self._lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="agent-fleet", daemon=True)
        self._thread.start()

    def _begin(self, key: str, path: str = "") -> None:
        with self._lock:
            self.paths.setdefault(key, []).append(path)
            s = self.stats[key]
            s.requests += 1
            s.in_flight += 1
            s.peak = max(s.peak, s.in_flight)

    def _end(self, key: str) -> None:
        with self._lock:
            self.stats[key].in_flight -= 1

    def _opened(self, key: str, protocol: _AgentProtocol) -> None:
        with self._lock:
            self.stats[key].connections += 1
        self._open.add(protocol)

    def _closed(self, key: str, protocol: _AgentProtocol) -> None:
        self._open.discard(protocol)

    def close_idle_connections(self) -> None:
        """Hang up every connection between requests, as an agent's idle timeout or restart does."""

        async def close() -> None:
            for protocol in list(self._open):
                protocol.close_if_idle()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)

    def total_in_flight(self) -> int:
        with self._lock:
            return sum(s.in_flight for s in self.stats.values())

    def add(self, key: str, payload: dict[str, Any] | bytes, host: str = "127.0.0.1", port: int = 0) -> int:
        """Start an agent for `key` (usually the node name); returns its port."""
        if not host.startswith("127."):
            raise ValueError("simulated agents listen on 127.0.0.0/8 only")
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.behaviors[key] = AgentBehavior(body)
        self.stats[key] = AgentStats()

        async def start() -> asyncio.Server:
            return await self.loop.create_server(
                lambda: _AgentProtocol(self, key), host, port, backlog=64, reuse_address=True, ssl=self.tls
            )

        server = asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)
        self._servers.append(server)
        bound = server.sockets[0].getsockname()[1]
        self.addresses[key] = (host, bound)
        return int(bound)

    def set(self, key: str, **changes: Any) -> None:
        """Change an agent's behavior: body=, delay=, mode=, status=, payload= (the node document), and
        paths={path: JSON document} for other paths (e.g. the agent's /api/v1/pods)."""
        b = self.behaviors[key]
        if "payload" in changes:
            changes["body"] = json.dumps(changes.pop("payload")).encode()
        if "paths" in changes:
            changes["by_path"] = {**b.by_path, **{p: json.dumps(d).encode() for p, d in changes.pop("paths").items()}}
        for name, value in changes.items():
            setattr(b, name, value)

    def close(self) -> None:
        async def stop() -> None:
            for s in self._servers:
                s.close()
            for task in asyncio.all_tasks(self.loop):
                if task is not asyncio.current_task():
                    task.cancel()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
