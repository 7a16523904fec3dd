"""The metric families of one snapshot: names, label sets, units, omissions, aggregates, stage sources."""

from __future__ import annotations

import math

import pytest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse

from agent.view import AgentView
from agent.windows.store import WINDOW_NAMES
from exporter.encoding import Rendered, encode_families
from exporter.snapshot_metrics import ColoCollector
from tests.test_exporter_fixtures import QUOTA, Parsed, container, feed, make_view, parse, pod, snapshot

POD_KEYS = {"namespace", "pod", "uid", "qos", "class"}


def render(collector: ColoCollector, view: AgentView, openmetrics: bool = False) -> str:
    fams = collector.collect_snapshot(view.snapshot)
    return Rendered(0, None, fams).encode(openmetrics).decode()


def scenario(view: AgentView, seconds: int = 400) -> None:
    """`seconds` ticks of a node with three pods (one standalone), with varying usage."""
    for i in range(seconds):
        pods = [
            pod("u1", "team-a", "web", qos="Guaranteed", cpu=0.5 + (i % 2) * 0.5, ws=1000, labels={QUOTA: "q1"}),
            pod(
                "u2",
                "team-a",
                "batch",
                qos="BestEffort",
                pod_class="offline",
                cpu=0.25,
                ws=3000,
                labels={QUOTA: "q2", "x": "y"},
            ),
            pod("u3", None, None, qos="burstable", pod_class="unknown", cpu=1.0, ws=500),
        ]
        feed(view, snapshot(i + 1, 100.0 + i, pods))


@pytest.fixture
def view() -> AgentView:
    v = make_view()
    scenario(v)
    return v


def test_every_family_with_its_label_set(view: AgentView) -> None:
    text = render(ColoCollector(view), view)
    m = parse(text)
    node_families = [
        "colo_node_cpu_capacity_cores",
        "colo_node_cpu_usage_cores",
        "colo_node_cpu_usage_ratio",
        "colo_node_memory_total_bytes",
        "colo_node_memory_used_bytes",
        "colo_node_memory_page_cache_bytes",
        "colo_node_memory_usage_ratio",
    ]
    for name in node_families:
        assert m.label_sets(name) == [{"node": "node-a"}], name
    assert {(s["resource"], s["kind"]) for s in m.label_sets("colo_node_pressure_ratio")} == {
        ("cpu", "some"),
        ("io", "some"),
        ("io", "full"),
    }
    for fam in ("colo_node_window_ratio", "colo_node_window_coverage_ratio"):
        sets = m.label_sets(fam)
        assert {(s["resource"], s["window"]) for s in sets} == {(r, w) for r in ("cpu", "memory") for w in WINDOW_NAMES}
        assert all(set(s) == {"node", "resource", "window"} for s in sets)
    for fam in ("colo_node_network_receive_bytes_per_second", "colo_node_network_transmit_bytes_per_second"):
        assert sorted(s["interface"] for s in m.label_sets(fam)) == ["eth0", "eth1", "total"]  # cni0 is virtual
    for gauge in ("cpu_usage_avg_5m", "cpu_usage_max_avg_1h", "cpu_usage_max_avg_1d"):
        assert m.label_sets(gauge) == [{"node": "node-a"}]
    for gauge in ("mem_usage_avg_5m", "mem_usage_max_avg_1h", "mem_usage_max_avg_1d"):
        assert m.label_sets(gauge) == [{"node": "node-a"}]
    assert m.label_sets("colo_qos_cpu_usage_cores") == [{"qos": "burstable"}]  # besteffort's cpu is unknown
    assert sorted(s["qos"] for s in m.label_sets("colo_qos_memory_working_set_bytes")) == ["besteffort", "burstable"]

    for fam in (
        "colo_pod_cpu_usage_cores",
        "colo_pod_memory_working_set_bytes",
        "colo_pod_memory_anon_bytes",
        "colo_pod_cpu_throttled_ratio",
    ):
        sets = m.label_sets(fam)
        assert len(sets) == 3 and all(set(s) == POD_KEYS for s in sets), fam
    assert {s["resource"] + "/" + s["kind"] for s in m.label_sets("colo_pod_pressure_ratio")} == {
        "cpu/some",
        "cpu/full",
        "memory/some",
    }
    for fam in ("colo_pod_cpu_window_cores", "colo_pod_memory_window_bytes"):
        sets = m.label_sets(fam)
        assert all(set(s) == POD_KEYS | {"window"} for s in sets)
        assert {s["window"] for s in sets} == set(WINDOW_NAMES)
        assert len(sets) == 3 * len(WINDOW_NAMES)
    for fam in (
        "colo_container_cpu_usage_cores",
        "colo_container_memory_working_set_bytes",
        "colo_container_cpu_throttled_ratio",
    ):
        sets = m.label_sets(fam)
        assert len(sets) == 6 and all(set(s) == POD_KEYS | {"container"} for s in sets), fam
    assert {s["container"] for s in m.label_sets("colo_container_cpu_usage_cores")} == {
        f"{u}-c{i}" for u in ("u1", "u2", "u3") for i in (0, 1)
    }
    assert m.label_sets("colo_namespace_cpu_usage_cores") == [{"namespace": "team-a"}]
    assert m.label_sets("colo_namespace_memory_working_set_bytes") == [{"namespace": "team-a"}]
    for fam in ("colo_label_cpu_usage_cores", "colo_label_memory_working_set_bytes"):
        assert sorted((s["label_key"], s["label_value"]) for s in m.label_sets(fam)) == [(QUOTA, "q1"), (QUOTA, "q2")]
    for fam in ("colo_agent_sample_duration_seconds", "colo_agent_snapshot_seq", "colo_agent_pods"):
        assert m.label_sets(fam) == [{}]
    assert all(t == "gauge" for t in m.types.values())


def test_values_in_base_units(view: AgentView) -> None:
    m = parse(render(ColoCollector(view), view))
    assert m.one("colo_node_cpu_capacity_cores") == 8.0
    assert m.one("colo_node_cpu_usage_cores") == 2.0
    assert m.one("colo_node_cpu_usage_ratio") == 0.25
    assert m.one("colo_node_memory_total_bytes") == 16 << 30
    assert m.one("colo_node_memory_used_bytes") == 4 << 30
    assert m.one("colo_node_memory_usage_ratio") == 0.25
    assert m.one("colo_node_memory_page_cache_bytes") == 1 << 30
    assert m.one("colo_node_pressure_ratio", resource="io", kind="full") == 0.125
    assert m.one("colo_node_network_receive_bytes_per_second", interface="total") == 1010.0
    assert m.one("colo_node_network_transmit_bytes_per_second", interface="eth0") == 2000.0
    assert m.one("colo_node_window_ratio", resource="cpu", window="avg_1m") == pytest.approx(0.25)
    assert m.one("colo_node_window_coverage_ratio", resource="cpu", window="avg_5m") == pytest.approx(1.0)
    assert m.one("colo_node_window_coverage_ratio", resource="cpu", window="p50_1h") < 0.2  # ~400 s of an hour

    web = {"namespace": "team-a", "pod": "web", "uid": "u1", "qos": "guaranteed", "class": "online"}
    assert m.one("colo_pod_cpu_usage_cores", **web) == 1.0  # last tick (i=399 is odd)
    assert m.one("colo_pod_memory_working_set_bytes", **web) == 1000
    assert m.one("colo_pod_memory_anon_bytes", **web) == 600
    assert m.one("colo_pod_cpu_throttled_ratio", **web) == 0.1
    assert m.one("colo_pod_pressure_ratio", uid="u1", resource="cpu", kind="full") == 0.125
    assert m.one("colo_pod_cpu_window_cores", uid="u1", window="avg_5m") == pytest.approx(0.75)
    assert m.one("colo_pod_cpu_window_cores", uid="u1", window="p99_5m") == pytest.approx(1.0)
    assert m.one("colo_pod_memory_window_bytes", uid="u2", window="max_avg_1h") == pytest.approx(3000)
    assert m.one("colo_pod_cpu_usage_cores", uid="u2") == 0.25
    assert m.one("colo_pod_cpu_usage_cores", uid="u2", qos="besteffort", **{"class": "offline"}) == 0.25
    standalone = m.one("colo_pod_cpu_usage_cores", uid="u3", namespace="", pod="", qos="burstable")
    assert standalone == 1.0
    assert m.one("colo_container_cpu_usage_cores", container="u1-c1", uid="u1", pod="web") == 0.1
    assert m.one("colo_container_memory_working_set_bytes", container="u2-c0") == 100
    assert m.one("colo_container_cpu_throttled_ratio", container="u3-c0") == 0.05

    assert m.one("colo_qos_cpu_usage_cores", qos="burstable") == 1.5
    assert m.one("colo_qos_memory_working_set_bytes", qos="besteffort") == 500
    assert m.one("colo_namespace_cpu_usage_cores", namespace="team-a") == 1.25  # standalone u3 excluded
    assert m.one("colo_namespace_memory_working_set_bytes", namespace="team-a") == 4000
    assert m.one("colo_label_cpu_usage_cores", label_value="q2") == 0.25
    assert m.one("colo_label_memory_working_set_bytes", label_value="q1") == 1000
    assert m.one("colo_agent_sample_duration_seconds") == 0.0125
    assert m.one("colo_agent_snapshot_seq") == 400
    assert m.one("colo_agent_pods") == 3


def test_crane_gauges_are_percent_of_the_node_windows(view: AgentView) -> None:
    m = parse(render(ColoCollector(view), view))
    snap = view.snapshot
    assert snap is not None
    for gauge, res, window in (
        ("cpu_usage_avg_5m", "cpu", "avg_5m"),
        ("cpu_usage_max_avg_1h", "cpu", "max_avg_1h"),
        ("cpu_usage_max_avg_1d", "cpu", "max_avg_1d"),
        ("mem_usage_avg_5m", "memory", "avg_5m"),
        ("mem_usage_max_avg_1h", "memory", "max_avg_1h"),
        ("mem_usage_max_avg_1d", "memory", "max_avg_1d"),
    ):
        ratio = view.windows.value(("node", "", res), window, snap.mono).value
        assert ratio is not None
        assert m.one(gauge, node="node-a") == pytest.approx(ratio * 100.0)
        assert m.one("colo_node_window_ratio", resource=res, window=window) == pytest.approx(ratio)
    assert m.one("cpu_usage_avg_5m") == pytest.approx(25.0)
    assert m.one("mem_usage_avg_5m") == pytest.approx(25.0)


def test_windows_without_value_are_left_out() -> None:
    view = make_view()
    feed(view, snapshot(1, 10.0, [pod("u1")], node=None), publish=False)
    view.windows.retain(lambda key: key[0] != "node")  # the node has no samples at all
    view.publish(snapshot(1, 10.0, [pod("u1", cpu=None)]))
    m = parse(render(ColoCollector(view), view))
    for gauge in ("cpu_usage_avg_5m", "cpu_usage_max_avg_1h", "cpu_usage_max_avg_1d", "mem_usage_avg_5m"):
        assert gauge not in m.samples
    assert "colo_node_window_ratio" not in m.samples
    assert m.one("colo_node_window_coverage_ratio", resource="cpu", window="avg_1m") == 0.0
    # a 1-minute-old series has no completed 5-minute boundary yet: max_avg_1h has no value
    assert {s["window"] for s in m.label_sets("colo_pod_cpu_window_cores")} == {
        w for w in WINDOW_NAMES if not w.startswith("max_avg") and not w.endswith("_1h")
    }
    assert "colo_pod_cpu_usage_cores" not in m.samples  # cpu unknown on the first sample
    assert m.one("colo_pod_memory_working_set_bytes", uid="u1") == 1000


def test_vanished_pods_leave_the_output() -> None:
    view = make_view()
    collector = ColoCollector(view)
    feed(view, snapshot(1, 10.0, [pod("u1"), pod("gone")]))
    m = parse(render(collector, view))
    assert {s["uid"] for s in m.label_sets("colo_pod_cpu_usage_cores")} == {"u1", "gone"}
    feed(view, snapshot(2, 11.0, [pod("u1")]))
    text = render(collector, view)
    assert 'uid="gone"' not in text
    assert parse(text).one("colo_agent_pods") == 1


def test_custom_label_keys_and_pod_windows() -> None:
    view = make_view()
    feed(view, snapshot(1, 10.0, [pod("u1", labels={"team": "red", QUOTA: "q"}), pod("u2", labels={"team": "red"})]))
    collector = ColoCollector(view, label_keys=("team", "absent"), pod_windows=("avg_1m",))
    m = parse(render(collector, view))
    assert m.label_sets("colo_label_cpu_usage_cores") == [{"label_key": "team", "label_value": "red"}]
    assert m.one("colo_label_memory_working_set_bytes", label_value="red") == 2000
    assert {s["window"] for s in m.label_sets("colo_pod_memory_window_bytes")} == {"avg_1m"}
    with pytest.raises(ValueError):
        ColoCollector(view, pod_windows=("avg_2m",))


def test_node_label_defaults_to_hostname() -> None:
    import socket

    view = make_view(node_name=None)
    feed(view, snapshot(1, 10.0, []))
    assert parse(render(ColoCollector(view), view)).label_sets("cpu_usage_avg_5m") == [{"node": socket.gethostname()}]


def test_stage_metric_sources_are_appended_and_isolated(view: AgentView) -> None:
    def good() -> list[Metric]:
        g = GaugeMetricFamily("colo_capacity_allocatable_cores", "Stage gauge.", labels=["class"])
        g.add_metric(["offline"], 3.5)
        c = CounterMetricFamily("colo_enforcement_actions", "Stage counter.", labels=["action"])
        c.add_metric(["throttle"], 7)
        return [g, c]

    def broken() -> list[Metric]:
        raise RuntimeError("stage bug")

    def clashing() -> list[Metric]:
        return [GaugeMetricFamily("colo_agent_pods", "Impostor.", value=99)]

    view.metric_sources.update({"capacity": good, "broken": broken, "clash": clashing})
    collector = ColoCollector(view)
    m = parse(render(collector, view))
    assert m.one("colo_capacity_allocatable_cores", **{"class": "offline"}) == 3.5
    assert m.one("colo_enforcement_actions_total", action="throttle") == 7
    assert m.one("colo_agent_pods") == 3  # the clashing family was skipped
    assert m.one("colo_agent_metric_source_errors_total", source="broken") == 1
    assert m.one("colo_agent_metric_source_errors_total", source="clash") == 1


def test_before_the_first_snapshot_only_stage_families() -> None:
    view = make_view()
    view.metric_sources["s"] = lambda: [GaugeMetricFamily("colo_stage_up", "Stage.", value=1)]
    m = parse(render(ColoCollector(view), view))
    assert set(m.samples) == {"colo_stage_up"}


def test_fast_encoding_is_byte_identical_to_prometheus_client(view: AgentView) -> None:
    """The gauge fast path must produce exactly prometheus-client's text and OpenMetrics."""
    tricky = pod("u9", 'ns"q', "name\\with\nnewline", labels={QUOTA: 'v"1\\'})
    feed(view, snapshot(401, 500.0, [*view.snapshot.pods.values(), tricky]))  # type: ignore[union-attr]

    def extra() -> list[Metric]:
        h = HistogramMetricFamily("colo_stage_latency_seconds", 'Help with "quotes" and \\.', labels=["op"])
        h.add_metric(["read"], buckets=[("0.1", 2.0), ("+Inf", 3.0)], sum_value=0.5)
        g = GaugeMetricFamily("colo:recorded", "Colon name.", value=math.inf)  # ':' takes the general path
        return [h, g, GaugeMetricFamily("colo_stage_nan", "NaN.", value=math.nan)]

    view.metric_sources["extra"] = extra
    fams = ColoCollector(view).collect_snapshot(view.snapshot)
    rendered = Rendered(1, None, fams)
    text, om = rendered.encode(False), rendered.encode(True)
    assert text == encode_families(fams, False)
    assert om == encode_families(fams, True)
    assert om.endswith(b"# EOF\n")
    parsed = parse(text.decode())
    assert parsed.one("colo_pod_cpu_usage_cores", uid="u9", namespace='ns"q', pod="name\\with\nnewline") == 0.5
    assert {f.name for f in om_parse(om.decode())} >= {"colo_pod_cpu_usage_cores", "colo_stage_latency_seconds"}  # type: ignore[no-untyped-call]


def test_output_is_valid_exposition_with_thousands_of_series() -> None:
    view = make_view()
    pods = [pod(f"u{i}", f"ns{i % 7}", containers=tuple(container(f"u{i}-c{c}") for c in range(3))) for i in range(100)]
    for t in range(120):
        feed(view, snapshot(t + 1, 10.0 + t, pods))
    text = render(ColoCollector(view), view)
    m: Parsed = parse(text)
    series = sum(len(v) for v in m.samples.values())
    assert series > 3000
    assert len(m.label_sets("colo_container_cpu_usage_cores")) == 300
