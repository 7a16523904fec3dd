"""JSON documents for /api/v1/node, /api/v1/pods and /api/v1/units.

Plain dicts and lists built from one snapshot and its windows (`WindowStatsCache`, shared with the
/metrics render), so the API and the metrics of one snapshot agree. Field names carry their unit where
it is not obvious (``_cores``, ``_bytes``, ``_ratio``, ``_bytes_per_second``); the node document also has
a ``units`` object, and ``/api/v1/units`` names the unit of every numeric field of both documents (the pod
list is the top level of its response, so it has no room for one). Non-finite numbers become null: JSON
has no NaN. A pod's measured fields and their units are its collectors' (agent/sense/collectors/registry.py
`pod_fields`, `units`); the document adds who the pod is, its windows and its batch resources.

Node windows are keyed by crane-scheduler's names (``cpu_usage_avg_5m``, ``mem_usage_max_avg_1h``,
``cpu_usage_p95_5m`` ...) and hold ratios 0..1, not crane's percent. Pod windows are keyed by window name
(every name of `WINDOW_NAMES`), each holding the pod's own field names: ``{"avg_5m": {"cpu_cores": w,
"memory_working_set_bytes": w}, ...}``, so a window reads like the pod's current usage. Every window value
``w`` is ``{"value": number or null, "coverage": 0..1}``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from agent.enforce.strategies.batch_limits import problems_of
from agent.sense.collectors.registry import POD_WINDOWS_ORDER, in_metrics_order
from agent.snapshot import PodMeta, PodSample, Pressure, Snapshot, qos_label
from agent.view import AgentView
from agent.windows.store import WindowValue
from contract.agent_api import MAX_BYTES, MAX_CORES, json_number
from contract.windows import NODE_WINDOW_PREFIX, POD_WINDOW_FIELD, WINDOW_NAMES
from exporter.snapshot_metrics import node_label, pod_order
from exporter.stats import WindowSet, WindowStatsCache

log = logging.getLogger(__name__)


NODE_UNITS: dict[str, str] = {
    "cpu_capacity_cores": "cores",
    "cpu_cores": "cores",
    "cpu_usage_ratio": "ratio",
    "memory_total_bytes": "bytes",
    "memory_used_bytes": "bytes",
    "memory_usage_ratio": "ratio",
    "memory_page_cache_bytes": "bytes",
    "pressure": "ratio",
    "network": "bytes_per_second",
    "windows.value": "ratio",
    "windows.coverage": "ratio",
    "seq": "count",
    "timestamp": "rfc3339",
}

#: the units of the pod document's own fields (the collectors' fields declare theirs at registration)
POD_OWN_UNITS: dict[str, str] = {
    "windows.*.cpu_cores.value": "cores",
    "windows.*.memory_working_set_bytes.value": "bytes",
    "windows.*.*.coverage": "ratio",
    "batch.cpu_request_millicores": "millicores",
    "batch.cpu_limit_millicores": "millicores",
    "batch.memory_request_bytes": "bytes",
    "batch.memory_limit_bytes": "bytes",
}


def rfc3339(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _window(wv: WindowValue | None) -> dict[str, float | None]:
    """One window; a missing one (no samples yet) is unknown with zero coverage, never absent."""
    if wv is None:
        return {"value": None, "coverage": 0.0}
    return {"value": json_number(wv.value), "coverage": json_number(wv.coverage) or 0.0}


_NO_WINDOWS: Mapping[str, WindowValue] = {}  # a series without samples yet


def _node_windows(by_resource: dict[str, WindowSet]) -> dict[str, dict[str, float | None]]:
    """Flat, crane-named: ``{"cpu_usage_avg_5m": w, "mem_usage_avg_5m": w, ...}``."""
    out: dict[str, dict[str, float | None]] = {}
    for res, prefix in NODE_WINDOW_PREFIX.items():
        values = by_resource.get(res, _NO_WINDOWS)
        for name in WINDOW_NAMES:
            out[prefix + name] = _window(values.get(name))
    return out


def _pod_windows(by_resource: dict[str, WindowSet]) -> dict[str, dict[str, dict[str, float | None]]]:
    """Keyed by window name, then by the pod's field: ``{"avg_5m": {"cpu_cores": w, ...}, ...}``."""
    return {
        name: {field: _window(by_resource.get(res, _NO_WINDOWS).get(name)) for res, field in POD_WINDOW_FIELD.items()}
        for name in WINDOW_NAMES
    }


def _pressure(pressure: dict[str, Pressure]) -> dict[str, dict[str, float | None]]:
    return {
        res: {"some": json_number(p.some_avg10), "full": json_number(p.full_avg10)}
        for res, p in sorted(pressure.items())
    }


def node_document(view: AgentView, snap: Snapshot, windows: WindowStatsCache) -> dict[str, Any]:
    """The /api/v1/node body: node usage, windows, network, units, plus every `view.node_sections` entry."""
    node = snap.node
    interfaces = {
        i.name: {
            "physical": i.physical,
            "receive_bytes_per_second": json_number(i.rx_bytes_per_second),
            "transmit_bytes_per_second": json_number(i.tx_bytes_per_second),
        }
        for i in snap.interfaces
    }
    rx, tx = snap.network_total()
    doc: dict[str, Any] = {
        "node_name": node_label(view),
        "cpu_capacity_cores": json_number(node.cpu_capacity_cores),
        "cpu_cores": json_number(node.cpu_cores),
        "cpu_usage_ratio": json_number(node.cpu_usage_ratio),
        "memory_total_bytes": node.memory_total_bytes,
        "memory_used_bytes": node.memory_used_bytes,
        "memory_usage_ratio": json_number(node.memory_usage_ratio),
        "memory_page_cache_bytes": node.memory_page_cache_bytes,
        "pressure": _pressure(node.pressure),
        "network": {
            "interfaces": interfaces,
            "total": {"receive_bytes_per_second": json_number(rx), "transmit_bytes_per_second": json_number(tx)},
        },
        "windows": _node_windows(windows.get(snap).node),
        "units": dict(NODE_UNITS),
        "timestamp": rfc3339(snap.wall),
        "seq": snap.seq,
    }
    for name, section in list(view.node_sections.items()):
        try:
            doc[name] = section()
        except Exception as exc:
            log.exception("node section %r failed", name)
            doc[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return doc


def _batch(meta: PodMeta) -> dict[str, Any] | None:
    """The pod's batch requests (totals, as the scheduler allocates them: no overhead) and limits (the pod
    cgroup's, overhead included, as kubelet writes them) and why the agent does not write them; None for a
    pod without batch resources."""
    b = meta.batch
    if b is None:
        return None

    def bounded(value: int | None, hi: int) -> int | None:  # out-of-range values are among the problems
        return None if value is None else max(0, min(value, hi))

    cpu_max, mem_max = int(MAX_CORES * 1000), MAX_BYTES
    return {
        "cpu_request_millicores": bounded(b.cpu_request_milli, cpu_max),
        "cpu_limit_millicores": bounded(b.cpu_limit_milli, cpu_max),
        "memory_request_bytes": bounded(b.memory_request_bytes, mem_max),
        "memory_limit_bytes": bounded(b.memory_limit_bytes, mem_max),
        "problems": problems_of(meta),
    }


def pod_document(view: AgentView, pod: PodSample, windows: dict[str, WindowSet] | None) -> dict[str, Any]:
    """A pod's entry: who it is, each registered collector's fields (`pod_fields`, in `metrics_order`), its
    windows and batch resources (at `POD_WINDOWS_ORDER`), then every `view.pod_sections` entry."""
    meta = pod.meta
    doc: dict[str, Any] = {
        "namespace": meta.namespace,
        "name": meta.name,
        "uid": meta.uid,
        "qos": qos_label(pod.qos),
        "class": meta.pod_class,
    }
    own_due = True
    for spec in in_metrics_order():
        if spec.pod_fields is None:
            continue
        if own_due and spec.metrics_order > POD_WINDOWS_ORDER:
            _own_fields(doc, meta, windows)
            own_due = False
        doc.update(spec.pod_fields(pod))
    if own_due:
        _own_fields(doc, meta, windows)
    for name, section in list(view.pod_sections.items()):
        try:
            extra = section(meta.uid)
        except Exception as exc:
            log.exception("pod section %r failed for %s", name, meta.uid)
            extra = {"error": f"{type(exc).__name__}: {exc}"}
        if extra is not None:
            doc[name] = extra
    return doc


def _own_fields(doc: dict[str, Any], meta: PodMeta, windows: dict[str, WindowSet] | None) -> None:
    doc["windows"] = _pod_windows(windows or {})
    doc["batch"] = _batch(meta)


def pod_units() -> dict[str, str]:
    """The unit of every numeric field of a pod's entry: the collectors' (their registrations' `units`, in
    `metrics_order`) and the document's own (`POD_OWN_UNITS`, at `POD_WINDOWS_ORDER`)."""
    units: dict[str, str] = {}
    own_due = True
    for spec in in_metrics_order():
        if own_due and spec.metrics_order > POD_WINDOWS_ORDER:
            units.update(POD_OWN_UNITS)
            own_due = False
        units.update(spec.units)
    if own_due:
        units.update(POD_OWN_UNITS)
    return units


def pods_document(view: AgentView, snap: Snapshot, windows: WindowStatsCache) -> list[dict[str, Any]]:
    """The /api/v1/pods body: one entry per pod of the snapshot, ordered by namespace, name, uid."""
    win = windows.get(snap)
    pods = sorted(snap.pods.values(), key=pod_order)
    return [pod_document(view, pod, win.pods.get(pod.uid)) for pod in pods]


def units_document() -> dict[str, Any]:
    """The /api/v1/units body: the unit of every numeric field of the node and pod documents."""
    return {
        "node": dict(NODE_UNITS),
        "pods": pod_units(),
        "units": {
            "cores": "CPU cores (1.0 = one core busy for the whole interval)",
            "bytes": "bytes",
            "ratio": "fraction 0..1",
            "bytes_per_second": "bytes per second",
            "count": "plain number",
            "millicores": "thousandths of a CPU core (Kubernetes' milli-CPU)",
            "rfc3339": "RFC 3339 UTC timestamp of the snapshot",
            "seconds_per_second": "seconds spent (waiting, stalled) per second of the interval, summed over threads",
        },
    }
