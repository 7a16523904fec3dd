"""The encoder's float fast path prints every value as prometheus-client does (Go's format): integers given
as ints, large and tiny values, infinities and NaN, negative values, label sets in any insertion order."""

from __future__ import annotations

import math

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from exporter.encoding import Rendered, encode_families

VALUES: tuple[float, ...] = (0.0, -0.0, 1.0, 0.1, 5e-324, 999999.5, 1e6, 1234567.0, 123456.789, 1.7179869184e10,
                             -1e7, -123456789.0, 2.5e-7, math.inf, -math.inf, math.nan, 1e21, 3.0e300)  # fmt: skip


def families() -> list[Metric]:
    g = GaugeMetricFamily("colo_test_values", "Values.", labels=["b", "a"])
    for i, v in enumerate(VALUES):
        g.add_metric([str(i), "x"], v)
    ints = GaugeMetricFamily("colo_test_ints", "Ints given as ints.", labels=["k"])
    for i, v in enumerate((0, 7, 10**6, 10**12, -3)):
        ints.add_metric([str(i)], v)
    mixed = GaugeMetricFamily("colo_test_order", "Same names, other insertion order.")
    mixed.add_sample("colo_test_order", {"z": "1", "a": "2", "m": "3"}, 1.5)
    mixed.add_sample("colo_test_order", {"a": "2", "m": "3", "z": "1"}, 2.5)
    return [g, ints, mixed]


def test_fast_path_prints_values_exactly_like_prometheus_client() -> None:
    fams = families()
    rendered = Rendered(1, None, fams)
    assert rendered.encode(False) == encode_families(fams, False)
    assert rendered.encode(True) == encode_families(fams, True)
