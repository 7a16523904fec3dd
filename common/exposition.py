"""Sample lines of the Prometheus text format for plain gauges, byte-identical to prometheus-client's.

A render of 250 pods is ~11,000 gauge samples. Going through prometheus-client costs a `Sample` with a label
dict per sample and, at encoding, a sort and an escape of every label of every sample (~4 us a line). Here a
sample line is one string made from a label text built once (for a pod, once per pod and shape) and the
value, formatted as prometheus-client formats it. `LineFamily` holds a family's lines, and is still a
prometheus-client `Metric` for everything else that reads families (its `samples` are parsed back from the
lines on demand; the tests compare both encoders).

For a gauge without unit, timestamps or exemplars, the sample lines are the same in text 0.0.4 and
OpenMetrics 1.0.0, so one set of lines serves both formats (`exporter.encoding`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

_lib_go_float: Callable[[float], str] = floatToGoString  # prometheus-client's float format, untyped there
#: legacy metric and label names (without ':', which OpenMetrics would rewrite)
NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = re.compile(r"\\(.)")
_GO_SPECIAL = {"+Inf": float("inf"), "-Inf": float("-inf"), "NaN": float("nan")}


def go_float(d: float) -> str:
    """prometheus-client's `floatToGoString`, without its work for the common cases: the same expressions for
    a finite float; bytes (an int from 10^6 to 2^53, exact as a float, whose repr is its digits and ".0")
    from their digits; infinities, NaN and other values (an int prints as a float) go to the library."""
    kind = type(d)
    if kind is float:
        s = repr(d)
        if d > 0:
            dot = s.find(".")
            if dot > 6:  # Go switches to an exponent from 10^6 up (repr is positional below 10^16)
                return (s[0] + "." + s[1:dot] + s[dot + 1 :]).rstrip("0.") + EXPONENT[dot]
        if "n" in s:  # inf, nan
            return _lib_go_float(d)
        return s
    if kind is int and 1_000_000 <= d < _EXACT:
        digits = str(d)
        return (digits[0] + "." + digits[1:] + "0").rstrip("0.") + EXPONENT[len(digits)]
    return _lib_go_float(d)


#: The exponent prometheus-client appends for a repr whose '.' is at index i (values from 10^6 to 10^16).
EXPONENT = {i: f"e+{i - 1:02d}" for i in range(7, 17)}
_EXACT = 1 << 53


def escape(value: str) -> str:
    """A label value as prometheus-client writes it (backslash, newline and double quote escaped)."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def label_text(labels: Mapping[str, str]) -> str:
    """The text between a sample's braces: ``k="v"`` pairs sorted by name, as prometheus-client orders them."""
    return ",".join([f'{k}="{escape(labels[k])}"' for k in sorted(labels)])


def sample_line(name: str, labels: str, value: float) -> str:
    """One sample line; `labels` is a `label_text` ("" for none)."""
    if labels:
        return f"{name}{{{labels}}} {go_float(value)}\n"
    return f"{name} {go_float(value)}\n"


class LabelShapes:
    """The label texts of one fixed label set (a pod's) with a few extra labels (a window, a container).

    `base` is the text of the set alone; `template(extra)` the text of the set plus the labels named in
    `extra` (sorted names), with a ``%s`` where each extra value goes, built once per shape: a line then
    costs one ``%`` instead of a sort and an escape of every label."""

    __slots__ = ("_around", "_pairs", "_templates", "base")

    def __init__(self, labels: Mapping[str, str]) -> None:
        self._pairs = sorted((k, escape(v)) for k, v in labels.items())
        self.base = ",".join([f'{k}="{v}"' for k, v in self._pairs])
        self._templates: dict[tuple[str, ...], str] = {}
        self._around: dict[str, tuple[str, str]] = {}

    def around(self, extra: str) -> tuple[str, str]:
        """The text with one extra label, split where its (escaped) value goes: ``before + value + after``."""
        parts = self._around.get(extra)
        if parts is None:
            if extra in {k for k, _ in self._pairs}:
                raise ValueError(f"extra label {extra} must be new")
            merged = sorted([*self._pairs, (extra, "")])
            i = merged.index((extra, ""))
            before = ",".join([*[f'{k}="{v}"' for k, v in merged[:i]], f'{extra}="'])
            after = '"' + "".join([f',{k}="{v}"' for k, v in merged[i + 1 :]])
            parts = self._around[extra] = (before, after)
        return parts

    def template(self, extra: tuple[str, ...]) -> str:
        """The text with the `extra` labels, each value a ``%s`` (pass them escaped, in `extra`'s order)."""
        text = self._templates.get(extra)
        if text is None:
            if list(extra) != sorted(extra) or {k for k, _ in self._pairs} & set(extra):
                raise ValueError(f"extra labels {extra} must be sorted and new")
            merged = sorted([(k, v.replace("%", "%%")) for k, v in self._pairs] + [(k, "%s") for k in extra])
            text = self._templates[extra] = ",".join([f'{k}="{v}"' for k, v in merged])
        return text


def _unescape(value: str) -> str:
    return _UNESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


class LineFamily(Metric):
    """A gauge family whose samples are kept as finished text lines (`lines`; a string may hold several).

    `count` is the number of samples. `samples` parses the lines back into prometheus-client samples, for
    readers other than the encoder (documentation, tests): never on the scrape path."""

    def __init__(self, name: str, documentation: str) -> None:
        super().__init__(name, documentation, "gauge")
        self.lines: list[str] = []
        self.count = 0

    @property
    def samples(self) -> list[Sample]:
        out: list[Sample] = []
        for line in "".join(self.lines).splitlines():
            head, _, value = line.rpartition(" ")
            brace = head.find("{")
            name, labels = (head, "") if brace < 0 else (head[:brace], head[brace + 1 : -1])
            parsed = {k: _unescape(v) for k, v in _LABEL.findall(labels)}
            out.append(Sample(name, parsed, _GO_SPECIAL.get(value) or float(value)))
        return out

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        if value:  # Metric.__init__ sets [] ; anything else would be lost
            raise AttributeError("a LineFamily's samples are its lines")
