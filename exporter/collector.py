"""The prometheus-client Collector over the AgentView: every Colo metric family of one snapshot.

All values are in base units (cores, bytes, ratios 0..1), except the six crane-scheduler gauges, which keep
crane's names and its unit (percent 0..100) so that crane-scheduler's annotator can read them unchanged:
it queries ``<name>{instance=~"<node name or IP>"} / 100``. They carry a ``node`` label; Prometheus sets
``instance`` itself at scrape time, so the scrape config must make ``instance`` the node name or IP
(a hostNetwork DaemonSet target is already ``<node IP>:<port>``, which crane's ``<ip>:.+`` query matches).

A series whose value is unknown (first sample, empty window) is left out rather than exported as 0 or NaN,
so that a query sees "no data" instead of a wrong number. Families without any series are dropped.

The collector only reads: the snapshot (immutable) and the window store through `WindowStatsCache`
(which takes ``view.windows_lock``). `collect_snapshot` is what the render cache calls, so one render is
exactly one snapshot.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.snapshot import PodSample, Pressure, Snapshot
from agent.view import AgentView
from contract.annotations import KOORD_QUOTA_NAME
from contract.windows import WINDOW_NAMES
from exporter.stats import WindowStatsCache

log = logging.getLogger(__name__)

DEFAULT_LABEL_KEYS: tuple[str, ...] = (KOORD_QUOTA_NAME,)

#: crane-scheduler's gauge name -> (resource, window); exported in percent.
CRANE_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("cpu_usage_avg_5m", "cpu", "avg_5m"),
    ("cpu_usage_max_avg_1h", "cpu", "max_avg_1h"),
    ("cpu_usage_max_avg_1d", "cpu", "max_avg_1d"),
    ("mem_usage_avg_5m", "memory", "avg_5m"),
    ("mem_usage_max_avg_1h", "memory", "max_avg_1h"),
    ("mem_usage_max_avg_1d", "memory", "max_avg_1d"),
)

POD_LABELS: tuple[str, ...] = ("namespace", "pod", "uid", "qos", "class")

_SOURCE_ERROR_LOG_INTERVAL = 60.0


def normalize_qos(qos: str) -> str:
    """'Guaranteed', 'BestEffort', 'best-effort' -> 'guaranteed', 'besteffort': one spelling for labels."""
    return qos.lower().replace("-", "").replace("_", "")


def node_label(view: AgentView) -> str:
    return view.node_name or socket.gethostname()


def pod_labels(pod: PodSample) -> dict[str, str]:
    """The identifying labels of a pod's series; namespace and pod are "" for a standalone pod."""
    meta = pod.meta
    return {
        "namespace": meta.namespace or "",
        "pod": meta.name or "",
        "uid": meta.uid,
        "qos": normalize_qos(pod.qos),
        "class": meta.pod_class,
    }


def pod_order(pod: PodSample) -> tuple[str, str, str]:
    """Sort key of pods in /metrics and /api/v1/pods (standalone pods, namespace "", first): one order for both."""
    return (pod.meta.namespace or "", pod.meta.name or "", pod.meta.uid)


class _Families:
    """Gauge families in first-use order; a name is declared once with its help text."""

    def __init__(self) -> None:
        self._by_name: dict[str, Metric] = {}

    def gauge(self, name: str, documentation: str) -> Metric:
        fam = self._by_name.get(name)
        if fam is None:
            fam = self._by_name[name] = GaugeMetricFamily(name, documentation)
        return fam

    def add(self, name: str, documentation: str, labels: dict[str, str], value: float | None) -> None:
        if value is None:
            return
        self.gauge(name, documentation).add_sample(name, labels, float(value))

    def families(self) -> list[Metric]:
        return [fam for fam in self._by_name.values() if fam.samples]


class ColoCollector(Collector):
    """Turns one snapshot (plus its windows and the stages' metric sources) into metric families."""

    def __init__(
        self,
        view: AgentView,
        *,
        label_keys: Sequence[str] = DEFAULT_LABEL_KEYS,
        windows: WindowStatsCache | None = None,
        pod_windows: Sequence[str] = WINDOW_NAMES,
    ) -> None:
        self.view = view
        self.label_keys = tuple(label_keys)
        self.windows = windows if windows is not None else WindowStatsCache(view)
        unknown = [w for w in pod_windows if w not in WINDOW_NAMES]
        if unknown:
            raise ValueError(f"unknown pod windows: {unknown}")
        self.pod_windows = tuple(pod_windows)
        #: Duration of the previous render (set by the render cache; exported as colo_agent_render_seconds).
        self.render_seconds: float | None = None
        self._source_errors: dict[str, int] = {}
        self._source_logged: dict[str, float] = {}

    def collect(self) -> Iterable[Metric]:
        return self.collect_snapshot(self.view.snapshot)

    def collect_snapshot(self, snap: Snapshot | None) -> list[Metric]:
        """Every family for `snap` (None before the first snapshot: only the stages' and error families)."""
        fams = _Families()
        if snap is not None:
            self._node(fams, snap)
            self._pods(fams, snap)
            self._agent(fams, snap)
        out = fams.families()
        out.extend(self._sources({m.name for m in out}))
        return out

    # ------------------------------------------------------------------ node

    def _node(self, f: _Families, snap: Snapshot) -> None:
        node = snap.node
        nl = {"node": node_label(self.view)}
        f.add("colo_node_cpu_capacity_cores", "CPU cores the node has.", nl, node.cpu_capacity_cores)
        f.add(
            "colo_node_cpu_usage_cores", "Busy CPU cores of the node (not idle, iowait or steal).", nl, node.cpu_cores
        )
        f.add("colo_node_cpu_usage_ratio", "Busy CPU of the node over its capacity (0-1).", nl, node.cpu_usage_ratio)
        f.add("colo_node_memory_total_bytes", "MemTotal of the node.", nl, node.memory_total_bytes)
        f.add("colo_node_memory_used_bytes", "MemTotal - MemAvailable of the node.", nl, node.memory_used_bytes)
        f.add("colo_node_memory_page_cache_bytes", "Page cache of the node.", nl, node.memory_page_cache_bytes)
        f.add("colo_node_memory_usage_ratio", "Used over total memory of the node (0-1).", nl, node.memory_usage_ratio)
        self._pressure(f, "colo_node_pressure_ratio", "Node PSI 10 s average (0-1).", nl, node.pressure)

        win = self.windows.get(snap)
        for res, values in win.node.items():
            for name in WINDOW_NAMES:
                wv = values[name]
                labels = {**nl, "resource": res, "window": name}
                f.add("colo_node_window_ratio", "Node usage over a rolling window (0-1).", labels, wv.value)
                f.add(
                    "colo_node_window_coverage_ratio",
                    "Fraction of the window's span that samples cover (0-1).",
                    labels,
                    wv.coverage,
                )
        for gauge, res, name in CRANE_GAUGES:
            value = win.node[res][name].value
            percent = None if value is None else value * 100.0
            f.add(gauge, f"crane-scheduler compatible node {res} usage {name}, in percent (0-100).", nl, percent)

        rx_doc = "Bytes per second received (physical interfaces, and their total)."
        tx_doc = "Bytes per second transmitted (physical interfaces, and their total)."
        for iface in snap.interfaces:
            if not iface.physical:
                continue
            il = {**nl, "interface": iface.name}
            f.add("colo_node_network_receive_bytes_per_second", rx_doc, il, iface.rx_bytes_per_second)
            f.add("colo_node_network_transmit_bytes_per_second", tx_doc, il, iface.tx_bytes_per_second)
        rx, tx = snap.network_total()
        tl = {**nl, "interface": "total"}
        f.add("colo_node_network_receive_bytes_per_second", rx_doc, tl, rx)
        f.add("colo_node_network_transmit_bytes_per_second", tx_doc, tl, tx)

        for tier in sorted(snap.tiers.values(), key=lambda t: t.qos):
            ql = {"qos": normalize_qos(tier.qos)}
            f.add("colo_qos_cpu_usage_cores", "CPU cores used by a QoS tier's cgroup.", ql, tier.cpu_cores)
            f.add(
                "colo_qos_memory_working_set_bytes",
                "Working set of a QoS tier's cgroup.",
                ql,
                tier.memory_working_set_bytes,
            )

    @staticmethod
    def _pressure(f: _Families, name: str, doc: str, labels: dict[str, str], pressure: dict[str, Pressure]) -> None:
        for res, p in sorted(pressure.items()):
            f.add(name, doc, {**labels, "resource": res, "kind": "some"}, p.some_avg10)
            f.add(name, doc, {**labels, "resource": res, "kind": "full"}, p.full_avg10)

    # ------------------------------------------------------------------ pods

    def _pods(self, f: _Families, snap: Snapshot) -> None:
        win = self.windows.get(snap)
        ns_cpu: dict[str, float] = {}
        ns_mem: dict[str, float] = {}
        lab_cpu: dict[tuple[str, str], float] = {}
        lab_mem: dict[tuple[str, str], float] = {}
        for pod in sorted(snap.pods.values(), key=pod_order):
            pl = pod_labels(pod)
            f.add("colo_pod_cpu_usage_cores", "CPU cores used by a pod.", pl, pod.cpu_cores)
            f.add("colo_pod_memory_working_set_bytes", "Working set of a pod.", pl, pod.memory_working_set_bytes)
            f.add("colo_pod_memory_anon_bytes", "Anonymous memory of a pod.", pl, pod.memory_anon_bytes)
            f.add(
                "colo_pod_cpu_throttled_ratio",
                "Throttled over total CFS periods of a pod during the last tick (0-1).",
                pl,
                pod.cpu_throttled_ratio,
            )
            self._pressure(f, "colo_pod_pressure_ratio", "Pod PSI 10 s average (0-1).", pl, pod.pressure)
            pw = win.pods.get(pod.uid)
            if pw is not None:
                cpu_w, mem_w = pw["cpu"], pw["memory"]
                for name in self.pod_windows:
                    wl = {**pl, "window": name}
                    f.add("colo_pod_cpu_window_cores", "Pod CPU cores over a rolling window.", wl, cpu_w[name].value)
                    f.add(
                        "colo_pod_memory_window_bytes",
                        "Pod working set over a rolling window.",
                        wl,
                        mem_w[name].value,
                    )
            for c in pod.containers:
                cl = {**pl, "container": c.id}
                f.add("colo_container_cpu_usage_cores", "CPU cores used by a container.", cl, c.cpu_cores)
                f.add(
                    "colo_container_memory_working_set_bytes",
                    "Working set of a container.",
                    cl,
                    c.memory_working_set_bytes,
                )
                f.add(
                    "colo_container_cpu_throttled_ratio",
                    "Throttled over total CFS periods of a container during the last tick (0-1).",
                    cl,
                    c.cpu_throttled_ratio,
                )
            ns = pod.meta.namespace
            if ns is None:
                continue  # standalone: no namespace, no labels to aggregate by
            if pod.cpu_cores is not None:
                ns_cpu[ns] = ns_cpu.get(ns, 0.0) + pod.cpu_cores
            ns_mem[ns] = ns_mem.get(ns, 0.0) + pod.memory_working_set_bytes
            for key in self.label_keys:
                value = pod.meta.labels.get(key)
                if value is None:
                    continue
                if pod.cpu_cores is not None:
                    lab_cpu[key, value] = lab_cpu.get((key, value), 0.0) + pod.cpu_cores
                lab_mem[key, value] = lab_mem.get((key, value), 0.0) + pod.memory_working_set_bytes

        for ns in sorted(ns_mem):
            nsl = {"namespace": ns}
            f.add("colo_namespace_cpu_usage_cores", "CPU cores used by a namespace's pods.", nsl, ns_cpu.get(ns))
            f.add("colo_namespace_memory_working_set_bytes", "Working set of a namespace's pods.", nsl, ns_mem[ns])
        for key, value in sorted(lab_mem):
            ll = {"label_key": key, "label_value": value}
            f.add(
                "colo_label_cpu_usage_cores",
                "CPU cores used by the pods carrying a label value.",
                ll,
                lab_cpu.get((key, value)),
            )
            f.add(
                "colo_label_memory_working_set_bytes",
                "Working set of the pods carrying a label value.",
                ll,
                lab_mem[key, value],
            )

    # ------------------------------------------------------------------ agent and stages

    def _agent(self, f: _Families, snap: Snapshot) -> None:
        f.add("colo_agent_sample_duration_seconds", "Duration of the last sampling pass.", {}, snap.duration_seconds)
        f.add("colo_agent_snapshot_seq", "Sequence number of the exported snapshot.", {}, snap.seq)
        f.add("colo_agent_pods", "Pods in the exported snapshot.", {}, len(snap.pods))
        f.add("colo_agent_render_seconds", "Duration of the previous /metrics render.", {}, self.render_seconds)

    def _sources(self, taken: set[str]) -> Iterator[Metric]:
        """The stages' families; a failing or clashing source is skipped (and counted), never fatal."""
        for source_name, source in list(self.view.metric_sources.items()):
            try:
                fams = list(source())
            except Exception:
                self._source_failed(source_name, "raised")
                continue
            for fam in fams:
                if fam.name in taken:
                    self._source_failed(source_name, f"duplicate family {fam.name}", exc=False)
                    continue
                taken.add(fam.name)
                yield fam
        if self._source_errors:
            errors = CounterMetricFamily(
                "colo_agent_metric_source_errors",
                "Failed or clashing collections of a stage's metric source.",
                labels=["source"],
            )
            for source_name, count in sorted(self._source_errors.items()):
                errors.add_metric([source_name], count)
            yield errors

    def _source_failed(self, source_name: str, what: str, *, exc: bool = True) -> None:
        self._source_errors[source_name] = self._source_errors.get(source_name, 0) + 1
        now = time.monotonic()
        if now - self._source_logged.get(source_name, -_SOURCE_ERROR_LOG_INTERVAL) >= _SOURCE_ERROR_LOG_INTERVAL:
            self._source_logged[source_name] = now
            log.warning("metric source %r: %s", source_name, what, exc_info=exc)
