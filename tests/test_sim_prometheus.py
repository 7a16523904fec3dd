"""colo-sim's Prometheus source against a real Prometheus (Debian's `prometheus` package) on loopback.

The suite writes known cAdvisor and kube-state-metrics series as OpenMetrics text, turns them into TSDB blocks
with `promtool tsdb create-blocks-from openmetrics`, starts `prometheus` on them, and reads them back through
`colo_sim.prometheus`: the samples must be the ones the series were built from, exactly, and the same after a
trip through a CSV file. Scrapes are every 60 s at a 30 s offset from the 300 s steps (real scrapes are not
aligned to query steps); counters grow at a constant dyadic rate within each step, so rate() (with its
extrapolation to the window's edges) gives back exactly the intended cores.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import colo_sim.trace
from colo_sim.prometheus import (
    ALLOCATABLE_QUERY,
    QUERIES,
    PrometheusError,
    parse_duration,
    promql,
    query_range,
    read_allocatable,
    read_prometheus,
)
from colo_sim.trace import Sample
from colo_sim.trace_writer import write_csv
from testsupport.prometheus_server import binaries, free_port, prometheus_server

STEP = 300
SCRAPE = 60
OFFSET = 30  # scrapes fall 30 s after each minute of the step grid
STEPS = 12  # one hour of data
MiB = 1 << 20


@dataclass
class Pod:
    """A pod of the fixture: per container, its cores and peak memory at step k (1..STEPS)."""

    node: str
    namespace: str
    name: str
    containers: dict[str, tuple[float, float]]  # container -> (cores per step unit, MiB per step unit)
    cpu_request: dict[str, float] = field(default_factory=dict)  # container -> cores (none: BestEffort)
    memory_request: dict[str, float] = field(default_factory=dict)  # container -> bytes
    first_step: int = 1
    node_label: bool = True  # whether the cAdvisor scrape config adds `node` (only for some nodes, as in life)
    scraped_twice: bool = False  # a second cAdvisor job and a second kube-state-metrics: counted once
    moves: tuple[int, str] | None = None  # (step, node): re-created there from that step on (a new uid and cgroup)

    def incarnations(self) -> list[tuple[str, str, list[int]]]:
        """(node, uid, steps) of each life of the pod."""
        live = list(range(self.first_step, STEPS + 1))
        if self.moves is None:
            return [(self.node, f"uid-{self.name}", live)]
        at, node = self.moves
        return [(self.node, f"uid-{self.name}", [k for k in live if k < at]),
                (node, f"uid-{self.name}-2", [k for k in live if k >= at])]  # fmt: skip

    def node_at(self, k: int) -> str:
        return next(node for node, _, steps in self.incarnations() if k in steps)

    def cores(self, container: str, k: int) -> float:
        return self.containers[container][0] * (k % 4 + 1)  # dyadic multiples: exact through rate()

    def peak_bytes(self, container: str, k: int) -> float:
        return self.containers[container][1] * MiB * (k % 3 + 1)


PODS = [
    Pod("node-a", "shop", "web-0", {"app": (0.125, 64.0), "sidecar": (0.0625, 16.0)},
        cpu_request={"app": 0.5, "sidecar": 0.25}, memory_request={"app": 256.0 * MiB, "sidecar": 64.0 * MiB}),
    Pod("node-a", "batch", "besteffort-1", {"work": (0.25, 128.0)}),  # no request series: BestEffort
    Pod("node-b", "shop", "db-0", {"postgres": (0.5, 1024.0)}, cpu_request={"postgres": 2.0},
        memory_request={"postgres": 4096.0 * MiB}, node_label=False, scraped_twice=True),
    Pod("node-b", "kube-system", "late-2", {"agent": (0.03125, 32.0)}, cpu_request={"agent": 0.125},
        memory_request={"agent": 64.0 * MiB}, first_step=6, node_label=False),
    Pod("node-a", "jobs", "mover-3", {"main": (0.5, 256.0)}, cpu_request={"main": 1.0},
        memory_request={"main": 512.0 * MiB}, moves=(7, "node-b")),
]  # fmt: skip


#: (node, resource, unit, value at step k): node-b's CPU grows at step 7 (a resize); node-c reports no memory.
ALLOCATABLE_SERIES: list[tuple[str, str, str, Callable[[int], float]]] = [
    ("node-a", "cpu", "core", lambda k: 4.0),
    ("node-a", "memory", "byte", lambda k: 16.0 * 1024 * MiB),
    ("node-b", "cpu", "core", lambda k: 7.5 if k < 7 else 8.0),
    ("node-b", "memory", "byte", lambda k: 32.0 * 1024 * MiB),
    ("node-c", "cpu", "core", lambda k: 2.0),
]


def scrape_times(base: int, k: int) -> list[int]:
    """The five scrape times inside step k, i.e. in (base + STEP*(k-1), base + STEP*k]."""
    start = base + STEP * (k - 1)
    return [start + OFFSET + SCRAPE * j for j in range(STEP // SCRAPE)]


def openmetrics(base: int, *, kube_state_metrics: bool = True) -> str:
    """The fixture's series from `base` on, in OpenMetrics text (one family at a time, each series in order)."""
    families: dict[str, list[str]] = {
        "container_cpu_usage_seconds": [],
        "container_memory_working_set_bytes": [],
        "kube_pod_container_resource_requests": [],
        "kube_pod_info": [],
        "kube_node_status_allocatable": [],
    }
    cpu, memory = families["container_cpu_usage_seconds"], families["container_memory_working_set_bytes"]
    requests, info = families["kube_pod_container_resource_requests"], families["kube_pod_info"]
    steps = range(1, STEPS + 1)
    lives = [(pod, *life) for pod in PODS for life in pod.incarnations()]
    for pod, on, uid, live in lives:
        jobs = ["kubelet", "cadvisor"] if pod.scraped_twice else ["kubelet"]
        node = f',node="{on}"' if pod.node_label else ""
        for job in jobs:
            for c in pod.containers:
                labels = (f'namespace="{pod.namespace}",pod="{pod.name}",container="{c}",'
                          f'id="/kubepods/pod{uid}/{c}",image="img/{c}",job="{job}"{node}')  # fmt: skip
                counter = 1000.0
                for k in live:
                    for j, t in enumerate(scrape_times(base, k)):
                        value = counter + pod.cores(c, k) * (OFFSET + SCRAPE * j)
                        cpu.append(f"container_cpu_usage_seconds_total{{{labels}}} {value!r} {t}")
                    counter += pod.cores(c, k) * STEP
                for k in live:
                    for j, t in enumerate(scrape_times(base, k)):  # the peak first, then lower
                        value = pod.peak_bytes(c, k) - 4096.0 * j
                        memory.append(f"container_memory_working_set_bytes{{{labels}}} {value!r} {t}")
            # Not containers: the pod's own cgroup (container="") and the pause container: never counted.
            for decoy in ("", "POD"):
                labels = f'namespace="{pod.namespace}",pod="{pod.name}",container="{decoy}",id="/kubepods/pod{uid}{decoy}",job="{job}"{node}'
                for i, t in enumerate(t for k in live for t in scrape_times(base, k)):
                    cpu.append(f"container_cpu_usage_seconds_total{{{labels}}} {1e6 + 100.0 * i!r} {t}")
                    memory.append(f"container_memory_working_set_bytes{{{labels}}} {1e12!r} {t}")
        if not kube_state_metrics:
            continue
        for ksm in ["ksm-0", "ksm-1"] if pod.scraped_twice else ["ksm-0"]:
            times = [t for k in live for t in scrape_times(base, k)]
            pod_labels = f'namespace="{pod.namespace}",pod="{pod.name}",instance="{ksm}"'
            for resource, unit, values in (("cpu", "core", pod.cpu_request), ("memory", "byte", pod.memory_request)):
                for c, v in values.items():
                    labels = f'{pod_labels},container="{c}",node="{on}",resource="{resource}",unit="{unit}"'
                    requests.extend(f"kube_pod_container_resource_requests{{{labels}}} {v!r} {t}" for t in times)
            labels = f'{pod_labels},node="{on}",uid="{uid}",host_ip="10.0.0.1"'
            info.extend(f"kube_pod_info{{{labels}}} 1.0 {t}" for t in times)
    # A pod kube-state-metrics knows but cAdvisor never saw running: not in the samples.
    if kube_state_metrics:
        allocatable = families["kube_node_status_allocatable"]
        for node, resource, unit, at_step in ALLOCATABLE_SERIES:
            labels = f'node="{node}",resource="{resource}",unit="{unit}"'
            allocatable.extend(f"kube_node_status_allocatable{{{labels}}} {at_step(k)!r} {t}"
                               for k in steps for t in scrape_times(base, k))  # fmt: skip
        info.extend(f'kube_pod_info{{namespace="shop",pod="pending-9",node="node-b"}} 1.0 {t}'
                    for k in steps for t in scrape_times(base, k))  # fmt: skip
    types = {"container_cpu_usage_seconds": "counter"}
    lines: list[str] = []
    for name, samples in families.items():
        if samples:
            lines.append(f"# TYPE {name} {types.get(name, 'gauge')}")
            lines.extend(samples)
    return "\n".join([*lines, "# EOF", ""])


def expected_samples(base: int) -> list[Sample]:
    """What the fixture's series mean: one sample per pod and step, at the step's end."""
    out = [
        Sample(pod.node_at(k), f"{pod.namespace}/{pod.name}", float(base + STEP * k), sum(pod.cpu_request.values()),
               sum(pod.cores(c, k) for c in pod.containers), sum(pod.memory_request.values()),
               sum(pod.peak_bytes(c, k) for c in pod.containers))
        for pod in PODS for k in range(pod.first_step, STEPS + 1)
    ]  # fmt: skip
    return sorted(out, key=lambda s: (s.node, s.pod, s.unix_s))


@dataclass(frozen=True)
class Server:
    url: str
    base: int  # the first step starts here; the steps end at base + STEP*k, k = 1..STEPS
    bare_base: int  # an hour of cAdvisor series only (no kube-state-metrics) starts here


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real Prometheus on loopback serving the fixture's series two days ago (blocks well before its head)."""
    if binaries() is None:
        pytest.skip("needs the prometheus and promtool binaries (Debian: apt-get install prometheus)")
    base = (int(time.time()) // 3600 - 48) * 3600
    bare_base = base - 86400
    series = [openmetrics(base), openmetrics(bare_base, kube_state_metrics=False)]
    with prometheus_server(tmp_path_factory.mktemp("prometheus"), series) as url:
        yield Server(url, base, bare_base)


def last_end(server: Server) -> float:
    return float(server.base + STEP * STEPS)


@pytest.mark.prometheus
def test_the_samples_are_the_series_they_were_built_from(prometheus: Server) -> None:
    got = read_prometheus(prometheus.url, (STEPS - 1) * STEP, step_s=STEP, end_unix_s=last_end(prometheus))
    assert got == expected_samples(prometheus.base)


@pytest.mark.prometheus
def test_each_node_is_as_large_as_its_latest_allocatable(prometheus: Server) -> None:
    end = last_end(prometheus)
    expected = {"node-a": (4.0, 16.0 * 1024 * MiB), "node-b": (8.0, 32.0 * 1024 * MiB)}
    assert read_allocatable(prometheus.url, (STEPS - 1) * STEP, end_unix_s=end) == expected
    assert read_allocatable(prometheus.url, (STEPS - 1) * STEP, end_unix_s=end, max_points=5) == expected
    before_the_resize = {"node-a": (4.0, 16.0 * 1024 * MiB), "node-b": (7.5, 32.0 * 1024 * MiB)}
    assert read_allocatable(prometheus.url, 3 * STEP, end_unix_s=end - 6 * STEP) == before_the_resize
    with pytest.raises(PrometheusError, match="no kube_node_status_allocatable series for cpu and memory"):
        read_allocatable(prometheus.url, 1800, end_unix_s=prometheus.bare_base + STEP * STEPS)


@pytest.mark.prometheus
def test_long_ranges_are_read_in_chunks_with_the_same_result(prometheus: Server) -> None:
    """12 steps in chunks of 5, 5 and 2; and a day around them in chunks of 100 (most of them empty)."""
    end = last_end(prometheus)
    expected = expected_samples(prometheus.base)
    assert read_prometheus(prometheus.url, (STEPS - 1) * STEP, step_s=STEP, end_unix_s=end, max_points=5) == expected
    assert read_prometheus(prometheus.url, 86400, step_s=STEP, end_unix_s=end + 7200, max_points=100) == expected


@pytest.mark.prometheus
def test_the_end_falls_on_the_step_grid(prometheus: Server) -> None:
    """An end between two steps reads up to the earlier one, so a replay does not depend on the second."""
    got = read_prometheus(prometheus.url, 3 * STEP, step_s=float(STEP), end_unix_s=last_end(prometheus) + STEP - 1)
    assert {s.unix_s for s in got} == {last_end(prometheus) - STEP * i for i in range(4)}


@pytest.mark.prometheus
def test_a_pull_saved_as_csv_reads_back_the_same(prometheus: Server, tmp_path: Path) -> None:
    got = read_prometheus(prometheus.url, (STEPS - 1) * STEP, step_s=STEP, end_unix_s=last_end(prometheus))
    path = tmp_path / "pulled.csv"
    assert write_csv(got, path) == len(got)
    rows = colo_sim.trace.read_trace(str(path))
    assert rows.skipped == {}
    assert rows.samples == got


@pytest.mark.prometheus
def test_the_replay_from_prometheus_is_the_replay_of_the_same_csv_with_each_nodes_allocatable(
    prometheus: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """colo-sim's whole answer, pulled from Prometheus, or replayed from the dataset `convert --prometheus`
    wrote: each node as large as its allocatable. From a CSV of the samples the series encode (no node sizes in
    a CSV: every node --node-cpu) it is the answer of the pull's own --save."""
    from colo_sim import main as cli

    path, saved, dataset = tmp_path / "same.csv", tmp_path / "saved.csv", tmp_path / "pulled"
    write_csv(expected_samples(prometheus.base), path)
    common = ["--horizon", "600", "--output", "json", "--node-cpu", "8", "--node-memory", "16Gi"]
    # 60 h back from now: the fixture's hour (47-49 h ago), not its hour without kube-state-metrics (71-73 h ago)
    assert cli.main(["--prometheus", prometheus.url, "--since", "60h", "--save", str(saved), *common]) == 0
    from_prometheus = capsys.readouterr().out
    assert cli.main(["convert", "--prometheus", prometheus.url, "--since", "60h", "--to", str(dataset)]) == 0
    capsys.readouterr()
    assert cli.main(["--trace", str(dataset), *common]) == 0
    assert capsys.readouterr().out == from_prometheus
    assert cli.main(["--trace", str(path), *common]) == 0
    from_csv = capsys.readouterr().out
    assert cli.main(["--trace", str(saved), *common]) == 0
    assert capsys.readouterr().out == from_csv
    assert json.loads(from_prometheus)["nodes"] == 2
    # node-a has 4 cores, not --node-cpu's 8: koordinator's 60% of it is lent less
    koordinator = [json.loads(doc)["policies"]["koordinator"]["cpu"]["lent"] for doc in (from_prometheus, from_csv)]
    assert koordinator[0] < koordinator[1]


@pytest.mark.prometheus
def test_a_pull_node_by_node_resumes_and_holds_every_placed_sample(prometheus: Server, tmp_path: Path) -> None:
    """convert --prometheus: each node's samples in its partition (the pods kube-state-metrics placed), the
    allocatable in the manifest; a second run reads only the nodes whose file is missing, with the same range."""
    from colo_sim.parquet_trace import partition_dir
    from colo_sim.prometheus_pull import PART, pull_to_dataset, read_manifest

    end = last_end(prometheus)
    target = tmp_path / "pull"
    first = pull_to_dataset(prometheus.url, (STEPS - 1) * STEP, STEP, str(target), 2, end_unix_s=end, max_points=5)
    expected = [s for s in expected_samples(prometheus.base) if s.node]
    assert (first.rows, first.nodes, first.resumed) == (len(expected), 2, 0)
    main_answer = replayed_samples(str(target))
    assert main_answer == sorted(expected, key=lambda s: (s.node, s.pod, s.unix_s))
    import pyarrow.fs as pafs

    manifest = read_manifest(pafs.LocalFileSystem(), str(target))
    assert manifest is not None and manifest["allocatable"]["node-a"] == [4.0, 16.0 * 1024 * MiB]
    Path(partition_dir(str(target), "node-b"), f"{PART}.parquet").unlink()
    again = pull_to_dataset(prometheus.url, 60.0, STEP, str(target), 1)  # the manifest's range, not this one
    assert (again.nodes, again.resumed) == (1, 1)
    assert replayed_samples(str(target)) == main_answer
    with pytest.raises(PrometheusError, match="holds a pull of"):
        pull_to_dataset("http://127.0.0.1:1", 3600.0, STEP, str(target))


def replayed_samples(path: str) -> list[Sample]:
    """The samples of a dataset as the replay reads them, sorted."""
    from colo_sim.main import plan_samples_of
    from colo_sim.packing import NodeSize
    from colo_sim.parquet_trace import plan_parquet

    plan = plan_parquet(path, NodeSize(8.0, 16.0 * 1024 * MiB), 1.0, None, 1e9)
    return sorted(plan_samples_of(plan), key=lambda s: (s.node, s.pod, s.unix_s))


def test_the_writer_writes_the_long_format(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    samples = [Sample("", "ns/p", 1.5, 0.1, 0.30000000000000004, 2.0**40, 123456789.0)]
    assert write_csv(samples, path) == 1
    assert path.read_text().splitlines() == [
        "node,pod,unix_s,cpu_request_cores,cpu_usage_cores,memory_request_bytes,memory_usage_bytes",
        ",ns/p,1.5,0.1,0.30000000000000004,1099511627776.0,123456789.0",
    ]
    assert tuple(f.name for f in dataclasses.fields(Sample)) == colo_sim.trace.LONG_HEADER, "read as written"


@pytest.mark.prometheus
def test_no_data_in_the_range_is_one_clear_error(prometheus: Server) -> None:
    with pytest.raises(PrometheusError, match=r"no container_cpu_usage_seconds_total series .* at a 300 s step"):
        read_prometheus(prometheus.url, 3600, end_unix_s=prometheus.base - 7200)


@pytest.mark.prometheus
def test_without_kube_state_metrics_the_nodes_are_unknown(prometheus: Server) -> None:
    with pytest.raises(PrometheusError, match=r"no kube_pod_info series .* is kube-state-metrics scraped"):
        read_prometheus(prometheus.url, 1800, end_unix_s=prometheus.bare_base + STEP * STEPS)


@pytest.mark.prometheus
def test_a_bad_query_carries_prometheus_own_reason(prometheus: Server) -> None:
    with pytest.raises(PrometheusError, match=r"Prometheus refused the query \(HTTP 400\): bad_data: .*parse error"):
        query_range(prometheus.url, "sum by (pod) (", prometheus.base, prometheus.base + STEP, STEP)


@pytest.mark.prometheus
def test_a_url_that_is_not_the_api_is_named(prometheus: Server) -> None:
    with pytest.raises(PrometheusError, match=r"/elsewhere/api/v1/query_range answered HTTP 404 .*Prometheus URL"):
        read_prometheus(f"{prometheus.url}/elsewhere", 3600, end_unix_s=last_end(prometheus))


def test_an_unreachable_server_is_one_line() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there any more
    with pytest.raises(PrometheusError, match=f"cannot reach Prometheus at {url}: .*refused") as caught:
        read_prometheus(url, 3600, timeout_s=5)
    assert "\n" not in str(caught.value)


class _Page(http.server.BaseHTTPRequestHandler):
    """A web server that is not Prometheus: every GET gets a small HTML page, or the body in the path, or an
    answer after 3 s when the path says "slow"."""

    def do_GET(self) -> None:
        if "slow" in self.path:
            time.sleep(3)
        body = (
            b'{"status": "success", "data": {"resultType": "vector", "result": []}}'
            if "vector" in self.path
            else b"<html>login</html>"
        )
        with contextlib.suppress(ConnectionError):  # the slow answer's client has gone
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def not_prometheus() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.parametrize(
    ("path", "message"),
    [("", r"did not answer JSON: is http://127\.0\.0\.1:\d+ a Prometheus server\?"),
     ("/vector", "answered without a matrix result"),
     ("/slow", r"Prometheus at http://127\.0\.0\.1:\d+/slow did not answer within 0\.5 s")],
)  # fmt: skip
def test_an_answer_that_is_not_prometheus_is_named(not_prometheus: str, path: str, message: str) -> None:
    with pytest.raises(PrometheusError, match=message):
        read_prometheus(not_prometheus + path, 3600, timeout_s=0.5)


@pytest.mark.parametrize(
    ("text", "seconds"), [("7d", 7 * 86400.0), ("24h", 86400.0), ("1h30m", 5400.0), ("300s", 300.0), ("2w", 1209600.0)]
)
def test_durations_are_prometheus_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "7", "7 days", "1.5h", "-1h", "h"])
def test_a_bad_duration_is_one_clear_error(text: str) -> None:
    with pytest.raises(PrometheusError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("url", "since", "step", "message"),
    [("prometheus:9090", 3600.0, 300, "invalid Prometheus URL"),
     ("http://prometheus:9090", 60.0, 300, r"at least one step"),
     ("http://prometheus:9090", math.inf, 300, r"at least one step"),
     ("http://prometheus:9090", 3600.0, 0, "whole number of seconds"),
     ("http://prometheus:9090", 3600.0, 1.5, "whole number of seconds")],
)  # fmt: skip
def test_bad_arguments_are_refused_before_any_request(url: str, since: float, step: float, message: str) -> None:
    with pytest.raises(PrometheusError, match=message):
        read_prometheus(url, since, step_s=step)


def test_the_queries_leave_out_pod_level_and_pause_series() -> None:
    for name in ("cpu_usage", "memory_usage"):
        assert 'container!="",container!="POD"' in QUERIES[name]
    assert promql("cpu_usage", 300).endswith('container!="POD"}[300s])))')


def test_the_docs_show_the_queries_as_sent() -> None:
    docs = (Path(__file__).resolve().parents[1] / "docs" / "simulation-prometheus.md").read_text(encoding="utf-8")
    for name in QUERIES:
        assert f"`{promql(name, 300)}`" in docs, name
    assert f"\n{ALLOCATABLE_QUERY}\n" in docs
