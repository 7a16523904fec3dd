"""Benchmark: /metrics latency and exporter CPU with 250 pods x 3 containers, against node_exporter.

Run: `.venv/bin/python -m bench.bench_exporter [--interval 0.5] [--scrape-every 7.5] [--scrapes 40]`.

A child process (`--serve`) builds a synthetic AgentView (full windows: 600 one-second samples fed
before start), serves it with uvicorn on 127.0.0.1 and publishes a new snapshot every `--interval`
seconds; the parent scrapes /metrics with httpx every `--scrape-every` seconds (Prometheus' default
OpenMetrics + gzip request) and measures the latency. Time is compressed: 0.5 s snapshots with a scrape
every 7.5 s keep the ratio of 1 s snapshots to 15 s scrapes. The exporter's CPU share is the child's CPU
time minus the synthetic sampler thread's, over wall time. Debian's prometheus-node-exporter is then
scraped with the same client loop on 127.0.0.1:9911 (started as a child, killed at the end).
Requests go only to 127.0.0.1 and are bounded in count.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import httpx

from agent.snapshot import (
    ContainerSample,
    InterfaceSample,
    NodeSample,
    PodMeta,
    PodSample,
    Pressure,
    Snapshot,
    TierSample,
)
from agent.view import AgentView
from agent.windows.store import SeriesKey, WindowStore

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
NODE_EXPORTER_ADDR = "127.0.0.1:9911"
QOS = ("guaranteed", "burstable", "besteffort")


@dataclass
class Synthetic:
    """A synthetic node: pod identities fixed, usage drawn fresh each tick."""

    pods: int
    containers: int
    seq: int = 0

    def __post_init__(self) -> None:
        self.metas = [
            PodMeta(
                uid=f"{i:08d}-0000-4000-8000-{i:012d}",
                namespace=f"ns-{i % 20}",
                name=f"pod-{i}",
                pod_class="online" if i % 2 else "offline",
                labels={"quota.scheduling.koordinator.sh/name": f"quota-{i % 5}"},
            )
            for i in range(self.pods)
        ]
        self.rng = random.Random(1)

    def samples(self, snap: Snapshot) -> list[tuple[SeriesKey, float]]:
        out: list[tuple[SeriesKey, float]] = []
        ratio = snap.node.cpu_usage_ratio
        if ratio is not None:
            out.append((("node", "", "cpu"), ratio))
        out.append((("node", "", "memory"), snap.node.memory_usage_ratio))
        for uid, pod in snap.pods.items():
            if pod.cpu_cores is not None:
                out.append((("pod", uid, "cpu"), pod.cpu_cores))
            out.append((("pod", uid, "memory"), float(pod.memory_working_set_bytes)))
        return out

    def snapshot(self, mono: float) -> Snapshot:
        self.seq += 1
        rng = self.rng
        pods: dict[str, PodSample] = {}
        for i, meta in enumerate(self.metas):
            containers = tuple(
                ContainerSample(
                    id=f"{meta.uid[:8]}{c:056x}",
                    cgroup=f"/kubepods/{QOS[i % 3]}/pod{meta.uid}/{c:064x}",
                    cpu_cores=rng.uniform(0.0, 0.5),
                    memory_working_set_bytes=rng.randrange(50 << 20, 500 << 20),
                    memory_anon_bytes=rng.randrange(10 << 20, 400 << 20),
                    memory_usage_bytes=rng.randrange(60 << 20, 600 << 20),
                    cpu_throttled_ratio=rng.uniform(0.0, 0.2),
                )
                for c in range(self.containers)
            )
            pods[meta.uid] = PodSample(
                meta=meta,
                qos=QOS[i % 3],
                cgroup=f"/kubepods/{QOS[i % 3]}/pod{meta.uid}",
                cpu_cores=sum(c.cpu_cores or 0.0 for c in containers),
                memory_working_set_bytes=sum(c.memory_working_set_bytes for c in containers),
                memory_anon_bytes=sum(c.memory_anon_bytes for c in containers),
                memory_usage_bytes=sum(c.memory_usage_bytes for c in containers),
                memory_file_bytes=rng.randrange(0, 100 << 20),
                cpu_throttled_ratio=rng.uniform(0.0, 0.2),
                containers=containers,
                pressure={
                    "cpu": Pressure(rng.uniform(0, 0.1), rng.uniform(0, 0.05)),
                    "memory": Pressure(0.0, 0.0),
                    "io": Pressure(rng.uniform(0, 0.02), 0.0),
                },
            )
        node = NodeSample(
            cpu_capacity_cores=64.0,
            cpu_cores=rng.uniform(10.0, 50.0),
            memory_total_bytes=256 << 30,
            memory_used_bytes=rng.randrange(64 << 30, 200 << 30),
            memory_page_cache_bytes=20 << 30,
            pressure={"cpu": Pressure(0.01, None), "memory": Pressure(0.0, 0.0), "io": Pressure(0.02, 0.01)},
        )
        tiers = {q: TierSample(q, f"/kubepods/{q}", rng.uniform(1, 20), rng.randrange(1 << 30, 50 << 30)) for q in QOS}
        ifaces = (
            InterfaceSample("eth0", True, rng.uniform(1e6, 1e8), rng.uniform(1e6, 1e8)),
            InterfaceSample("eth1", True, rng.uniform(1e6, 1e8), rng.uniform(1e6, 1e8)),
            InterfaceSample("cni0", False, 1e6, 1e6),
        )
        return Snapshot(self.seq, mono, time.time(), node, tiers, pods, ifaces, duration_seconds=0.02)


def build_view(pods: int, containers: int, interval: float, history: int) -> tuple[AgentView, Synthetic]:
    """A view whose windows already hold `history` samples per series, one per second up to now."""
    store = WindowStore()
    view = AgentView(store, interval=interval, node_name="bench-node")
    synth = Synthetic(pods, containers)
    now = time.monotonic()
    for k in range(history, 0, -1):
        snap = synth.snapshot(now - k)
        store.add_many(snap.mono, synth.samples(snap))
    return view, synth


def publish_loop(view: AgentView, synth: Synthetic, interval: float, stop: threading.Event, cpu: list[float]) -> None:
    """The synthetic sampler: build a snapshot, feed the windows, publish; its own CPU goes to `cpu`."""
    next_t = time.monotonic()
    while not stop.is_set():
        start = time.thread_time()
        snap = synth.snapshot(time.monotonic())
        with view.windows_lock:
            view.windows.add_many(snap.mono, synth.samples(snap))
        cpu[0] += time.thread_time() - start
        view.publish(snap)  # listeners run here but are the exporter's cost: measured outside `cpu`
        next_t += interval
        stop.wait(max(0.0, next_t - time.monotonic()))


def serve_child(args: argparse.Namespace) -> None:
    """Child process: build the view, serve it, publish snapshots until SIGTERM, then print stats as JSON."""
    from exporter.app import create_app, make_server

    view, synth = build_view(args.pods, args.containers, args.interval, args.history)
    view.publish(synth.snapshot(time.monotonic()))
    app = create_app(view)
    server = make_server(app, "127.0.0.1", 0)
    stop = threading.Event()
    sampler_cpu = [0.0]
    publisher = threading.Thread(target=publish_loop, args=(view, synth, args.interval, stop, sampler_cpu))
    server_thread = server.start_thread()
    publisher.start()
    cpu0, wall0 = time.process_time(), time.monotonic()
    sampler0 = sampler_cpu[0]
    print(json.dumps({"port": server.bound_port}), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    sampler = sampler_cpu[0] - sampler0
    publisher.join()
    server.stop()
    server_thread.join(10)
    cache = app.state.render_cache
    current = cache.current
    print(
        json.dumps(
            {
                "wall_seconds": wall,
                "process_cpu_seconds": cpu,
                "sampler_cpu_seconds": sampler,
                "renders": cache.renders,
                "prerenders": cache.prerenders,
                "hits": cache.hits,
                "waits": cache.waits,
                "encodes": cache.encodes,
                "window_passes": app.state.windows.computations,
                "series": None if current is None else current.series,
                "render_seconds": None if current is None else current.seconds,
                "scrape_periods": cache.scrape_periods(),
            }
        ),
        flush=True,
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def scrape_cycles(urls: list[str], every: float, count: int) -> tuple[list[list[float]], list[int]]:
    """`count` cycles `every` seconds apart; each scrapes every URL in turn with Prometheus' headers on a
    fresh connection (uvicorn closes idle connections after 5 s, so a 15 s Prometheus reconnects too).
    Latency is request to last body byte, without decompression (the server's cost, not the client's)."""
    latencies: list[list[float]] = [[] for _ in urls]
    sizes = [0 for _ in urls]
    headers = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}
    next_t = time.monotonic()
    gc.disable()  # the client's own collections would show up as server latency; collect between cycles
    try:
        _cycles(urls, every, count, headers, latencies, sizes, next_t)
    finally:
        gc.enable()
    return latencies, sizes


def _cycles(
    urls: list[str],
    every: float,
    count: int,
    headers: dict[str, str],
    latencies: list[list[float]],
    sizes: list[int],
    next_t: float,
) -> None:
    for _ in range(count):
        for i, url in enumerate(urls):
            with httpx.Client(timeout=10.0) as client:
                start = time.perf_counter()
                with client.stream("GET", url, headers=headers) as resp:
                    raw = b"".join(resp.iter_raw())  # to the last byte, without the client's gunzip
                latencies[i].append(time.perf_counter() - start)
            resp.raise_for_status()
            sizes[i] = len(raw)
        gc.collect()
        next_t += every
        time.sleep(max(0.0, next_t - time.monotonic()))


def start_node_exporter() -> subprocess.Popen[bytes] | None:
    if not shutil.which(NODE_EXPORTER):
        print("node_exporter: skipped (not installed: apt-get install -y prometheus-node-exporter)")
        return None
    ne = subprocess.Popen(
        [NODE_EXPORTER, f"--web.listen-address={NODE_EXPORTER_ADDR}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            httpx.get(f"http://{NODE_EXPORTER_ADDR}/metrics", timeout=2.0)
            return ne
        except httpx.TransportError:
            if time.monotonic() > deadline or ne.poll() is not None:
                ne.kill()
                print("node_exporter: did not start, skipped")
                return None
            time.sleep(0.1)


def count_series(url: str) -> tuple[int, int]:
    body = httpx.get(url, timeout=10.0).content
    return sum(1 for line in body.decode().splitlines() if line and not line.startswith("#")), len(body)


def report(name: str, latencies: list[float]) -> str:
    med, p99 = statistics.median(latencies) * 1e3, percentile(latencies, 0.99) * 1e3
    top = ", ".join(f"{x * 1e3:.1f}" for x in sorted(latencies)[-3:])
    return f"{name}: n={len(latencies)} median {med:.2f} ms, p99 {p99:.2f} ms (three slowest: {top} ms)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=250)
    ap.add_argument("--containers", type=int, default=3)
    ap.add_argument("--history", type=int, default=600, help="seconds of 1 Hz samples fed before start")
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between snapshots")
    ap.add_argument("--scrape-every", type=float, default=7.5, help="seconds between scrapes")
    ap.add_argument("--scrapes", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3, help="scrapes not counted (cadence learning)")
    ap.add_argument("--no-node-exporter", action="store_true")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve_child(args)
        return

    cmd = [sys.executable, "-m", "bench.bench_exporter", "--serve"]
    cmd += ["--pods", str(args.pods), "--containers", str(args.containers), "--history", str(args.history)]
    cmd += ["--interval", str(args.interval)]
    ne = None if args.no_node_exporter else start_node_exporter()
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    try:
        assert child.stdout is not None
        port = json.loads(child.stdout.readline())["port"]
        urls = [f"http://127.0.0.1:{port}/metrics"]
        if ne is not None:
            urls.append(f"http://{NODE_EXPORTER_ADDR}/metrics")
        print(
            f"{args.pods} pods x {args.containers} containers, snapshot every {args.interval} s, scrape every "
            f"{args.scrape_every} s ({args.warmup} warm-up + {args.scrapes} measured cycles; each cycle scrapes "
            f"{' then '.join(urls)})"
        )
        scrape_cycles(urls, args.scrape_every, args.warmup)
        latencies, sizes = scrape_cycles(urls, args.scrape_every, args.scrapes)
        series = [count_series(url) for url in urls]
    finally:
        child.send_signal(signal.SIGTERM)
        out, _ = child.communicate(timeout=60)
        if ne is not None:
            ne.terminate()
            ne.wait(10)
    stats = json.loads(out.strip().splitlines()[-1])
    exporter_cpu = stats["process_cpu_seconds"] - stats["sampler_cpu_seconds"]
    colo = latencies[0]
    print(report("colo /metrics (OpenMetrics+gzip)", colo))
    print(f"colo series: {series[0][0]}, gzip body {sizes[0] / 1024:.0f} KiB, text body {series[0][1] / 1024:.0f} KiB")
    print(
        f"colo renders: {stats['renders']} ({stats['prerenders']} ahead of a scrape), last render "
        f"{stats['render_seconds'] * 1e3:.1f} ms, cache hits {stats['hits']}, waits {stats['waits']}, "
        f"window passes {stats['window_passes']}, learned periods {stats['scrape_periods']}"
    )
    print(
        f"colo CPU over {stats['wall_seconds']:.0f} s: process {stats['process_cpu_seconds']:.2f} s, "
        f"synthetic sampler {stats['sampler_cpu_seconds']:.2f} s, exporter share "
        f"{100 * exporter_cpu / stats['wall_seconds']:.2f}% of a core at this cadence, about "
        f"{100 * exporter_cpu / stats['wall_seconds'] * args.scrape_every / 15.0:.2f}% scaled to one scrape per 15 s"
    )
    if ne is None:
        return
    node_exp = latencies[1]
    print(report("node_exporter /metrics (same loop)", node_exp))
    print(f"node_exporter series: {series[1][0]}, gzip body {sizes[1] / 1024:.0f} KiB")
    ratio_med = statistics.median(colo) / statistics.median(node_exp)
    ratio_p99 = percentile(colo, 0.99) / percentile(node_exp, 0.99)
    print(f"latency ratio colo/node_exporter: median {ratio_med:.2f}, p99 {ratio_p99:.2f}")


if __name__ == "__main__":
    main()
