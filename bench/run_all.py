"""`make bench`: every benchmark in turn (root, real cgroups, loopback only)."""

from __future__ import annotations

import importlib
import sys

BENCHES = ("bench.cgroup_read_pass", "bench.bench_windows", "bench.agent_overhead", "bench.agent_cluster",
           "bench.agent_rss",
           "bench.bench_exporter", "bench.bench_contract", "bench.bench_controller",
           "bench.bench_controller_writes", "bench.bench_cpu_burst",
           "bench.bench_rebalance", "bench.bench_serving", "bench.bench_admission",
           "bench.bench_batch_limits", "bench.bench_batch_capacity", "bench.enforcement_pass",
           "bench.bench_qos_plans", "bench.bench_api_writes", "bench.bench_release_flaps",
           "bench.collection_pass", "bench.render_pass", "bench.bench_sim",
           "bench.bench_sim_prometheus", "bench.bench_sim_fleet", "bench.net_egress",
           "bench.disk_qos", "bench.pod_cache", "bench.run_queue_cost", "bench.interference")  # fmt: skip


def main() -> None:
    for name in BENCHES:
        print(f"== {name}", flush=True)
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            print(f"   skipped: {exc}")
            continue
        saved = sys.argv
        sys.argv = [name]
        try:
            module.main()
        finally:
            sys.argv = saved


if __name__ == "__main__":
    main()
