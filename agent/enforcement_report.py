"""What enforcement exposes: the `enforcement` section of /api/v1/node and its metric families, read from the
enforcer's exported state (only ever replaced, never changed in place, so a reader sees one pass)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from cgroup.files import format_cpuset

if TYPE_CHECKING:
    from agent.enforcer import Enforcer


def section(e: Enforcer) -> dict[str, Any]:
    return {
        "dry_run": e.dry_run,
        "cpu_policy": e.config.cpu_policy,
        "offline_cpu_budget_cores": e.budget_cores,
        "offline_cpu_released": e.released,
        "offline_cpu_quota_cores": dict(e.quotas),
        "besteffort_cpu_cores": e.besteffort_cores,
        "besteffort_tier_cap_cores": e.tier_cap_cores,
        "offline_cpuset": None if e.cpuset is None else format_cpuset(e.cpuset),
        "memory": e.memory_status,
        "offline_memory_high_bytes": dict(e.memory_high),
        "pods_touched": list(e.touched),
        "batch": e.batch_report,
        "writes": e.writes,
        "write_errors": e.errors,
        "last_error": e.last_error,
    }


def metrics(e: Enforcer) -> Iterable[Metric]:
    out: list[Metric] = []
    if e.budget_cores is not None:
        g = GaugeMetricFamily("colo_offline_cpu_budget_cores", "CPU the offline pods may use together, cores")
        g.add_metric([], e.budget_cores)
        out.append(g)
    r = GaugeMetricFamily(
        "colo_offline_cpu_released", "1 while the node is quiet and offline pods run at their own CPU limits"
    )
    r.add_metric([], 1.0 if e.released else 0.0)
    out.append(r)
    q = GaugeMetricFamily(
        "colo_offline_pod_cpu_quota_cores", "CPU quota given to an offline pod, cores", labels=["uid"]
    )
    for uid, cores in e.quotas.items():
        q.add_metric([uid], cores)
    out.append(q)
    m = GaugeMetricFamily("colo_offline_pod_memory_high_bytes", "memory.high given to an offline pod", labels=["uid"])
    for uid, value in e.memory_high.items():
        m.add_metric([uid], float(value))
    out.append(m)
    w = CounterMetricFamily("colo_enforcement_writes", "cgroup writes made by enforcement", labels=["result"])
    w.add_metric(["ok"], float(e.writes))
    w.add_metric(["error"], float(e.errors))
    out.append(w)
    return out
