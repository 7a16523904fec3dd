"""The per-pod series of one /metrics render, written as text lines in one pass over the pods.

Pods are most of a render (~43 series each at 3 containers: usage, pressure, 24 windows, containers), so
this is the loop that counts: each pod's label texts are built once per pod (`common.exposition.LabelShapes`)
and kept, a few strings, while the pod stays in the snapshots; each sample is one string, and the lines of
a family go into one list per render. A family joins the output order when it gets its first line, exactly where adding
the samples one by one would have put it, so the bytes are those of a sample-by-sample render.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from agent.sense.collectors import containers, disk, pod_network, pods, psi
from agent.snapshot import PodSample
from common.exposition import EXPONENT, LabelShapes, escape, go_float
from common.families import Families, Family
from contract.windows import WINDOW_NAMES
from exporter.stats import POD_CPU_WINDOW, POD_MEMORY_WINDOW, WindowSet

#: The per-pod families, in the order a pod's samples are written.
_FAMILIES: tuple[Family, ...] = (
    pods.CPU_USAGE,
    pods.WORKING_SET,
    pods.ANON,
    pods.THROTTLED,
    psi.PRESSURE,
    pod_network.RECEIVE,
    pod_network.TRANSMIT,
    disk.POD_READ,
    disk.POD_WRITE,
    disk.POD_READS,
    disk.POD_WRITES,
    POD_CPU_WINDOW,
    POD_MEMORY_WINDOW,
    containers.CPU_USAGE,
    containers.WORKING_SET,
    containers.THROTTLED,
)


def normalize_qos(qos: str) -> str:
    """'Guaranteed', 'BestEffort', 'best-effort' -> 'guaranteed', 'besteffort': one spelling for labels."""
    return qos.lower().replace("-", "").replace("_", "")


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


class _Lines:
    """One family's lines in one render; `opening` is its name and brace, for labelled samples."""

    __slots__ = ("family", "lines", "opening")

    def __init__(self, family: Family) -> None:
        self.family = family
        self.opening = family.name + "{"
        self.lines: list[str] = []


class _Pod:
    """What the renders keep of a pod: its label texts, for the pod's own series and each shape of extra
    label its series have (a few strings; a disk device's, rare, is built when needed)."""

    __slots__ = ("base", "container", "key", "pressure", "window_after", "window_before")

    def __init__(self, key: tuple[object, ...], labels: LabelShapes) -> None:
        self.key = key
        self.base = labels.base
        self.pressure = labels.template(("kind", "resource"))
        self.container = labels.template(("container",))
        self.window_before, self.window_after = labels.around("window")


class PodLines:
    """Writes the pods' series of each render; keeps each pod's label texts between renders (`_Pod`)."""

    def __init__(self, pod_windows: Sequence[str]) -> None:
        self.pod_windows = tuple(pod_windows)
        self._positions = tuple((name, WINDOW_NAMES.index(name)) for name in self.pod_windows)  # in a row
        self._pods: dict[str, _Pod] = {}  # by uid, while the pod is in the snapshots

    def write(self, f: Families, ordered: Iterable[PodSample], windows: dict[str, dict[str, WindowSet]]) -> None:
        """Every per-pod series of `ordered` (in /metrics order) into `f`, families in first-use order."""
        out = [_Lines(fam) for fam in _FAMILIES]
        (cpu, ws, anon, thr, pressure, rx, tx, dread, dwrite, dreads, dwrites, wcpu, wmem, ccpu, cws, cthr) = out
        order: list[_Lines] = []  # families in the order they got their first line

        def put(o: _Lines, labels: str, value: float | None) -> None:
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
            base = entry.base
            put(cpu, base, pod.cpu_cores)
            put(ws, base, pod.memory_working_set_bytes)
            put(anon, base, pod.memory_anon_bytes)
            put(thr, base, pod.cpu_throttled_ratio)
            if pod.pressure:
                tmpl = entry.pressure
                for res, p in sorted(pod.pressure.items()):
                    put(pressure, tmpl % ("some", res), p.some_avg10)
                    put(pressure, tmpl % ("full", res), p.full_avg10)
            if pod.network is not None and not pod.network.host_network:
                put(rx, base, pod.network.rx_bytes_per_second)
                put(tx, base, pod.network.tx_bytes_per_second)
            if pod.disk:
                tmpl = LabelShapes(pod_labels(pod)).template(("device",))
                for device, r in sorted(pod.disk.items()):
                    dl = tmpl % escape(device)
                    put(dread, dl, r.read_bytes_per_second)
                    put(dwrite, dl, r.write_bytes_per_second)
                    put(dreads, dl, r.reads_per_second)
                    put(dwrites, dl, r.writes_per_second)
            pw = windows.get(meta.uid)
            if pw is not None:
                before, after = entry.window_before, entry.window_after
                if wcpu.lines and wmem.lines:  # both families placed: each block on its own, fast
                    self._windows(wcpu, before, after, pw["cpu"])
                    self._windows(wmem, before, after, pw["memory"])
                else:  # sample by sample, so that the first known value places the families
                    cpu_w, mem_w = pw["cpu"], pw["memory"]
                    for name in self.pod_windows:
                        text = f"{before}{name}{after}"
                        put(wcpu, text, cpu_w[name].value)
                        put(wmem, text, mem_w[name].value)
            if pod.containers:
                tmpl = entry.container
                for c in pod.containers:
                    cl = tmpl % escape(c.id)
                    put(ccpu, cl, c.cpu_cores)
                    put(cws, cl, c.memory_working_set_bytes)
                    put(cthr, cl, c.cpu_throttled_ratio)
        self._pods = seen  # pods gone from the snapshot leave the cache
        for o in order:
            f.add_lines(o.family, o.lines)

    def _windows(self, o: _Lines, before: str, after: str, w: WindowSet) -> None:
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
