"""Benchmark of colo-controller against 5000 simulated agents on loopback (127.0.0.0/8 only).

    python -m bench.bench_controller [--nodes 5000] [--requests 300] [--pods 0]

Runs three processes besides this one: the tests' fake Kubernetes API server holding N nodes (and, with
--pods, that many bound pods of about 5 KB of JSON each, a twelfth of them bound within the last five
minutes), a fleet of N tiny agent HTTP servers (one listener per node on 127.1.x.y, same port), and the
real `colo-controller` console script pointed at them. Prints the duration of full polling cycles (from
the controller's own metrics), how long writing every node's annotations took, the latency of
`prioritize` over all N nodes measured at the client (p50/p99), and the controller's resident memory
(peak and at the end). Everything stops by itself within a hard deadline.

`AgentFleet` (the simulated agents) is also what the controller tests use: each agent can be slowed
down, broken or hung, and the fleet records per-agent request counts and peak concurrency.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.agent_document import real_node_document


def agent_payload(
    node: str | None,
    usage: float | Mapping[str, float | None] = 0.3,
    *,
    oversubscription: tuple[int, int] | None = (1000, 2 << 30),
) -> dict[str, Any]:
    """The agent's real GET /api/v1/node document (bench.agent_document), with the same ratio in every window
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


def _response(status: int, body: bytes) -> bytes:
    reason = "OK" if status == 200 else "Error"
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"Connection: close\r\n\r\n" + body


class _AgentProtocol(asyncio.Protocol):
    def __init__(self, fleet: AgentFleet, key: str) -> None:
        self.fleet = fleet
        self.key = key
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.counted = False
        self.path = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.counted:
            return
        self.buf += data
        if b"\r\n\r\n" not in self.buf:
            return
        self.counted = True
        request_line = self.buf.split(b"\r\n", 1)[0].split(b" ")
        self.path = request_line[1].decode("latin-1") if len(request_line) > 1 else ""
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
        if b.mode == "ok":
            t.write(_response(200, b.by_path.get(self.path, b.body)))
        elif b.mode == "status":
            t.write(_response(b.status, b'{"error":"broken"}'))
        elif b.mode == "garbage":
            t.write(_response(200, b"{not json"))
        elif b.mode == "huge":
            t.write(_response(200, b"[" + b"0," * (3 << 20) + b"0]"))
        t.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.counted:
            self.fleet._end(self.key)
        self.transport = None


class AgentFleet:
    """Many simulated agents served by one asyncio loop on a background thread."""

    def __init__(self) -> None:
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
                lambda: _AgentProtocol(self, key), host, port, backlog=64, reuse_address=True
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


# ---- benchmark --------------------------------------------------------------------------------------


def node_ip(i: int) -> str:
    """Loopback address of simulated node i: 127.1.0.1, 127.1.0.2, … (never outside 127.0.0.0/8)."""
    return f"127.1.{i // 250}.{i % 250 + 1}"


def node_object(i: int) -> dict[str, Any]:
    name = f"node-{i:05d}"
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"addresses": [{"type": "InternalIP", "address": node_ip(i)}]},
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_fleet(n: int, port: int, ready: Any, stop: Any) -> None:
    fleet = AgentFleet()
    for i in range(n):
        fleet.add(f"node-{i:05d}", agent_payload(f"node-{i:05d}", 0.2 + (i % 50) / 100), node_ip(i), port)
    ready.set()
    stop.wait(600)
    fleet.close()


def pod_object(i: int, nodes: int, now: float) -> dict[str, Any]:
    """A bound pod shaped like a real one (managedFields, env, volumes, statuses): about 5 KB of JSON."""
    name = f"web-{i:06d}"
    bound = datetime.fromtimestamp(now - (i % 3600), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    container = {
        "name": "app",
        "image": "registry.example.com/team/web-frontend:v1.42.7",
        "args": ["--listen=:8080", "--log-level=info", "--config=/etc/app/config.yaml"],
        "env": [{"name": f"SETTING_{k}", "value": f"value-{k}-{'x' * 24}"} for k in range(30)],
        "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "250m", "memory": "512Mi"}},
        "volumeMounts": [{"mountPath": f"/etc/app/{v}", "name": v, "readOnly": True} for v in ("config", "certs")],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
    }
    conditions = [
        {"type": t, "status": "True", "lastTransitionTime": bound}
        for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    return {
        "metadata": {
            "name": name,
            "namespace": f"team-{i % 40}",
            "labels": {"app": "web", "pod-template-hash": "7d9c8b6f5", "team": f"team-{i % 40}"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": bound, "prometheus.io/scrape": "true"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9c8b6f5", "uid": "0" * 36}
            ],
            "managedFields": [
                {
                    "manager": m,
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": bound,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {f"f:{k}": {} for k in ("metadata", "spec", "status", "labels", "conditions")},
                }
                for m in ("kube-controller-manager", "kubelet")
            ],
        },
        "spec": {
            "nodeName": f"node-{i % nodes:05d}",
            "containers": [container],
            "volumes": [{"name": v, "configMap": {"name": f"web-{v}"}} for v in ("config", "certs")],
            "serviceAccountName": "web",
            "tolerations": [
                {"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
                for k in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
            ],
        },
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "podIP": f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}",
            "startTime": bound,
            "containerStatuses": [
                {
                    "name": "app",
                    "ready": True,
                    "restartCount": 0,
                    "image": container["image"],
                    "imageID": "registry.example.com/team/web-frontend@sha256:" + "ab" * 32,
                    "containerID": "containerd://" + "cd" * 32,
                    "state": {"running": {"startedAt": bound}},
                }
            ],
        },
    }


def _run_kube(n: int, pods: int, url_queue: Any, stop: Any) -> None:
    from tests.kubeapi.server import FakeKubeAPI

    api = FakeKubeAPI(bookmark_interval=5.0).start()
    for i in range(n):
        api.put("nodes", node_object(i))
    now = time.time()
    for i in range(pods):
        api.put("pods", pod_object(i, n, now))
    url_queue.put(api.url)
    stop.wait(600)
    api.stop()


def _scrape(url: str) -> dict[str, float]:
    import httpx

    text = httpx.get(url + "/metrics", timeout=10).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                out[key] = float(value)
    return out


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if predicate():
                return
        time.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what}")


@contextlib.contextmanager
def _processes(n: int, pods: int) -> Iterator[tuple[str, int, Any]]:
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    ready = ctx.Event()
    urls = ctx.Queue()
    port = _free_port()
    procs = [
        ctx.Process(target=_run_fleet, args=(n, port, ready, stop), daemon=True),
        ctx.Process(target=_run_kube, args=(n, pods, urls, stop), daemon=True),
    ]
    for p in procs:
        p.start()
    try:
        if not ready.wait(120):
            raise TimeoutError("agent fleet did not start")
        yield urls.get(timeout=120), port, stop
    finally:
        stop.set()
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.terminate()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def _rss_mib(pid: int) -> dict[str, float]:
    """Resident memory of a process (Linux): now and its peak."""
    out: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024
    return out


def run(n: int, requests: int, interval: float, pods: int = 0) -> dict[str, float]:
    import httpx

    results: dict[str, float] = {}
    with _processes(n, pods) as (kube_url, agent_port, _stop), tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": kube_url}}],
                    "users": [{"name": "colo", "user": {"token": "colo-test-token"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "colo"}}],
                    "current-context": "fake",
                }
            )
        )
        listen_port = _free_port()
        config = Path(tmp) / "controller.yaml"
        config.write_text(
            json.dumps(
                {
                    "listen": f"127.0.0.1:{listen_port}",
                    "log_level": "warning",
                    "agent": {"port": agent_port, "use_endpointslices": False},
                    "polling": {"interval": interval, "timeout": 2, "concurrency": 256},
                    "writer": {"qps": 5000, "burst": 5000, "workers": 8},
                    "leader_election": {"enabled": False},
                }
            )
        )
        url = f"http://127.0.0.1:{listen_port}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "controller.main", "--kubeconfig", str(kubeconfig), "--config", str(config)],
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            _wait(lambda: httpx.get(url + "/readyz", timeout=2).status_code == 200, 120, "controller ready")
            t0 = time.monotonic()
            _wait(lambda: _scrape(url).get("colo_controller_cycles_total", 0) >= 1, 120, "first cycle")
            m = _scrape(url)
            results["cycle1_seconds"] = m["colo_controller_cycle_duration_seconds_sum"]
            results["polled_ok_cycle1"] = m.get('colo_controller_last_cycle_nodes{result="ok"}', 0)
            ok_key = 'colo_controller_node_patches_total{result="ok"}'
            _wait(lambda: _scrape(url).get(ok_key, 0) >= n, 300, "all nodes annotated")
            results["annotate_all_seconds"] = time.monotonic() - t0
            _wait(lambda: _scrape(url).get("colo_controller_cycles_total", 0) >= 3, 120, "third cycle")
            m = _scrape(url)
            results["cycles"] = m["colo_controller_cycles_total"]
            results["mean_cycle_seconds"] = m["colo_controller_cycle_duration_seconds_sum"] / results["cycles"]
            results["polled_ok_last_cycle"] = m.get('colo_controller_last_cycle_nodes{result="ok"}', 0)
            results["failed_last_cycle"] = m.get('colo_controller_last_cycle_nodes{result="failed"}', 0)
            names = [f"node-{i:05d}" for i in range(n)]
            body = json.dumps({"Pod": {"metadata": {"name": "p", "namespace": "default"}}, "NodeNames": names})
            latencies: list[float] = []
            with httpx.Client(timeout=10) as client:
                for _ in range(5):
                    client.post(url + "/prioritize", content=body)
                for _ in range(requests):
                    t = time.perf_counter()
                    r = client.post(url + "/prioritize", content=body)
                    latencies.append(time.perf_counter() - t)
                    r.raise_for_status()
                scores = r.json()
            results["prioritize_hosts"] = len(scores)
            results["prioritize_nonzero"] = sum(1 for s in scores if s["Score"] > 0)
            results["prioritize_p50_ms"] = statistics.median(latencies) * 1000
            results["prioritize_p99_ms"] = percentile(latencies, 0.99) * 1000
            m = _scrape(url)
            for verb in ("prioritize",):
                s = m.get(f'colo_controller_extender_request_duration_seconds_sum{{verb="{verb}"}}', 0)
                c = m.get(f'colo_controller_extender_request_duration_seconds_count{{verb="{verb}"}}', 1)
                results[f"{verb}_server_mean_ms"] = s / c * 1000
            rss = _rss_mib(proc.pid)
            results["controller_peak_rss_mib"] = rss.get("VmHWM", math.nan)
            results["controller_rss_mib"] = rss.get("VmRSS", math.nan)
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_controller")
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--interval", type=float, default=20.0, help="polling interval of the controller (s)")
    p.add_argument("--pods", type=int, default=0, help="bound pods (about 5 KB of JSON each) in the API server")
    args = p.parse_args(argv)
    started = time.monotonic()
    results = run(args.nodes, args.requests, args.interval, args.pods)
    print(
        f"colo-controller benchmark: {args.nodes} simulated agents on 127.1.0.0/16, {args.pods} pods, "
        f"{os.cpu_count()} CPUs"
    )
    for key, value in results.items():
        print(f"  {key:28s} {value:10.3f}")
    ok = results["mean_cycle_seconds"] <= 15.0 and results["prioritize_p99_ms"] <= 50.0
    print(f"  targets: cycle <= 15 s, prioritize p99 <= 50 ms: {'met' if ok else 'NOT met'}")
    print(f"  benchmark wall time {time.monotonic() - started:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
