"""What online QoS exposes: the `qos` section of /api/v1/node and its metric families, read from the
strategies' reports of the last pass (only ever replaced, so a reader sees one pass)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from agent.qos.quota_burst import NodeBurstState

if TYPE_CHECKING:
    from agent.qos_stage import QosStage

NODE_STATES: tuple[NodeBurstState, ...] = ("idle", "cooling", "busy", "blocked")


def section(q: QosStage) -> dict[str, Any]:
    r = q.reports
    return {
        "dry_run": q.dry_run,
        "cpu_burst": r.get("cpu_burst", {}),
        "quota_burst": r.get("quota_burst", {}),
        "memory": r.get("memory_qos", {}),
        "pods_touched": sorted(q.ledger.entries),
        "writes": q.executor.writes,
        "write_errors": q.executor.errors,
        "last_error": q.executor.last_error,
    }


def metrics(q: QosStage) -> Iterable[Metric]:
    r = q.reports
    burst, quota, memory = r.get("cpu_burst", {}), r.get("quota_burst", {}), r.get("memory_qos", {})
    cb = GaugeMetricFamily("colo_container_cpu_burst_us", "CFS burst planned for an online container, µs",
                           labels=["uid", "container"])  # fmt: skip
    pb = GaugeMetricFamily("colo_pod_cpu_burst_us", "CFS burst planned for an online pod, µs", labels=["uid"])
    for uid, pod in burst.get("pods", {}).items():
        if pod["burst_us"] is not None:
            pb.add_metric([uid], float(pod["burst_us"]))
        for cid, value in pod["containers"].items():
            cb.add_metric([uid, cid], float(value))
    qc = GaugeMetricFamily("colo_container_cpu_quota_burst_cores",
                           "CFS quota of an online container under dynamic quota burst, cores",
                           labels=["uid", "container"])  # fmt: skip
    qr = GaugeMetricFamily("colo_container_cpu_quota_raised", "1 while an online container's quota is above its own",
                           labels=["uid", "container"])  # fmt: skip
    for uid, pod in quota.get("pods", {}).items():
        for cid, c in pod["containers"].items():
            qc.add_metric([uid, cid], c["quota_cores"])
            qr.add_metric([uid, cid], 1.0 if c["quota_cores"] > c["own_quota_cores"] else 0.0)
    ns = GaugeMetricFamily("colo_node_quota_burst_state", "1 for the node's dynamic quota burst state",
                           labels=["state"])  # fmt: skip
    if quota.get("node_state") is not None:
        for state in NODE_STATES:
            ns.add_metric([state], 1.0 if quota["node_state"] == state else 0.0)
    mp = GaugeMetricFamily("colo_pod_memory_protected_bytes", "memory.min/low given to an online pod",
                           labels=["uid"])  # fmt: skip
    mh = GaugeMetricFamily("colo_pod_memory_qos_high_bytes", "memory.high given to an online pod", labels=["uid"])
    for uid, pod in memory.get("pods", {}).items():
        mp.add_metric([uid], float(pod["protected_bytes"]))
        if pod["high_bytes"] is not None:
            mh.add_metric([uid], float(pod["high_bytes"]))
    sup = GaugeMetricFamily("colo_qos_supported", "1 where the kernel supports an online QoS feature",
                            labels=["feature"])  # fmt: skip
    sup.add_metric(["cpu_burst"], 1.0 if burst.get("supported") else 0.0)
    sup.add_metric(["memory"], 1.0 if memory.get("supported") else 0.0)
    w = CounterMetricFamily("colo_qos_writes", "cgroup writes made by online QoS", labels=["result"])
    w.add_metric(["ok"], float(q.executor.writes))
    w.add_metric(["error"], float(q.executor.errors))
    return [cb, pb, qc, qr, ns, mp, mh, sup, w]
