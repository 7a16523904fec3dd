"""JSON documents for /api/v1/node, /api/v1/pods and /api/v1/units.

Plain dicts and lists built from one snapshot and its windows (`WindowStatsCache`, shared with the
/metrics render), so the API and the metrics of one snapshot agree. Field names carry their unit where
it is not obvious (``_cores``, ``_bytes``, ``_ratio``, ``_bytes_per_second``); the node document also has
a ``units`` object, and ``/api/v1/units`` names the unit of every numeric field of both documents (the pod
list is the top level of its response, so it has no room for one). Non-finite numbers become null: JSON
has no NaN.

Node windows are keyed by crane-scheduler's names (``cpu_usage_avg_5m``, ``mem_usage_max_avg_1h``,
``cpu_usage_p95_5m`` ...) and hold ratios 0..1, not crane's percent. Pod windows are keyed by window name
(every name of `WINDOW_NAMES`), each holding the pod's own field names: ``{"avg_5m": {"cpu_cores": w,
"memory_working_set_bytes": w}, ...}``, so a window reads like the pod's current usage. Every window value
``w`` is ``{"value": number or null, "coverage": 0..1}``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from agent.enforce.strategies.batch_limits import problems_of
from agent.snapshot import ContainerSample, DiskRates, NetworkRates, PodMeta, PodSample, Pressure, Snapshot
from agent.view import AgentView
from agent.windows.store import WindowValue
from contract.agent_api import MAX_BYTES, MAX_CORES
from contract.windows import NODE_WINDOW_PREFIX, POD_WINDOW_FIELD, WINDOW_NAMES
from exporter.pod_lines import normalize_qos
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

POD_UNITS: dict[str, str] = {
    "cpu_cores": "cores",
    "memory_working_set_bytes": "bytes",
    "memory_anon_bytes": "bytes",
    "cpu_throttled_ratio": "ratio",
    "containers.cpu_cores": "cores",
    "containers.memory_working_set_bytes": "bytes",
    "containers.memory_anon_bytes": "bytes",
    "containers.cpu_throttled_ratio": "ratio",
    "windows.*.cpu_cores.value": "cores",
    "windows.*.memory_working_set_bytes.value": "bytes",
    "windows.*.*.coverage": "ratio",
    "batch.cpu_request_millicores": "millicores",
    "batch.cpu_limit_millicores": "millicores",
    "batch.memory_request_bytes": "bytes",
    "batch.memory_limit_bytes": "bytes",
    "disk.*.read_bytes_per_second": "bytes_per_second",
    "disk.*.write_bytes_per_second": "bytes_per_second",
    "disk.*.reads_per_second": "operations_per_second",
    "disk.*.writes_per_second": "operations_per_second",
}


def num(x: float | None) -> float | None:
    """A JSON-safe number: None for unknown, NaN or infinite."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def rfc3339(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _window(wv: WindowValue | None) -> dict[str, float | None]:
    """One window; a missing one (no samples yet) is unknown with zero coverage, never absent."""
    if wv is None:
        return {"value": None, "coverage": 0.0}
    return {"value": num(wv.value), "coverage": num(wv.coverage) or 0.0}


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
    return {res: {"some": num(p.some_avg10), "full": num(p.full_avg10)} for res, p in sorted(pressure.items())}


def node_document(view: AgentView, snap: Snapshot, windows: WindowStatsCache) -> dict[str, Any]:
    """The /api/v1/node body: node usage, windows, network, units, plus every `view.node_sections` entry."""
    node = snap.node
    interfaces = {
        i.name: {
            "physical": i.physical,
            "receive_bytes_per_second": num(i.rx_bytes_per_second),
            "transmit_bytes_per_second": num(i.tx_bytes_per_second),
        }
        for i in snap.interfaces
    }
    rx, tx = snap.network_total()
    doc: dict[str, Any] = {
        "node_name": node_label(view),
        "cpu_capacity_cores": num(node.cpu_capacity_cores),
        "cpu_cores": num(node.cpu_cores),
        "cpu_usage_ratio": num(node.cpu_usage_ratio),
        "memory_total_bytes": node.memory_total_bytes,
        "memory_used_bytes": node.memory_used_bytes,
        "memory_usage_ratio": num(node.memory_usage_ratio),
        "memory_page_cache_bytes": node.memory_page_cache_bytes,
        "pressure": _pressure(node.pressure),
        "network": {
            "interfaces": interfaces,
            "total": {"receive_bytes_per_second": num(rx), "transmit_bytes_per_second": num(tx)},
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


def _container(c: ContainerSample) -> dict[str, Any]:
    return {
        "id": c.id,
        "cpu_cores": num(c.cpu_cores),
        "memory_working_set_bytes": c.memory_working_set_bytes,
        "memory_anon_bytes": c.memory_anon_bytes,
        "cpu_throttled_ratio": num(c.cpu_throttled_ratio),
    }


def _disk(r: DiskRates) -> dict[str, float | None]:
    return {
        "read_bytes_per_second": num(r.read_bytes_per_second),
        "write_bytes_per_second": num(r.write_bytes_per_second),
        "reads_per_second": num(r.reads_per_second),
        "writes_per_second": num(r.writes_per_second),
    }


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


def _network(n: NetworkRates | None) -> dict[str, Any] | None:
    """The pod's own network namespace (collectors.pod_network; null while it is not read)."""
    if n is None:
        return None
    return {"host_network": n.host_network, "receive_bytes_per_second": num(n.rx_bytes_per_second),
            "transmit_bytes_per_second": num(n.tx_bytes_per_second)}  # fmt: skip


def pod_document(view: AgentView, pod: PodSample, windows: dict[str, WindowSet] | None) -> dict[str, Any]:
    meta = pod.meta
    doc: dict[str, Any] = {
        "namespace": meta.namespace,
        "name": meta.name,
        "uid": meta.uid,
        "qos": normalize_qos(pod.qos),
        "class": meta.pod_class,
        "cpu_cores": num(pod.cpu_cores),
        "memory_working_set_bytes": pod.memory_working_set_bytes,
        "memory_anon_bytes": pod.memory_anon_bytes,
        "cpu_throttled_ratio": num(pod.cpu_throttled_ratio),
        "containers": [_container(c) for c in pod.containers],
        "windows": _pod_windows(windows or {}),
        "batch": _batch(meta),
        "network": _network(pod.network),
        # per device 'MAJ:MIN' while the disk collector is on; null while it is off
        "disk": None if pod.disk is None else {dev: _disk(r) for dev, r in sorted(pod.disk.items())},
    }
    for name, section in list(view.pod_sections.items()):
        try:
            extra = section(meta.uid)
        except Exception as exc:
            log.exception("pod section %r failed for %s", name, meta.uid)
            extra = {"error": f"{type(exc).__name__}: {exc}"}
        if extra is not None:
            doc[name] = extra
    return doc


def pods_document(view: AgentView, snap: Snapshot, windows: WindowStatsCache) -> list[dict[str, Any]]:
    """The /api/v1/pods body: one entry per pod of the snapshot, ordered by namespace, name, uid."""
    win = windows.get(snap)
    pods = sorted(snap.pods.values(), key=pod_order)
    return [pod_document(view, pod, win.pods.get(pod.uid)) for pod in pods]


def units_document() -> dict[str, Any]:
    """The /api/v1/units body: the unit of every numeric field of the node and pod documents."""
    return {
        "node": dict(NODE_UNITS),
        "pods": dict(POD_UNITS),
        "units": {
            "cores": "CPU cores (1.0 = one core busy for the whole interval)",
            "bytes": "bytes",
            "ratio": "fraction 0..1",
            "bytes_per_second": "bytes per second",
            "count": "plain number",
            "millicores": "thousandths of a CPU core (Kubernetes' milli-CPU)",
            "rfc3339": "RFC 3339 UTC timestamp of the snapshot",
        },
    }
