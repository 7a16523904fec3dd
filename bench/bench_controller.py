"""Benchmark of colo-controller against 5000 simulated agents on loopback (127.0.0.0/8 only).

    python -m bench.bench_controller [--nodes 5000] [--requests 300] [--pods 0]

Runs three processes besides this one: the tests' fake Kubernetes API server holding N nodes (and, with
--pods, that many bound pods of about 5 KB of JSON each, a twelfth of them bound within the last five
minutes), a fleet of N tiny agent HTTP servers (one listener per node on 127.1.x.y, same port), and the
real `colo-controller` console script pointed at them. Prints the duration of full polling cycles (from
the controller's own metrics), how long writing every node's annotations took, the latency of
`prioritize` over all N nodes measured at the client (p50/p99), and the controller's resident memory
(peak and at the end). Everything stops by itself within a hard deadline.

The simulated agents (`AgentFleet`) live in testsupport/agentfleet.py, shared with the controller tests.
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
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from testsupport.agentfleet import AgentFleet, agent_payload

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


def _run_fleet(n: int, port: int, ready: Any, stop: Any, cert: str | None = None, key: str | None = None) -> None:
    tls = None
    if cert is not None and key is not None:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(cert, key)
    fleet = AgentFleet(tls)
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
    from testsupport.kubeapi.server import FakeKubeAPI

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


# ---- controller CPU of polling: http vs https, one connection per poll vs kept connections ---------

AGENT_TLS_NAME = "colo-agent.colo-system.svc"


def _poll_cycles(targets: dict[str, str], fetch: Any, cycles: int, concurrency: int) -> tuple[list[float], float]:
    """CPU seconds of this process (the fleet runs in another) for each of `cycles` polling cycles, and the
    growth of its resident memory over them (MiB: the kept connections, once the heap is warm)."""
    from controller.policy import AGENT_WINDOWS
    from controller.poller import AgentPoller

    poller = AgentPoller(wanted=sorted(AGENT_WINDOWS), concurrency=concurrency, timeout=10, fetch=fetch)
    rss = [_rss_mib(os.getpid())["VmRSS"]]

    async def run() -> list[float]:
        out = []
        for _ in range(cycles):
            started = time.process_time()
            result = await poller.poll_all(targets)
            out.append(time.process_time() - started)
            if result.failed:
                raise RuntimeError(f"{len(result.failed)} polls failed: {next(iter(result.errors.values()))}")
        rss.append(_rss_mib(os.getpid())["VmRSS"])
        if hasattr(fetch, "close"):
            fetch.close()
        return out

    seconds = asyncio.run(run())
    return seconds, rss[1] - rss[0]


def poll_cpu(n: int, cycles: int, concurrency: int) -> dict[str, tuple[list[float], float]]:
    """Per-cycle CPU of polling `n` simulated agents over http and https, each with a connection per poll
    (`http_get`, the controller before connection reuse) and with kept connections (`AgentClient`)."""
    import functools

    from controller.httpget import AgentClient, http_get
    from testsupport.certs import make_cert

    out: dict[str, tuple[list[float], float]] = {}
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = make_cert(Path(tmp), "agent", f"DNS:{AGENT_TLS_NAME}")
        for scheme in ("http", "https"):
            stop, ready, port = ctx.Event(), ctx.Event(), _free_port()
            tls_files = (str(cert), str(key)) if scheme == "https" else (None, None)
            fleet = ctx.Process(target=_run_fleet, args=(n, port, ready, stop, *tls_files), daemon=True)
            fleet.start()
            try:
                if not ready.wait(300):
                    raise TimeoutError("agent fleet did not start")
                targets = {f"node-{i:05d}": f"{scheme}://{node_ip(i)}:{port}/api/v1/node" for i in range(n)}
                client = ssl.create_default_context(cafile=str(cert)) if scheme == "https" else None
                single = functools.partial(http_get, tls=client, server_name=AGENT_TLS_NAME)
                kept = AgentClient(tls=client, server_name=AGENT_TLS_NAME)
                out[f"{scheme} per poll"] = _poll_cycles(targets, single, cycles, concurrency)
                out[f"{scheme} kept"] = _poll_cycles(targets, kept, cycles, concurrency)
            finally:
                stop.set()
                fleet.join(10)
                if fleet.is_alive():
                    fleet.terminate()
    return out


def print_poll_cpu(n: int, cycles: int, concurrency: int) -> None:
    print(f"controller CPU per polling cycle, {n} simulated agents, concurrency {concurrency}, {cycles} cycles")
    for name, (seconds, rss_growth) in poll_cpu(n, cycles, concurrency).items():
        warm = seconds[1:]  # the first cycle of kept connections opens them all
        print(
            f"  {name:15s} first {seconds[0] * 1000:8.1f} ms; then median {statistics.median(warm) * 1000:8.1f} ms "
            f"(min {min(warm) * 1000:.1f}, max {max(warm) * 1000:.1f}), "
            f"{statistics.median(warm) / n * 1e6:.0f} us per poll; RSS {rss_growth:+.1f} MiB"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_controller")
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--interval", type=float, default=20.0, help="polling interval of the controller (s)")
    p.add_argument("--pods", type=int, default=0, help="bound pods (about 5 KB of JSON each) in the API server")
    p.add_argument(
        "--poll-cpu",
        type=int,
        metavar="CYCLES",
        default=0,
        help="only measure the controller's CPU per polling cycle, http vs https, per-poll vs kept connections",
    )
    args = p.parse_args(argv)
    if args.poll_cpu:
        print_poll_cpu(args.nodes, max(2, args.poll_cpu), 128)
        return 0
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
