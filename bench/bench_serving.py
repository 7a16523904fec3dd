"""The extender's request bounds, measured on a real server process (testsupport/extender_server.py):

* peak RSS growth (VmHWM) of a 66.6 MB Content-Length body, a 70 MiB chunked upload, and a full 7 MB
  NodeList `/prioritize` (5000 Nodes), each from a fresh server;
* `/healthz` latency (p50, p99, max) while 7 MB `/prioritize` calls run back to back;
* TLS handshake cost of one agent poll (controller's client CPU per fetch, http vs https).

Run: `python -m bench.bench_serving` (loopback only; needs the openssl CLI for the TLS part).
"""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx

from controller.config import AgentSettings
from controller.extender import DEFAULT_MAX_BODY_BYTES
from controller.httpget import agent_fetch
from testsupport.certs import have_openssl, make_cert
from testsupport.serverproc import ServerProcess, extender_process

POD = {"metadata": {"name": "web", "namespace": "default"}}


def nodelist_body() -> bytes:
    labels = {f"topology.example.com/label-{j}": f"value-{j}" for j in range(16)}
    items = [{"metadata": {"name": f"node-{i:05d}", "labels": labels, "annotations": labels}} for i in range(5000)]
    return json.dumps({"Pod": POD, "Nodes": {"items": items}}).encode()


def peak_growth_mib(send: object) -> float:
    with extender_process({}, DEFAULT_MAX_BODY_BYTES) as server:
        server.reset_peak()
        before = server.memory_kib("VmHWM")
        send(server)  # type: ignore[operator]
        time.sleep(0.2)
        return (server.memory_kib("VmHWM") - before) / 1024


def _raw(server: ServerProcess, head: bytes, chunks: int, chunk: bytes, chunked: bool) -> None:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    try:
        sock.sendall(head)
        for _ in range(chunks):
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
        sock.recv(65536)
    except OSError:
        pass
    finally:
        sock.close()


def content_length_body(server: ServerProcess) -> None:
    size = 66_600_000
    head = b"POST /prioritize HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % size
    _raw(server, head, 64, b"a" * (1 << 20), chunked=False)


def chunked_body(server: ServerProcess) -> None:
    head = b"POST /prioritize HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
    _raw(server, head, 70, b"a" * (1 << 20), chunked=True)


def full_nodelist(server: ServerProcess) -> None:
    r = httpx.post(f"http://127.0.0.1:{server.port}/prioritize", content=nodelist_body(), timeout=60)
    assert r.status_code == 200, r.text


def healthz_during_large_requests(rounds: int = 20) -> list[float]:
    body = nodelist_body()
    latencies: list[float] = []
    with extender_process({}, DEFAULT_MAX_BODY_BYTES) as server:
        url = f"http://127.0.0.1:{server.port}"
        done = threading.Event()

        def probe() -> None:
            with httpx.Client() as client:
                while not done.is_set():
                    t = time.perf_counter()
                    client.get(f"{url}/healthz")
                    latencies.append(time.perf_counter() - t)
                    time.sleep(0.01)

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        with httpx.Client(timeout=60) as client:
            for _ in range(rounds):
                client.post(f"{url}/prioritize", content=body)
        done.set()
        prober.join()
    return latencies


def poll_cpu_ms(serving: dict[str, object], settings: AgentSettings, n: int = 400) -> float:
    with extender_process(serving, DEFAULT_MAX_BODY_BYTES) as server:
        url = f"{settings.scheme}://127.0.0.1:{server.port}/healthz"
        fetch = agent_fetch(settings)

        async def go() -> None:
            gate = asyncio.Semaphore(32)

            async def one() -> None:
                async with gate:
                    await fetch(url, 1024)

            await asyncio.gather(*(one() for _ in range(n)))

        asyncio.run(go())
        started = time.process_time()
        asyncio.run(go())
        return (time.process_time() - started) / n * 1000


def main() -> None:
    print(f"body limit {DEFAULT_MAX_BODY_BYTES >> 20} MiB; peak RSS growth of one request (fresh server each):")
    for name, send in (("66.6 MB Content-Length", content_length_body), ("70 MiB chunked", chunked_body),
                       ("7 MB NodeList prioritize", full_nodelist)):  # fmt: skip
        print(f"  {name}: {peak_growth_mib(send):.1f} MiB")
    lat = sorted(healthz_during_large_requests())
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    print(
        f"/healthz during 20 x 7 MB prioritize: {len(lat)} probes, p50 {statistics.median(lat) * 1000:.1f} ms, "
        f"p99 {p99 * 1000:.1f} ms, max {lat[-1] * 1000:.1f} ms"
    )
    if not have_openssl():
        print("TLS poll cost: skipped (no openssl CLI)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = make_cert(Path(tmp), "agent", "DNS:colo-agent.colo-system.svc")
        plain = poll_cpu_ms({}, AgentSettings())
        tls = poll_cpu_ms(
            {"tls_cert_file": str(cert), "tls_key_file": str(key)},
            AgentSettings(scheme="https", tls_ca_file=str(cert), tls_server_name="colo-agent.colo-system.svc"),
        )
    print(f"agent poll, controller CPU per fetch: http {plain:.2f} ms, https {tls:.2f} ms")


if __name__ == "__main__":
    main()
