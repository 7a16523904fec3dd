"""Declared metric families: a family is declared once, as a module constant next to what it measures, with its
help text; a render adds samples to the declared families it uses (`Families`), in first-use order."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.metrics_core import GaugeMetricFamily, Metric


@dataclass(frozen=True, slots=True)
class Family:
    """A gauge family's name and help text (base units; the name says the unit)."""

    name: str
    help: str


class Families:
    """The gauge families of one render in first-use order; a family without samples is left out."""

    __slots__ = ("_by_name",)

    def __init__(self) -> None:
        self._by_name: dict[str, Metric] = {}

    def add(self, family: Family, labels: dict[str, str], value: float | None) -> None:
        """One sample; an unknown value (None) is left out rather than exported as 0 or NaN."""
        if value is None:
            return
        fam = self._by_name.get(family.name)
        if fam is None:
            fam = self._by_name[family.name] = GaugeMetricFamily(family.name, family.help)
        fam.add_sample(family.name, labels, float(value))

    def families(self) -> list[Metric]:
        return [fam for fam in self._by_name.values() if fam.samples]
