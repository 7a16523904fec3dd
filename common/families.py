"""Declared metric families: a family is declared once, as a module constant next to what it measures, with its
help text (and, for a stage's families, its label names and kind); a render adds samples to the declared
families it uses (`Families`), in first-use order.

`Families` writes each sample straight to its text line (`common.exposition`): a caller that renders many
samples with the same labels (a pod's) builds their label text once and passes it to `add_text`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from common.exposition import LineFamily, go_float, label_text


@dataclass(frozen=True, slots=True)
class Family:
    """A family's name and help text (base units; the name says the unit); a stage's family also declares
    its label names and kind, and `metric` makes the prometheus-client family it fills."""

    name: str
    help: str
    labels: tuple[str, ...] = ()
    kind: Literal["gauge", "counter"] = "gauge"

    def metric(self) -> GaugeMetricFamily | CounterMetricFamily:
        """An empty prometheus-client family of this declaration (a stage's metric source fills it)."""
        if self.kind == "counter":
            return CounterMetricFamily(self.name, self.help, labels=list(self.labels))
        return GaugeMetricFamily(self.name, self.help, labels=list(self.labels))


class Families:
    """The gauge families of one render in first-use order; a family without samples is left out."""

    __slots__ = ("_by_name",)

    def __init__(self) -> None:
        self._by_name: dict[str, LineFamily] = {}

    def add(self, family: Family, labels: dict[str, str], value: float | None) -> None:
        """One sample; an unknown value (None) is left out rather than exported as 0 or NaN."""
        if value is None:
            return
        self.add_text(family, label_text(labels), value)

    def add_text(self, family: Family, labels: str, value: float | None) -> None:
        """One sample whose labels are already a `common.exposition.label_text`."""
        if value is None:
            return
        fam = self._by_name.get(family.name)
        if fam is None:
            fam = self._by_name[family.name] = LineFamily(family.name, family.help)
        name = family.name
        fam.lines.append(f"{name}{{{labels}}} {go_float(value)}\n" if labels else f"{name} {go_float(value)}\n")
        fam.count += 1

    def add_lines(self, family: Family, lines: list[str]) -> None:
        """Finished sample lines (`common.exposition.sample_line`), in bulk; the family takes its place in
        the order at the first call with lines, as if they had been added one by one."""
        if not lines:
            return
        fam = self._by_name.get(family.name)
        if fam is None:
            fam = self._by_name[family.name] = LineFamily(family.name, family.help)
        fam.lines.extend(lines)
        fam.count += len(lines)

    def families(self) -> list[Metric]:
        return [fam for fam in self._by_name.values() if fam.count]


class FamilyLines:
    """One family's sample lines of one render, added in bulk (`Families.add_lines`) when the render is done;
    `opening` is its name and brace, for a labelled sample."""

    __slots__ = ("family", "lines", "opening")

    def __init__(self, family: Family) -> None:
        self.family = family
        self.opening = family.name + "{"
        self.lines: list[str] = []


#: one labelled sample into a family's lines: (the lines, the label text, the value; None is left out)
PutLine = Callable[[FamilyLines, str, float | None], None]
