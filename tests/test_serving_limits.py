"""Bounded requests against real server processes: body limits while reading, slow clients cut off,
a cap on concurrent extender calls, probes answered during a large request, no tracebacks."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from testsupport.serverproc import ServerProcess, extender_process, stderr_of

LIMIT = 8 << 20
FAST = {"header_timeout": 1.0, "body_timeout": 1.0, "idle_timeout": 2, "max_concurrent": 2}
POD = {"metadata": {"name": "web", "namespace": "default"}}


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    with extender_process(FAST, LIMIT) as s:
        yield s


def connect(server: ServerProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_until_closed(sock: socket.socket, timeout: float = 10.0) -> bytes:
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ConnectionResetError, BrokenPipeError):
        pass
    return data


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/1.1 ") else 0


def test_announced_oversized_body_refused_before_it_is_read(server: ServerProcess) -> None:
    sock = connect(server)
    sock.sendall(b"POST /prioritize HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n")
    sock.sendall(b"content-length: %d\r\n\r\n{" % (70 << 20))
    response = read_until_closed(sock)
    assert status_of(response) == 413 and b"larger than the limit" in response


def test_chunked_body_cut_off_at_the_limit_with_memory_bounded(server: ServerProcess) -> None:
    """A 70 MiB chunked upload: refused once 8 MiB arrived; the server's peak RSS grows by far less than 70 MiB."""
    server.reset_peak()
    before = server.memory_kib("VmHWM")
    sock = connect(server)
    sock.sendall(b"POST /prioritize HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n")
    chunk = b"a" * (1 << 20)
    sent = 0
    try:
        for _ in range(70):
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass
    response = read_until_closed(sock)
    grown_mib = (server.memory_kib("VmHWM") - before) / 1024
    print(f"chunked 70 MiB: refused after {sent >> 20} MiB sent; peak RSS grew {grown_mib:.1f} MiB")
    assert status_of(response) in (413, 0)  # 0: the server hung up while we were still sending
    assert grown_mib < 40, f"peak RSS grew {grown_mib:.1f} MiB"
    assert httpx.get(f"http://127.0.0.1:{server.port}/healthz").status_code == 200
    assert "Traceback" not in stderr_of(server)


def test_slow_header_client_is_cut_off(server: ServerProcess) -> None:
    sock = connect(server)
    started = time.monotonic()
    sock.sendall(b"GET /healthz HTTP/1.1\r\n")
    closed = False
    for i in range(100):  # one header byte every 0.1 s, forever
        try:
            sock.sendall(b"x-slow-%d: 1\r\n" % i)
        except (BrokenPipeError, ConnectionResetError):
            closed = True
            break
        time.sleep(0.1)
    response = b"" if closed else read_until_closed(sock, 1.0)
    elapsed = time.monotonic() - started
    assert closed or status_of(response) == 408
    assert elapsed < 6, f"still open after {elapsed:.1f}s"  # header_timeout is 1 s


def test_silent_connection_is_closed(server: ServerProcess) -> None:
    sock = connect(server)
    started = time.monotonic()
    assert read_until_closed(sock) == b""
    assert time.monotonic() - started < 6


def test_slow_body_client_is_answered_408(server: ServerProcess) -> None:
    sock = connect(server)
    sock.sendall(b'POST /filter HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n{"Pod":')
    response = read_until_closed(sock)
    assert status_of(response) == 408 and b"not received within" in response


def test_oversized_headers_are_refused(server: ServerProcess) -> None:
    sock = connect(server)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * (100 << 10) + b"\r\n\r\n")
    assert status_of(read_until_closed(sock)) == 431


def test_concurrent_extender_calls_capped_with_503_and_probes_still_answered(server: ServerProcess) -> None:
    held = []
    for _ in range(2):  # max_concurrent: two calls whose bodies never finish arriving
        sock = connect(server)
        sock.sendall(b"POST /prioritize HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{")
        held.append(sock)
    time.sleep(0.2)
    url = f"http://127.0.0.1:{server.port}"
    body = {"Pod": POD, "NodeNames": ["a"]}
    r = httpx.post(f"{url}/prioritize", json=body)
    assert r.status_code == 503 and "busy" in r.json()["error"]
    assert httpx.get(f"{url}/healthz").status_code == 200
    for sock in held:  # their body timeout frees the slots
        assert status_of(read_until_closed(sock)) == 408
    assert httpx.post(f"{url}/prioritize", json=body).status_code == 200


def test_client_gone_mid_body_leaves_no_traceback(server: ServerProcess) -> None:
    for _ in range(3):
        sock = connect(server)
        sock.sendall(b'POST /prioritize HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\n\r\n{"Pod":')
        sock.close()
    time.sleep(0.3)
    assert httpx.get(f"http://127.0.0.1:{server.port}/healthz").status_code == 200
    assert "Traceback" not in stderr_of(server)


def test_healthz_answers_during_a_largest_request() -> None:
    """A body near the 8 MiB limit (a full NodeList of 5000 small Nodes) is decoded, checked and scored off
    the event loop: /healthz keeps answering."""
    labels = {f"topology.example.com/label-{j}": f"value-{j}" for j in range(16)}
    items = [{"metadata": {"name": f"node-{i:05d}", "labels": labels, "annotations": labels}} for i in range(5000)]
    body = json.dumps({"Pod": POD, "Nodes": {"items": items}}).encode()
    assert 7_000_000 < len(body) < LIMIT
    with extender_process({"max_concurrent": 4}, LIMIT) as server:
        url = f"http://127.0.0.1:{server.port}"
        latencies: list[float] = []
        done = threading.Event()

        def probe() -> None:
            with httpx.Client() as client:
                while not done.is_set():
                    t = time.perf_counter()
                    assert client.get(f"{url}/healthz").status_code == 200
                    latencies.append(time.perf_counter() - t)
                    time.sleep(0.01)

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        with httpx.Client(timeout=30) as client:
            for _ in range(5):
                r = client.post(f"{url}/prioritize", content=body, headers={"content-type": "application/json"})
                assert r.status_code == 200 and len(r.json()) == 5000
        done.set()
        prober.join(10)
        worst = max(latencies)
        print(
            f"/healthz during 5 x {len(body) >> 20} MiB prioritize: {len(latencies)} probes, max {worst * 1000:.0f} ms"
        )
        assert worst < 2.5, f"/healthz took {worst:.2f}s"  # the liveness probe gives up at 5 s
