"""The pods' series written as text lines (exporter.pod_lines, common.exposition) against prometheus-client.

The reference is the plain way: every sample added one by one to prometheus-client families with a label
dict, families in first-use order, encoded by prometheus-client. The bytes must be the same, whatever pod
comes first (one without CPU windows yet, a container without CPU), whatever the label values hold
(quotes, backslashes, newlines, percent signs), and a warm writer (label texts and long-window values kept
from earlier renders) must write what a new one writes.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from agent.sense.collectors import containers, disk, pod_network, pods, psi
from agent.snapshot import DiskRates, NetworkRates, PodSample, Pressure, Snapshot
from agent.view import AgentView
from common.exposition import LabelShapes, LineFamily, go_float, label_text
from common.families import Families, Family
from contract.windows import WINDOW_NAMES
from exporter.encoding import Rendered, encode_families
from exporter.pod_lines import PodLines, pod_labels
from exporter.snapshot_metrics import ColoCollector, pod_order
from exporter.stats import POD_CPU_WINDOW, POD_MEMORY_WINDOW, WindowSet, WindowStatsCache
from tests.test_exporter_fixtures import container, feed, make_view, pod, snapshot


class Reference:
    """First-use ordered prometheus-client families, one sample at a time (what the render must equal)."""

    def __init__(self) -> None:
        self.by_name: dict[str, GaugeMetricFamily] = {}

    def add(self, family: Family, labels: dict[str, str], value: float | None) -> None:
        if value is None:
            return
        fam = self.by_name.get(family.name)
        if fam is None:
            fam = self.by_name[family.name] = GaugeMetricFamily(family.name, family.help)
        fam.add_sample(family.name, labels, float(value))

    def families(self) -> list[Metric]:
        return list(self.by_name.values())


def reference_pods(ordered: Sequence[PodSample], windows: dict[str, dict[str, WindowSet]]) -> list[Metric]:
    ref = Reference()
    for p in ordered:
        pl = pod_labels(p)
        ref.add(pods.CPU_USAGE, pl, p.cpu_cores)
        ref.add(pods.WORKING_SET, pl, p.memory_working_set_bytes)
        ref.add(pods.ANON, pl, p.memory_anon_bytes)
        ref.add(pods.THROTTLED, pl, p.cpu_throttled_ratio)
        for res, pr in sorted(p.pressure.items()):
            ref.add(psi.PRESSURE, {**pl, "resource": res, "kind": "some"}, pr.some_avg10)
            ref.add(psi.PRESSURE, {**pl, "resource": res, "kind": "full"}, pr.full_avg10)
        if p.network is not None and not p.network.host_network:
            ref.add(pod_network.RECEIVE, pl, p.network.rx_bytes_per_second)
            ref.add(pod_network.TRANSMIT, pl, p.network.tx_bytes_per_second)
        for device, r in sorted((p.disk or {}).items()):
            dl = {**pl, "device": device}
            ref.add(disk.POD_READ, dl, r.read_bytes_per_second)
            ref.add(disk.POD_WRITE, dl, r.write_bytes_per_second)
            ref.add(disk.POD_READS, dl, r.reads_per_second)
            ref.add(disk.POD_WRITES, dl, r.writes_per_second)
        pw = windows.get(p.uid)
        if pw is not None:
            for name in WINDOW_NAMES:
                ref.add(POD_CPU_WINDOW, {**pl, "window": name}, pw["cpu"][name].value)
                ref.add(POD_MEMORY_WINDOW, {**pl, "window": name}, pw["memory"][name].value)
        for c in p.containers:
            cl = {**pl, "container": c.id}
            ref.add(containers.CPU_USAGE, cl, c.cpu_cores)
            ref.add(containers.WORKING_SET, cl, c.memory_working_set_bytes)
            ref.add(containers.THROTTLED, cl, c.cpu_throttled_ratio)
    return ref.families()


def written(writer: PodLines, ordered: Sequence[PodSample], windows: dict[str, dict[str, WindowSet]]) -> list[Metric]:
    f = Families()
    writer.write(f, ordered, windows)
    return f.families()


def assert_same_bytes(got: list[Metric], want: list[Metric]) -> None:
    assert [m.name for m in got] == [m.name for m in want]
    for openmetrics in (False, True):
        assert Rendered(0, None, got).encode(openmetrics) == encode_families(want, openmetrics)


def odd_pods(rng: random.Random, n: int, first: int = 0) -> list[PodSample]:
    out = []
    for i in range(first, first + n):
        cs = tuple(
            container(f'c"{i}-{c}%s\\', cpu=rng.choice((None, 0.25, 1e-7)), ws=rng.choice((0, 5 << 20, 1 << 40)),
                      thr=rng.choice((None, 0.0, -0.0)))
            for c in range(rng.randrange(0, 3))
        )  # fmt: skip
        p = pod(
            f"u{i:03d}",
            rng.choice((None, "ns-a", 'ns"q', "n\\s\nx")),
            rng.choice((None, f"p{i}", "%s%d")),
            qos=rng.choice(("Guaranteed", "best-effort", "Burstable")),
            pod_class=rng.choice(("online", "offline", "unknown")),
            cpu=rng.choice((None, 0.5, 123456789.0)),
            ws=rng.choice((0, 999_999, 1_000_000, 3 << 30)),
            throttled=rng.choice((None, 0.125)),
            containers=cs,
            pressure=rng.choice(({}, {"cpu": Pressure(0.25, None), "io": Pressure(math.inf, 0.5)})),
        )
        if rng.random() < 0.3:
            p.network = NetworkRates(rng.choice((None, 1.5e3)), 2.5e9)
        if rng.random() < 0.3:
            p.disk = {"8:0": DiskRates(1.0, None, 3e6, 0.5), "253:1": DiskRates(None, None, None, None)}
        out.append(p)
    return out


def fed_view(pod_list: list[PodSample], seconds: int, start: float = 1000.0) -> tuple[AgentView, Snapshot]:
    view = make_view()
    snap = snapshot(0, start, pod_list)
    for t in range(seconds):
        snap = snapshot(t + 1, start + t, pod_list)
        feed(view, snap)
    return view, snap


@pytest.mark.parametrize("seed", range(6))
def test_pods_written_as_prometheus_client_writes_them(seed: int) -> None:
    rng = random.Random(seed)
    pod_list = odd_pods(rng, 12)
    view, snap = fed_view(pod_list, 90)
    # windows for some pods only, and for some a memory series without a CPU one (the first tick of a pod)
    windows = dict(WindowStatsCache(view).get(snap).pods)
    for uid in rng.sample(sorted(windows), 4):
        del windows[uid]
    ordered = sorted(snap.pods.values(), key=pod_order)
    assert_same_bytes(written(PodLines(WINDOW_NAMES), ordered, windows), reference_pods(ordered, windows))


def test_a_pod_with_memory_windows_only_comes_first() -> None:
    """The first pod has memory windows and no CPU ones: the memory family comes first, as it would."""
    first = pod("a", "ns", cpu=None, containers=(container("a-c", cpu=None),))
    second = pod("b", "ns")
    view, snap = fed_view([first, second], 30)
    windows = WindowStatsCache(view).get(snap).pods
    ordered = sorted(snap.pods.values(), key=pod_order)
    got = written(PodLines(WINDOW_NAMES), ordered, windows)
    names = [m.name for m in got]
    assert names.index(POD_MEMORY_WINDOW.name) < names.index(POD_CPU_WINDOW.name)
    assert names.index(containers.WORKING_SET.name) < names.index(containers.CPU_USAGE.name)
    assert_same_bytes(got, reference_pods(ordered, windows))


def test_a_warm_collector_renders_what_a_new_one_renders() -> None:
    """Minute after minute (the long windows' values are kept between renders), pods coming and going."""
    rng = random.Random(9)
    pod_list = odd_pods(rng, 8)
    view = make_view()
    warm = ColoCollector(view)
    for t in range(400):
        if t % 97 == 0:  # a pod leaves, another arrives, and one keeps its uid with other labels
            pod_list = pod_list[1:] + odd_pods(rng, 1, first=100 + t)
            pod_list[0] = odd_pods(rng, 1, first=int(pod_list[0].uid[1:]))[0]
        snap = snapshot(t + 1, 1000.0 + t, pod_list)
        feed(view, snap)
        if t % 15 == 0:
            fresh = ColoCollector(view)
            assert Rendered(0, None, warm.collect_snapshot(snap)).encode(False) == Rendered(
                0, None, fresh.collect_snapshot(snap)
            ).encode(False), f"second {t}"


def test_values_print_as_prometheus_client_prints_them() -> None:
    rng = random.Random(1)
    floats = [0.0, -0.0, 1e6, 999999.5, 1e16, 1.5e16, 2.0**53, 5e-324, -1e7, math.inf, -math.inf, math.nan]
    floats += [rng.random() * 10 ** rng.randrange(-12, 20) * rng.choice((1, -1)) for _ in range(20000)]
    for v in floats:
        assert go_float(v) == floatToGoString(v), v
    ints = [0, -3, 999_999, 10**6, 10**12, 2**53 - 1, 2**53, 2**53 + 1, 10**17]
    ints += [rng.randrange(0, 1 << 60) for _ in range(20000)]
    for i in ints:
        assert go_float(i) == floatToGoString(i), i
    f = Families()
    for v in [*floats[:50], *ints[:50]]:
        f.add(pods.CPU_USAGE, {"uid": "u"}, v)
    ref = Reference()
    for v in [*floats[:50], *ints[:50]]:
        ref.add(pods.CPU_USAGE, {"uid": "u"}, v)
    assert_same_bytes(f.families(), ref.families())


def test_label_shapes_and_parsed_samples() -> None:
    labels = {"uid": 'u"1', "class": "a\\b", "pod": "p%s\n", "namespace": "n"}
    shapes = LabelShapes(labels)
    assert shapes.base == label_text(labels)
    extra = {"kind": "some", "resource": 'c"pu', "window": "avg_1m", "container": "x%dy"}
    assert shapes.template(("kind", "resource")) % ("some", 'c\\"pu') == label_text(
        {**labels, "kind": "some", "resource": 'c"pu'}
    )
    before, after = shapes.around("container")
    assert before + "x%dy" + after == label_text({**labels, "container": extra["container"]})
    with pytest.raises(ValueError):
        shapes.template(("resource", "kind"))
    with pytest.raises(ValueError):
        shapes.around("uid")
    fam = LineFamily("colo_x", "X.")
    fam.lines.append(f"colo_x{{{shapes.base}}} 1.5e+06\n")
    fam.lines.append("colo_x +Inf\n")
    fam.count = 2
    assert [(s.name, s.labels, s.value) for s in fam.samples] == [("colo_x", labels, 1.5e6), ("colo_x", {}, math.inf)]
