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

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from agent.sense.collectors import registry
from agent.snapshot import PodSample, Snapshot
from agent.view import AgentView
from common.families import Families, Family
from contract.annotations import KOORD_QUOTA_NAME
from contract.windows import WINDOW_NAMES
from exporter.pod_lines import PodLines
from exporter.stats import (
    CRANE_GAUGES,
    NODE_WINDOW,
    NODE_WINDOW_COVERAGE,
    WindowStatsCache,
)

log = logging.getLogger(__name__)

DEFAULT_LABEL_KEYS: tuple[str, ...] = (KOORD_QUOTA_NAME,)

POD_LABELS: tuple[str, ...] = ("namespace", "pod", "uid", "qos", "class")

_SOURCE_ERROR_LOG_INTERVAL = 60.0

# what the exporter itself measures: aggregates of the snapshot's pods, and the agent's own passes and renders
NAMESPACE_CPU = Family("colo_namespace_cpu_usage_cores", "CPU cores used by a namespace's pods.")
NAMESPACE_WORKING_SET = Family("colo_namespace_memory_working_set_bytes", "Working set of a namespace's pods.")
LABEL_CPU = Family("colo_label_cpu_usage_cores", "CPU cores used by the pods carrying a label value.")
LABEL_WORKING_SET = Family("colo_label_memory_working_set_bytes", "Working set of the pods carrying a label value.")
SAMPLE_DURATION = Family("colo_agent_sample_duration_seconds", "Duration of the last sampling pass.")
SNAPSHOT_SEQ = Family("colo_agent_snapshot_seq", "Sequence number of the exported snapshot.")
PODS = Family("colo_agent_pods", "Pods in the exported snapshot.")
RENDER_SECONDS = Family("colo_agent_render_seconds", "Duration of the previous /metrics render.")
SOURCE_ERRORS = Family(
    "colo_agent_metric_source_errors",
    "Failed or clashing collections of a stage's metric source.",
    ("source",),
    "counter",
)


def node_label(view: AgentView) -> str:
    return view.node_name or socket.gethostname()


def pod_order(pod: PodSample) -> tuple[str, str, str]:
    """Sort key of pods in /metrics and /api/v1/pods (standalone pods, namespace "", first): one order for both."""
    return (pod.meta.namespace or "", pod.meta.name or "", pod.meta.uid)


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
        self._pod_lines = PodLines(self.pod_windows)

    def collect(self) -> Iterable[Metric]:
        return self.collect_snapshot(self.view.snapshot)

    def collect_snapshot(self, snap: Snapshot | None) -> list[Metric]:
        """Every family for `snap` (None before the first snapshot: only the stages' and error families)."""
        fams = Families()
        if snap is not None:
            self._node(fams, snap)
            self._pods(fams, snap)
            self._agent(fams, snap)
        out = fams.families()
        out.extend(self._sources({m.name for m in out}))
        return out

    # ------------------------------------------------------------------ node

    def _node(self, f: Families, snap: Snapshot) -> None:
        """The collectors' node-level series (their registrations' `node_series`, in `metrics_order`), and the
        node's windows at `NODE_WINDOWS_ORDER`."""
        nl = {"node": node_label(self.view)}
        windows_due = True
        for spec in registry.in_metrics_order():
            if spec.node_series is None:
                continue
            if windows_due and spec.metrics_order > registry.NODE_WINDOWS_ORDER:
                self._node_windows(f, snap, nl)
                windows_due = False
            spec.node_series(f, snap, nl)
        if windows_due:
            self._node_windows(f, snap, nl)

    def _node_windows(self, f: Families, snap: Snapshot, nl: dict[str, str]) -> None:
        win = self.windows.get(snap)
        for res, values in win.node.items():
            for name in WINDOW_NAMES:
                wv = values[name]
                labels = {**nl, "resource": res, "window": name}
                f.add(NODE_WINDOW, labels, wv.value)
                f.add(NODE_WINDOW_COVERAGE, labels, wv.coverage)
        for gauge, res, name in CRANE_GAUGES:
            value = win.node[res][name].value
            f.add(gauge, nl, None if value is None else value * 100.0)

    # ------------------------------------------------------------------ pods

    def _pods(self, f: Families, snap: Snapshot) -> None:
        ordered = sorted(snap.pods.values(), key=pod_order)
        self._pod_lines.write(f, ordered, self.windows.get(snap).pods)
        ns_cpu: dict[str, float] = {}
        ns_mem: dict[str, float] = {}
        lab_cpu: dict[tuple[str, str], float] = {}
        lab_mem: dict[tuple[str, str], float] = {}
        for pod in ordered:
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
            f.add(NAMESPACE_CPU, nsl, ns_cpu.get(ns))
            f.add(NAMESPACE_WORKING_SET, nsl, ns_mem[ns])
        for key, value in sorted(lab_mem):
            ll = {"label_key": key, "label_value": value}
            f.add(LABEL_CPU, ll, lab_cpu.get((key, value)))
            f.add(LABEL_WORKING_SET, ll, lab_mem[key, value])

    # ------------------------------------------------------------------ agent and stages

    def _agent(self, f: Families, snap: Snapshot) -> None:
        f.add(SAMPLE_DURATION, {}, snap.duration_seconds)
        f.add(SNAPSHOT_SEQ, {}, snap.seq)
        f.add(PODS, {}, len(snap.pods))
        f.add(RENDER_SECONDS, {}, self.render_seconds)
        for run in snap.collectors:
            labels = {"collector": run.name}
            f.add(registry.SUCCESS, labels, 1.0 if run.success else 0.0)
            f.add(registry.DURATION, labels, run.duration_seconds)

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
            errors = SOURCE_ERRORS.metric()
            for source_name, count in sorted(self._source_errors.items()):
                errors.add_metric([source_name], count)
            yield errors

    def _source_failed(self, source_name: str, what: str, *, exc: bool = True) -> None:
        self._source_errors[source_name] = self._source_errors.get(source_name, 0) + 1
        now = time.monotonic()
        if now - self._source_logged.get(source_name, -_SOURCE_ERROR_LOG_INTERVAL) >= _SOURCE_ERROR_LOG_INTERVAL:
            self._source_logged[source_name] = now
            log.warning("metric source %r: %s", source_name, what, exc_info=exc)
