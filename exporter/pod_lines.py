"""The per-pod series of one /metrics render, written as text lines in one pass over the pods.

Pods are most of a render (~43 series each at 3 containers: usage, pressure, 24 windows, containers), so
this is the loop that counts: each pod's label texts are built once per pod (`common.exposition.LabelShapes`)
and kept, a few strings, while the pod stays in the snapshots; each sample is one string, and the lines of
a family go into one list per render. A family joins the output order when it gets its first line, exactly
where adding the samples one by one would have put it, so the bytes are those of a sample-by-sample render.
What a pod's series are is the collectors' registrations' (`pod_series`); the windows are the exporter's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from agent.sense.collectors.registry import POD_WINDOWS_ORDER, PodSeries, in_metrics_order
from agent.snapshot import PodSample, qos_label
from common.exposition import EXPONENT, LabelShapes, go_float
from common.families import Families, FamilyLines
from contract.windows import WINDOW_NAMES
from exporter.stats import POD_CPU_WINDOW, POD_MEMORY_WINDOW, WindowSet

#: a registered collector's series of one pod, with the lines of its families in this render
_Writer = tuple[PodSeries, list[FamilyLines]]


def pod_labels(pod: PodSample) -> dict[str, str]:
    """The identifying labels of a pod's series; namespace and pod are "" for a standalone pod."""
    meta = pod.meta
    return {
        "namespace": meta.namespace or "",
        "pod": meta.name or "",
        "uid": meta.uid,
        "qos": qos_label(pod.qos),
        "class": meta.pod_class,
    }


class _Pod:
    """What the renders keep of a pod: its label texts (`LabelShapes`: the pod's own, and each shape of extra
    label its series have, built at first use), and the window label's split text."""

    __slots__ = ("key", "labels", "window_after", "window_before")

    def __init__(self, key: tuple[object, ...], labels: LabelShapes) -> None:
        self.key = key
        self.labels = labels
        self.window_before, self.window_after = labels.around("window")


class PodLines:
    """Writes the pods' series of each render; keeps each pod's label texts between renders (`_Pod`). Each
    pod's series are its registered collectors' (agent/sense/collectors/registry.py `pod_series`, in their
    `metrics_order`) and its windows (at `POD_WINDOWS_ORDER`)."""

    def __init__(self, pod_windows: Sequence[str]) -> None:
        self.pod_windows = tuple(pod_windows)
        self._positions = tuple((name, WINDOW_NAMES.index(name)) for name in self.pod_windows)  # in a row
        self._pods: dict[str, _Pod] = {}  # by uid, while the pod is in the snapshots

    def write(self, f: Families, ordered: Iterable[PodSample], windows: dict[str, dict[str, WindowSet]]) -> None:
        """Every per-pod series of `ordered` (in /metrics order) into `f`, families in first-use order."""
        before: list[_Writer] = []  # the collectors' series before a pod's windows, and after
        after: list[_Writer] = []
        for spec in in_metrics_order():
            if spec.pod_series is not None:
                writers = before if spec.metrics_order < POD_WINDOWS_ORDER else after
                writers.append((spec.pod_series, [FamilyLines(fam) for fam in spec.families]))
        wcpu, wmem = FamilyLines(POD_CPU_WINDOW), FamilyLines(POD_MEMORY_WINDOW)
        order: list[FamilyLines] = []  # families in the order they got their first line

        def put(o: FamilyLines, labels: str, value: float | None) -> None:
            if value is None:
                return
            lines = o.lines
            if not lines:
                order.append(o)
            lines.append(f"{o.opening}{labels}}} {go_float(value)}\n")

        known = self._pods
        seen: dict[str, _Pod] = {}
        for pod in ordered:
            meta = pod.meta
            key = (meta.uid, meta.namespace, meta.name, pod.qos, meta.pod_class)
            entry = known.get(meta.uid)
            if entry is None or entry.key != key:
                entry = _Pod(key, LabelShapes(pod_labels(pod)))
            seen[meta.uid] = entry
            labels = entry.labels
            for series, lines in before:
                series(put, lines, labels, pod)
            pw = windows.get(meta.uid)
            if pw is not None:
                win_before, win_after = entry.window_before, entry.window_after
                if wcpu.lines and wmem.lines:  # both families placed: each block on its own, fast
                    self._windows(wcpu, win_before, win_after, pw["cpu"])
                    self._windows(wmem, win_before, win_after, pw["memory"])
                else:  # sample by sample, so that the first known value places the families
                    cpu_w, mem_w = pw["cpu"], pw["memory"]
                    for name in self.pod_windows:
                        text = f"{win_before}{name}{win_after}"
                        put(wcpu, text, cpu_w[name].value)
                        put(wmem, text, mem_w[name].value)
            for series, lines in after:
                series(put, lines, labels, pod)
        self._pods = seen  # pods gone from the snapshot leave the cache
        for o in order:
            f.add_lines(o.family, o.lines)

    def _windows(self, o: FamilyLines, before: str, after: str, w: WindowSet) -> None:
        """A pod's lines of one window family (already placed in the order)."""
        lines = o.lines
        head = o.opening + before
        tail = after + "} "
        row = w.row
        for name, i in self._positions:
            v = row[i].value
            if v is None:
                continue
            s = repr(v)  # go_float, inline (a window's value is a float)
            if v > 0:
                dot = s.find(".")
                if dot > 6:
                    s = (s[0] + "." + s[1:dot] + s[dot + 1 :]).rstrip("0.") + EXPONENT[dot]
                elif "n" in s:
                    s = go_float(v)
            elif "n" in s:
                s = go_float(v)
            lines.append(f"{head}{name}{tail}{s}\n")
