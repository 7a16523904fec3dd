"""Benchmark: how long `colo-sim --prometheus URL --since 7d` takes to read a cluster's week.

Run: `.venv/bin/python -m bench.bench_sim_prometheus [--pods 100] [--days 7] [--repeat 5]`. A real Prometheus
(Debian's package, loopback) holds `--days` of cAdvisor and kube-state-metrics series for `--pods` pods on
10 nodes, one container each, scraped every 100 s (three scrapes per 300 s step: enough for rate(), and a
week fits promtool in seconds). `read_prometheus` then reads them at the default 300 s step: five range
queries, the answers parsed and joined into samples. Prints the time per read (median, min-max) and the
samples per second (the Prometheus server's own query time included, as an operator would wait for it),
and the CPU time of colo-sim's side alone (HTTP, JSON, joining), which a busy machine disturbs less.
Skipped without the prometheus and promtool binaries.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from colo_sim.prometheus import read_prometheus
from testsupport.prometheus_server import binaries, prometheus_server

SCRAPE = 100
NODES = 10


def family(name: str, kind: str, pods: int, start: int, end: int) -> str:
    """One metric family's series for every pod, OpenMetrics text."""
    lines = [f"# TYPE {name.removesuffix('_total')} {kind}"]
    times = range(start + 30, end, SCRAPE)
    for p in range(pods):
        pod = f'namespace="bench",pod="pod-{p}"'
        if name == "container_cpu_usage_seconds_total":
            cores = 0.125 * (1 + p % 8)
            labels = f'{pod},container="app",id="/kubepods/pod-{p}/app"'
            lines.extend(f"{name}{{{labels}}} {cores * (t - start)!r} {t}" for t in times)
        elif name == "container_memory_working_set_bytes":
            labels = f'{pod},container="app",id="/kubepods/pod-{p}/app"'
            lines.extend(f"{name}{{{labels}}} {float((64 + (t // 3600 + p) % 64) << 20)!r} {t}" for t in times)
        elif name == "kube_pod_container_resource_requests":
            for resource, value in (("cpu", 1.0), ("memory", float(1 << 30))):
                labels = f'{pod},container="app",resource="{resource}"'
                lines.extend(f"{name}{{{labels}}} {value!r} {t}" for t in times)
        else:
            labels = f'{pod},node="node-{p % NODES}"'
            lines.extend(f"{name}{{{labels}}} 1.0 {t}" for t in times)
    return "\n".join([*lines, "# EOF", ""])


def series(pods: int, start: int, end: int) -> Iterator[str]:
    yield family("container_cpu_usage_seconds_total", "counter", pods, start, end)
    yield family("container_memory_working_set_bytes", "gauge", pods, start, end)
    yield family("kube_pod_container_resource_requests", "gauge", pods, start, end)
    yield family("kube_pod_info", "gauge", pods, start, end)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if binaries() is None:
        print("   skipped: needs the prometheus and promtool binaries (Debian: apt-get install prometheus)")
        return
    end = (int(time.time()) // 3600 - 2) * 3600
    start = end - args.days * 86400
    with tempfile.TemporaryDirectory(prefix="bench-prometheus-") as root:
        t0 = time.perf_counter()
        with prometheus_server(Path(root), series(args.pods, start, end), timeout=120) as url:
            setup = time.perf_counter() - t0
            times, cpu, count = [], [], 0
            for _ in range(args.repeat):
                t1, c1 = time.perf_counter(), time.process_time()
                count = len(read_prometheus(url, end - start - 300, end_unix_s=end))
                times.append(time.perf_counter() - t1)
                cpu.append(time.process_time() - c1)
    med = statistics.median(times)
    print(f"read_prometheus, {args.pods} pods x {args.days} d at 300 s ({count} samples): median {med:.3f} s "
          f"(min {min(times):.3f}, max {max(times):.3f}; {count / med:,.0f} samples/s), of which colo-sim's own "
          f"CPU median {statistics.median(cpu):.3f} s (min {min(cpu):.3f}, max {max(cpu):.3f}); "
          f"series written and server started in {setup:.1f} s")  # fmt: skip


if __name__ == "__main__":
    main()
