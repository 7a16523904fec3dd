"""What enforcement exposes: the `enforcement` section of /api/v1/node and its metric families, read from the
strategies' reports of the last pass (only ever replaced, never changed in place, so a reader sees one pass).

A strategy's report is a typed record (agent/enforce/actions.py `Report`) whose `fields()` are keys of the section;
its registration (agent/enforce/strategies/registry.py `report_defaults`) gives each key's value while it is not
active, so the JSON has those keys always. A new strategy documents its keys in docs/online-qos.md (and, for
a metric, adds a family in `metrics`). The online QoS strategies' keys (`QOS_KEYS`) make the `qos` section
(agent/enforce/qos_report.py) instead of this one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.metrics_core import Metric

from agent.enforce.actions import Report
from common.families import Family

OFFLINE_CPU_BUDGET = Family("colo_offline_cpu_budget_cores", "CPU the offline pods may use together, cores")
OFFLINE_CPU_RELEASED = Family(
    "colo_offline_cpu_released", "1 while the node is quiet and offline pods run at their own CPU limits"
)
OFFLINE_POD_CPU_QUOTA = Family("colo_offline_pod_cpu_quota_cores", "CPU quota given to an offline pod, cores", ("uid",))
OFFLINE_POD_MEMORY_HIGH = Family("colo_offline_pod_memory_high_bytes", "memory.high given to an offline pod", ("uid",))
RUN_QUEUE_GUARD_CAP = Family(
    "colo_run_queue_guard_cap_cores",
    "Ceiling the run-queue protection puts on the offline CPU budget, cores (absent while there is none)",
)
BESTEFFORT_TIER_IDLE = Family(
    "colo_besteffort_tier_idle",
    "1 while the best-effort QoS tier has cpu.idle=1 (set by the kubelet or by hand, never by Colo): the kernel then "
    "runs online pods first at the tier (absent where the kernel has no cpu.idle)",
)
ENFORCEMENT_WRITES = Family("colo_enforcement_writes", "cgroup writes made by enforcement", ("result",), "counter")
LEDGER_SAVE_FAILED = Family(
    "colo_enforcement_ledger_save_failed",
    "1 while the last save of the enforcement ledger did not reach the disk (no cgroup is changed until it does)",
)
LEDGER_UNTRUSTED = Family(
    "colo_enforcement_ledger_untrusted",
    "1 when the ledger found at start could not be read (kept aside with a .corrupt- suffix): originals come "
    "from the pod specs until the agent restarts",
)


@dataclass(frozen=True, slots=True)
class EnforcementState:
    """What the section and the metrics read of the enforcer, taken at once (the enforcer hands this record
    over, so this module never imports it: no cycle)."""

    dry_run: bool
    cpu_policy: str
    memory_status: str
    reports: Mapping[str, Report]
    touched: tuple[str, ...]
    writes: int
    errors: int
    last_error: str | None
    defaults: Mapping[str, Any]  # the registered strategies' report keys while not active, in the section's order
    ledger_save_failed: bool = False
    ledger_untrusted: bool = False
    besteffort_tier_idle: bool | None = None  # None: not read yet, or the kernel has no cpu.idle


QOS_KEYS = ("cpu_burst", "quota_burst", "memory_qos")
#: mappings a report may hold on to: the section gets a copy
_COPIED = frozenset({"offline_cpu_quota_cores", "offline_memory_high_bytes"})


def merged(reports: Mapping[str, Report], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The section's keys: every report's fields over the defaults of those not active."""
    out = dict(defaults)
    for report in reports.values():
        out.update(report.fields())
    return out


def section(e: EnforcementState) -> dict[str, Any]:
    """The strategies' keys in their order (but the online QoS ones), the memory status before memory.high's."""
    out: dict[str, Any] = {"dry_run": e.dry_run, "cpu_policy": e.cpu_policy}
    for key, value in merged(e.reports, e.defaults).items():
        if key in QOS_KEYS:
            continue
        if key == "offline_memory_high_bytes":
            out["memory"] = e.memory_status
        out[key] = dict(value) if key in _COPIED else value
    out.update(pods_touched=list(e.touched), writes=e.writes, write_errors=e.errors, last_error=e.last_error)
    out["besteffort_tier_idle"] = e.besteffort_tier_idle
    return out


def metrics(e: EnforcementState) -> Iterable[Metric]:
    r = merged(e.reports, e.defaults)
    out: list[Metric] = []
    if r["offline_cpu_budget_cores"] is not None:
        g = OFFLINE_CPU_BUDGET.metric()
        g.add_metric([], r["offline_cpu_budget_cores"])
        out.append(g)
    rel = OFFLINE_CPU_RELEASED.metric()
    rel.add_metric([], 1.0 if r["offline_cpu_released"] else 0.0)
    out.append(rel)
    q = OFFLINE_POD_CPU_QUOTA.metric()
    for uid, cores in r["offline_cpu_quota_cores"].items():
        q.add_metric([uid], cores)
    out.append(q)
    m = OFFLINE_POD_MEMORY_HIGH.metric()
    for uid, value in r["offline_memory_high_bytes"].items():
        m.add_metric([uid], float(value))
    out.append(m)
    guard = r.get("run_queue_guard") or {}
    if guard.get("cap_cores") is not None:
        g = RUN_QUEUE_GUARD_CAP.metric()
        g.add_metric([], float(guard["cap_cores"]))
        out.append(g)
    w = ENFORCEMENT_WRITES.metric()
    w.add_metric(["ok"], float(e.writes))
    w.add_metric(["error"], float(e.errors))
    out.append(w)
    for family, value in ((LEDGER_SAVE_FAILED, e.ledger_save_failed), (LEDGER_UNTRUSTED, e.ledger_untrusted)):
        g = family.metric()
        g.add_metric([], 1.0 if value else 0.0)
        out.append(g)
    if e.besteffort_tier_idle is not None:
        g = BESTEFFORT_TIER_IDLE.metric()
        g.add_metric([], 1.0 if e.besteffort_tier_idle else 0.0)
        out.append(g)
    return out
