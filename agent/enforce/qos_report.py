"""What online QoS exposes: the `qos` section of /api/v1/node and its metric families, read from the
cpu_burst, quota_burst and memory_qos strategies' reports of the enforcement stage's last pass (only ever
replaced, so a reader sees one pass). Their keys are kept out of the `enforcement` section."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client.metrics_core import Metric

from agent.enforce.actions import Report
from agent.enforce.strategies.cpu_burst import CpuBurstReport
from agent.enforce.strategies.memory_qos import MemoryQosReport
from agent.enforce.strategies.quota_burst import NodeBurstState, QuotaBurstReport
from common.families import Family

if TYPE_CHECKING:
    from agent.enforce.stage import Enforcer

R = TypeVar("R", bound=Report)
NODE_STATES: tuple[NodeBurstState, ...] = ("idle", "cooling", "busy", "blocked")

CONTAINER_CPU_BURST = Family(
    "colo_container_cpu_burst_us", "CFS burst planned for an online container, µs", ("uid", "container")
)
POD_CPU_BURST = Family("colo_pod_cpu_burst_us", "CFS burst planned for an online pod, µs", ("uid",))
CONTAINER_QUOTA_BURST = Family(
    "colo_container_cpu_quota_burst_cores",
    "CFS quota of an online container under dynamic quota burst, cores",
    ("uid", "container"),
)
CONTAINER_QUOTA_RAISED = Family(
    "colo_container_cpu_quota_raised", "1 while an online container's quota is above its own", ("uid", "container")
)
NODE_QUOTA_BURST_STATE = Family("colo_node_quota_burst_state", "1 for the node's dynamic quota burst state", ("state",))
POD_MEMORY_PROTECTED = Family("colo_pod_memory_protected_bytes", "memory.min/low given to an online pod", ("uid",))
POD_MEMORY_QOS_HIGH = Family("colo_pod_memory_qos_high_bytes", "memory.high given to an online pod", ("uid",))
QOS_SUPPORTED = Family("colo_qos_supported", "1 where the kernel supports an online QoS feature", ("feature",))


def section(e: Enforcer) -> dict[str, Any]:
    """`cpu_burst`, `quota_burst`, `memory` (empty while enforcement is off: nothing is planned then) and the
    online pods the ledger holds QoS values for; writes and errors are enforcement's (one executor)."""
    burst, quota, memory = (_of(e.reports, kind) for kind in (CpuBurstReport, QuotaBurstReport, MemoryQosReport))
    return {
        "dry_run": e.dry_run,
        "cpu_burst": _fields(burst, "cpu_burst"),
        "quota_burst": _fields(quota, "quota_burst"),
        "memory": _fields(memory, "memory_qos"),
        "pods_touched": list(e.qos_touched),
    }


def _of(reports: Mapping[str, Report], kind: type[R]) -> R | None:
    """The report of that type (one strategy makes each); None while that strategy is not active."""
    return next((r for r in reports.values() if isinstance(r, kind)), None)


def _fields(report: Report | None, key: str) -> dict[str, Any]:
    return dict(report.fields()[key]) if report is not None else {}


def metrics(e: Enforcer) -> Iterable[Metric]:
    burst = _of(e.reports, CpuBurstReport)
    quota = _of(e.reports, QuotaBurstReport)
    memory = _of(e.reports, MemoryQosReport)
    cb = CONTAINER_CPU_BURST.metric()
    pb = POD_CPU_BURST.metric()
    for uid, pod in (burst.pods if burst else {}).items():
        if pod["burst_us"] is not None:
            pb.add_metric([uid], float(pod["burst_us"]))
        for cid, value in pod["containers"].items():
            cb.add_metric([uid, cid], float(value))
    qc = CONTAINER_QUOTA_BURST.metric()
    qr = CONTAINER_QUOTA_RAISED.metric()
    for uid, pod in (quota.pods if quota else {}).items():
        for cid, c in pod["containers"].items():
            qc.add_metric([uid, cid], c["quota_cores"])
            qr.add_metric([uid, cid], 1.0 if c["quota_cores"] > c["own_quota_cores"] else 0.0)
    ns = NODE_QUOTA_BURST_STATE.metric()
    if quota is not None and quota.node_state is not None:
        for state in NODE_STATES:
            ns.add_metric([state], 1.0 if quota.node_state == state else 0.0)
    mp = POD_MEMORY_PROTECTED.metric()
    mh = POD_MEMORY_QOS_HIGH.metric()
    for uid, pod in (memory.pods if memory else {}).items():
        mp.add_metric([uid], float(pod["protected_bytes"]))
        if pod["high_bytes"] is not None:
            mh.add_metric([uid], float(pod["high_bytes"]))
    sup = QOS_SUPPORTED.metric()
    sup.add_metric(["cpu_burst"], 1.0 if burst is not None and burst.supported else 0.0)
    sup.add_metric(["memory"], 1.0 if memory is not None and memory.supported else 0.0)
    return [cb, pb, qc, qr, ns, mp, mh, sup]
