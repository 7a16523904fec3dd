"""The /metrics bodies of one render: text 0.0.4 and OpenMetrics 1.0.0, plain or gzip, from one list of
metric families (the render cache in exporter/render.py decides when a render happens; this module how its
bytes are made).

`Rendered` is one render: the metric families of one snapshot (collected once) and its encodings,
keyed by variant ``(openmetrics, gzip)``. Variants are encoded lazily, each at most once, from the
same families, so text, OpenMetrics and gzip bodies of one render always agree. Colo's own families
arrive as finished sample lines (`common.exposition.LineFamily`, written by the collector); the stages'
plain gauges take a fast path that writes their lines the same way; both are shared by the two formats
and byte-identical to prometheus-client's output. Other families (the stages' counters, histograms) go
through prometheus-client's encoders. gzip uses level 1: a fifth larger than level 6 for a third
of the CPU, on a body that crosses a node-local or cluster network once per scrape. A render keeps only the
bodies asked for: the families, the shared sample lines and a gzip body's uncompressed text are dropped once
encoded (`Rendered.trim`; at 250 pods x 3 containers the families are ~2.7 MiB and each uncompressed body
~2 MiB, and a render held its predecessor's families while it built its own); a variant asked for later
collects the families of the same snapshot again.
"""

from __future__ import annotations

import concurrent.futures
import gzip
from collections.abc import Callable, Iterable

from prometheus_client import exposition
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as om_exposition

from common.exposition import NAME, LineFamily, escape, go_float

Variant = tuple[bool, bool]  # (openmetrics, gzip)
TEXT: Variant = (False, False)

CONTENT_TYPE_TEXT = "text/plain; version=0.0.4; charset=utf-8"
CONTENT_TYPE_OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


class _FixedCollector:
    """A Collector over a fixed list of families, so the encoders never collect twice."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


#: a sample's label names (legacy names only) -> sorted; a render has a few dozen distinct sets
_SORTED_KEYS: dict[tuple[str, ...], tuple[str, ...]] = {}


def _gauge_body(metric: Metric) -> str | None:
    """The sample lines of a plain gauge family, None when it needs prometheus-client's encoder.

    For a gauge without unit, timestamps or exemplars whose metric and label names are legacy names, the
    sample lines are the same in text 0.0.4 and OpenMetrics, so they are built once for both formats,
    three times faster than prometheus-client (which escapes every name of every sample). The output is
    byte-identical to prometheus-client's (tests compare them).
    """
    name = metric.name
    if metric.type != "gauge" or metric.unit or not NAME.match(name):
        return None
    lines: list[str] = []
    append = lines.append
    sorted_keys = _SORTED_KEYS
    try:
        for s in metric.samples:
            if s.name != name or s.timestamp is not None or s.exemplar is not None or s.native_histogram is not None:
                return None
            labels = s.labels
            if labels:
                names = tuple(labels)
                order = sorted_keys.get(names)
                if order is None:
                    if not all(NAME.match(k) for k in names):
                        return None
                    if len(sorted_keys) > 1024:
                        sorted_keys.clear()
                    order = sorted_keys[names] = tuple(sorted(names))
                ls = ",".join([f'{k}="{escape(labels[k])}"' for k in order])
                append(f"{name}{{{ls}}} {go_float(s.value)}\n")
            else:
                append(f"{name} {go_float(s.value)}\n")
    except (TypeError, ValueError):
        return None
    return "".join(lines)


def count_series(families: list[Metric]) -> int:
    """Samples in `families` (a `LineFamily` counts its lines without parsing them back)."""
    return sum(f.count if isinstance(f, LineFamily) else len(f.samples) for f in families)


def _help(doc: str, openmetrics: bool) -> str:
    doc = doc.replace("\\", "\\\\").replace("\n", "\\n")
    return doc.replace('"', '\\"') if openmetrics else doc


def _single(metric: Metric, openmetrics: bool) -> str:
    """One family through prometheus-client's encoder (without OpenMetrics' final ``# EOF``)."""
    text = encode_families([metric], openmetrics).decode("utf-8")
    return text.removesuffix("# EOF\n") if openmetrics else text


def encode_families(families: list[Metric], openmetrics: bool) -> bytes:
    """prometheus-client's own encoding: text 0.0.4, or OpenMetrics 1.0.0 ending with ``# EOF``."""
    if openmetrics:
        body: bytes = om_exposition.generate_latest(_FixedCollector(families))  # type: ignore[no-untyped-call]
        return body
    return exposition.generate_latest(_FixedCollector(families))


class Rendered:
    """One render of one snapshot: its families, their sample lines, and the encodings made so far."""

    __slots__ = ("_bodies", "_collect", "_families", "_gauges", "_pending", "mono", "seconds", "seq", "series")

    def __init__(
        self, seq: int, mono: float | None, families: list[Metric], collect: Callable[[], list[Metric]] | None = None
    ) -> None:
        """`collect` gives the same families again after `trim` dropped them (None: they are never dropped)."""
        self.seq = seq  # -1: rendered before the first snapshot
        self.mono = mono
        self._families: list[Metric] | None = families
        self._collect = collect
        self.series = count_series(families)
        self.seconds = 0.0  # collect + first encodings
        self._gauges: list[str | None] | None = None  # fast sample lines per family, shared by both formats
        self._bodies: dict[Variant, bytes] = {}
        self._pending: dict[Variant, concurrent.futures.Future[bytes]] = {}

    def body(self, variant: Variant) -> bytes | None:
        return self._bodies.get(variant)

    @property
    def families(self) -> list[Metric]:
        """The families, collected again if `trim` dropped them (worker thread)."""
        families = self._families
        if families is None:
            assert self._collect is not None  # dropped only when they can be had again
            families = self._families = self._collect()
        return families

    def encode(self, openmetrics: bool) -> bytes:
        """Uncompressed text or OpenMetrics of the families (worker thread; idempotent)."""
        if self._gauges is None:
            self._gauges = [None if isinstance(m, LineFamily) else _gauge_body(m) for m in self.families]
        # bytes family by family: one non-ASCII help text ("µs") would make a single joined str twice as wide
        # and its encoding a transcoding; the sample lines themselves are ASCII, so each family's is a copy
        out: list[bytes] = []
        for metric, lines in zip(self.families, self._gauges, strict=True):
            name = metric.name
            if isinstance(metric, LineFamily):
                out.append(f"# HELP {name} {_help(metric.documentation, openmetrics)}\n# TYPE {name} gauge\n".encode())
                out.append("".join(metric.lines).encode())
            elif lines is None:
                out.append(_single(metric, openmetrics).encode())
            else:
                out.append(f"# HELP {name} {_help(metric.documentation, openmetrics)}\n# TYPE {name} gauge\n".encode())
                out.append(lines.encode())
        if openmetrics:
            out.append(b"# EOF\n")
        return b"".join(out)

    def _encode(self, variant: Variant, gzip_level: int) -> bytes:
        """Worker thread only."""
        body = self._bodies.get(variant)
        if body is not None:
            return body
        openmetrics, compressed = variant
        if compressed:  # the uncompressed body is kept only when it was asked for itself
            plain = self._bodies.get((openmetrics, False)) or self.encode(openmetrics)
            body = gzip.compress(plain, compresslevel=gzip_level, mtime=0)
        else:
            body = self.encode(openmetrics)
        self._bodies[variant] = body
        return body

    def trim(self) -> None:
        """Drop the families and the sample lines shared by the formats once the asked-for bodies exist
        (each as large as an uncompressed body, and kept until the next render finished): a variant asked for
        later collects the families again (worker thread). Colo's own families keep their lines as they are:
        joining them into one string per family was measured to raise the agent's RSS (a few large blocks
        that outlive the render)."""
        self._gauges = None
        if self._collect is not None:
            self._families = None
