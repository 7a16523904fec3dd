"""The server's idle loop (serving/server.py): one wake-up a second instead of uvicorn's ten, and an exit asked
for from another thread wakes it at once."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

import serving.server
from serving.server import Server, make_server
from serving.settings import ServingSettings


class CountingServer(Server):
    ticks = 0

    async def on_tick(self, counter: int) -> bool:
        self.ticks += 1
        return await super().on_tick(counter)


def started(app: Starlette) -> tuple[CountingServer, threading.Thread]:
    base = make_server(app, "127.0.0.1", 0, ServingSettings())
    server = CountingServer(base.config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started
    return server, thread


def hello() -> Starlette:
    return Starlette(routes=[Route("/", lambda _: PlainTextResponse("hi"))])


def test_an_idle_server_wakes_once_a_second_and_serves() -> None:
    server, thread = started(hello())
    try:
        first = server.ticks
        with httpx.Client() as client:
            assert client.get(f"http://127.0.0.1:{server.bound_port}/").text == "hi"
        time.sleep(2.5)
        # uvicorn's own loop ticks every 0.1 s: 25 here; a busy machine only ever makes fewer
        assert server.ticks - first <= 4
        assert any(name == b"date" for name, _ in server.server_state.default_headers)
    finally:
        server.stop()
        thread.join(30)
    assert not thread.is_alive()


def test_an_exit_asked_from_another_thread_wakes_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serving.server, "TICK_SECONDS", 3600.0)  # only the wake-up can end it in time
    server, thread = started(hello())
    server.should_exit = True  # as the programs' signal handlers set it
    thread.join(30)
    assert not thread.is_alive()
