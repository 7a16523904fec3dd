"""Samples of a live cluster, read from its Prometheus: `colo-sim --prometheus URL --since 7d`.

An operator asks before installing how much Colo would lend on their cluster; Prometheus already holds the
answer's inputs. This module reads, over the HTTP API's `/api/v1/query_range`, the same four quantities a
trace file carries, per pod and step, and places each pod on its node:

- CPU usage: cAdvisor's `container_cpu_usage_seconds_total`, rate() over one step (the step's mean cores);
- memory usage: cAdvisor's `container_memory_working_set_bytes`, max_over_time() over one step (the step's
  peak: memory is not compressible, a peak between two steps is what an OOM would see);
- requests: kube-state-metrics' `kube_pod_container_resource_requests{resource="cpu"|"memory"}`;
- the node: kube-state-metrics' `kube_pod_info{node}` (the API server's binding; cAdvisor has a `node` label
  only when the scrape config adds one, and a cluster scraped twice would count a pod twice by it).

Containers are summed per pod; cAdvisor's pod-level (`container=""`) and pause (`container="POD"`) series are
not containers and are left out. A pod with no request series is BestEffort: it gets request 0 and its usage
still counts as online usage. A pod appears at a step only where both its CPU and memory usage exist there.
Pods are named `namespace/pod`. The queries are `QUERIES` (docs/simulation-prometheus.md). Each node's size,
where a replay needs one, is its kube-state-metrics `kube_node_status_allocatable` (`read_allocatable`).

The standard library's `urllib.request` is the client: five GETs per 11000-step chunk need no connection
pool, and `colo-sim` stays installable with the agent's dependencies only.
"""

from __future__ import annotations

import bisect
import http.client
import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from colo_sim.trace import Sample

#: The default `--step`: usage is one mean (CPU) or peak (memory) per 5 minutes, like the Bitbrains trace.
DEFAULT_STEP_S = 300
#: Prometheus refuses a range query of more than 11000 points per series; longer ranges go in chunks.
MAX_POINTS = 11000
#: Seconds to wait for one answer: longer than Prometheus's own query timeout (`--query.timeout`, 2 min by
#: default), so a query too heavy for the server ends with the server's reason rather than ours.
DEFAULT_TIMEOUT_S = 130.0

_CONTAINERS = 'container!="",container!="POD"'

#: The PromQL of each quantity; `{window}` is the step as a range ("300s").
QUERIES: Mapping[str, str] = {
    # max by id: a target scraped twice counts once; a container restarted within a step (a new cgroup id)
    # contributes both of its cgroups' parts of the step.
    "cpu_usage": (
        "sum by (namespace, pod) (max by (namespace, pod, container, id) "
        f"(rate(container_cpu_usage_seconds_total{{{_CONTAINERS}}}[{{window}}])))"
    ),
    # max by container: an old and a new cgroup of a restarted container never hold memory at once.
    "memory_usage": (
        "sum by (namespace, pod) (max by (namespace, pod, container) "
        f"(max_over_time(container_memory_working_set_bytes{{{_CONTAINERS}}}[{{window}}])))"
    ),
    "cpu_request": (
        "sum by (namespace, pod) (max by (namespace, pod, container) "
        '(kube_pod_container_resource_requests{resource="cpu"}))'
    ),
    "memory_request": (
        "sum by (namespace, pod) (max by (namespace, pod, container) "
        '(kube_pod_container_resource_requests{resource="memory"}))'
    ),
    "node": 'max by (namespace, pod, node) (kube_pod_info{node!=""})',
}
#: Each node's allocatable (kube-state-metrics), for sizing the nodes of a replay (`read_allocatable`).
ALLOCATABLE_QUERY = 'max by (node, resource) (kube_node_status_allocatable{resource=~"cpu|memory"})'

_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}

#: One series of a range query: its labels and its values by unix seconds (NaN and infinities left out).
Series = tuple[dict[str, str], dict[float, float]]


class PrometheusError(Exception):
    """Prometheus could not give the samples (unreachable, refused, not Prometheus, no data): one line for the
    user; the CLI prints it and exits 2."""


def parse_duration(text: str) -> float:
    """Seconds of a Prometheus duration ("7d", "24h", "1h30m", "300s"); PrometheusError if it is not one."""
    s = text.strip()
    pos, total = 0, 0.0
    while pos < len(s):
        m = _DURATION.match(s, pos)
        if m is None:
            break
        total += int(m.group(1)) * _UNIT_S[m.group(2)]
        pos = m.end()
    if not s or pos != len(s):
        raise PrometheusError(f"invalid duration {text!r} (expected e.g. 7d, 24h, 90m, 300s)")
    return total


def promql(name: str, step_s: int) -> str:
    """The query of QUERIES[name] for a step of `step_s` seconds."""
    return QUERIES[name].replace("{window}", f"{step_s}s")


def read_prometheus(
    url: str,
    since_s: float,
    *,
    step_s: float = DEFAULT_STEP_S,
    end_unix_s: float | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_points: int = MAX_POINTS,
) -> list[Sample]:
    """Every pod's samples over the `since_s` seconds up to `end_unix_s` (default now), one per `step_s`,
    sorted by (node, pod, unix_s). `step_s` is a whole number of seconds (the rate window is one step). Steps
    fall on multiples of `step_s`, so two pulls of one range read the same points. Raises PrometheusError with
    one line when anything is missing or wrong."""
    grid = Grid.of(url, since_s, step_s, end_unix_s)
    span = grid.span

    def fetch(name: str) -> list[Series]:
        return grid.read(promql(name, grid.step), timeout_s, max_points)

    # One query at a time: run at once they took as long in all on this 2-core machine, each five times longer.
    answers = {name: fetch(name) for name in QUERIES}
    cpu = by_pod(answers["cpu_usage"])
    if not cpu:
        raise PrometheusError(
            f"{url}: no container_cpu_usage_seconds_total series (cAdvisor) {span}; is cAdvisor scraped, and is "
            "the step at least twice the scrape interval (rate() needs two points)?"
        )
    memory = by_pod(answers["memory_usage"])
    if not memory:
        raise PrometheusError(f"{url}: no container_memory_working_set_bytes series (cAdvisor) {span}")
    nodes = nodes_by_pod(answers["node"])
    if not nodes:
        raise PrometheusError(f"{url}: no kube_pod_info series {span}; is kube-state-metrics scraped?")
    cpu_request = by_pod(answers["cpu_request"])
    memory_request = by_pod(answers["memory_request"])

    samples = pod_samples(cpu, memory, cpu_request, memory_request, nodes)
    if not samples:
        raise PrometheusError(f"{url}: no pod has both CPU and memory usage at any step {span}")
    samples.sort(key=lambda s: (s.node, s.pod, s.unix_s))
    return samples


def read_allocatable(
    url: str,
    since_s: float,
    *,
    step_s: float = DEFAULT_STEP_S,
    end_unix_s: float | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_points: int = MAX_POINTS,
) -> dict[str, tuple[float, float]]:
    """node -> (allocatable cores, allocatable bytes), each the latest value in the same range and steps as
    `read_prometheus`: the real size of each node, where a trace without hosts has to be given one. Nodes
    without both resources are left out; PrometheusError when none has them."""
    grid = Grid.of(url, since_s, step_s, end_unix_s)
    latest: dict[tuple[str, str], tuple[float, float]] = {}
    for labels, points in grid.read(ALLOCATABLE_QUERY, timeout_s, max_points):
        key = (labels.get("node", ""), labels.get("resource", ""))
        if key[0] and points:
            t = max(points)
            if t >= latest.get(key, (-math.inf, 0.0))[0]:
                latest[key] = (t, points[t])
    nodes = {node for node, _ in latest}
    out = {
        node: (latest[(node, "cpu")][1], latest[(node, "memory")][1])
        for node in sorted(nodes)
        if (node, "cpu") in latest and (node, "memory") in latest
    }
    if not out:
        raise PrometheusError(
            f"{url}: no kube_node_status_allocatable series for cpu and memory {grid.span}; "
            "is kube-state-metrics scraped?"
        )
    return out


Points = dict[tuple[str, str], dict[float, float]]


def pod_samples(
    cpu: Points, memory: Points, cpu_request: Points, memory_request: Points, nodes: Mapping[tuple[str, str], Placement]
) -> list[Sample]:
    """One sample per pod and step where both its CPU and memory usage exist, placed on its node then."""
    samples: list[Sample] = []
    for pod, cpu_points in cpu.items():
        memory_points = memory.get(pod)
        if memory_points is None:
            continue
        cpu_req = cpu_request.get(pod, {})
        mem_req = memory_request.get(pod, {})
        placement = nodes.get(pod)
        name = f"{pod[0]}/{pod[1]}"
        for t, cores in cpu_points.items():
            used = memory_points.get(t)
            if used is None:
                continue
            node = placement.at(t) if placement is not None else ""
            samples.append(Sample(node, name, t, cpu_req.get(t, 0.0), cores, mem_req.get(t, 0.0), used))
    return samples


@dataclass(frozen=True, slots=True)
class Grid:
    """The steps of one pull: `since` seconds back from the end, on multiples of the step."""

    base: str
    start: int
    end: int
    step: int

    @staticmethod
    def of(url: str, since_s: float, step_s: float, end_unix_s: float | None) -> Grid:
        if isinstance(step_s, bool) or not math.isfinite(step_s) or step_s < 1 or step_s != int(step_s):
            raise PrometheusError(f"the step must be a whole number of seconds >= 1, got {step_s!r}")
        step = int(step_s)
        if not math.isfinite(since_s) or since_s < step:
            raise PrometheusError(f"the range ({since_s:g} s) must be at least one step ({step} s)")
        base = _base_url(url)
        now = datetime.now(UTC).timestamp() if end_unix_s is None else end_unix_s
        end = math.floor(now / step) * step
        return Grid(base, end - math.floor(since_s / step) * step, end, step)

    @property
    def span(self) -> str:
        return f"between {_iso(self.start)} and {_iso(self.end)} at a {self.step} s step"

    def read(self, query: str, timeout_s: float, max_points: int) -> list[Series]:
        """The series of `query` over the grid, fetched in chunks of at most `max_points` steps."""
        if max_points < 1:
            raise PrometheusError(f"max_points must be >= 1, got {max_points}")
        merged: dict[tuple[tuple[str, str], ...], Series] = {}
        chunk_start = self.start
        while chunk_start <= self.end:
            chunk_end = min(chunk_start + (max_points - 1) * self.step, self.end)
            for labels, points in query_range(self.base, query, chunk_start, chunk_end, self.step, timeout_s):
                key = tuple(sorted(labels.items()))
                if key in merged:
                    merged[key][1].update(points)
                else:
                    merged[key] = (labels, points)
            chunk_start = chunk_end + self.step
        return list(merged.values())


class Placement:
    """One pod's node over time, from kube_pod_info: the node at a step, else the nearest earlier one, else
    the nearest later one (a pod's usage can outlive its info by a scrape)."""

    def __init__(self, node_at: dict[float, str]) -> None:
        self.times = sorted(node_at)
        self.nodes = [node_at[t] for t in self.times]

    def at(self, t: float) -> str:
        i = bisect.bisect_right(self.times, t)
        return self.nodes[i - 1] if i > 0 else self.nodes[0]


def by_pod(series: list[Series]) -> dict[tuple[str, str], dict[float, float]]:
    """(namespace, pod) -> {unix_s: value} of a query grouped by namespace and pod."""
    out: dict[tuple[str, str], dict[float, float]] = {}
    for labels, points in series:
        pod = labels.get("pod", "")
        if pod:
            out.setdefault((labels.get("namespace", ""), pod), {}).update(points)
    return out


def nodes_by_pod(series: list[Series]) -> dict[tuple[str, str], Placement]:
    """(namespace, pod) -> its placement. Two nodes at one step (a pod re-created elsewhere within a scrape):
    the first by name, so the answer does not depend on the order of Prometheus's series."""
    node_at: dict[tuple[str, str], dict[float, str]] = {}
    for labels, values in series:
        pod, node = labels.get("pod", ""), labels.get("node", "")
        if pod and node:
            times = node_at.setdefault((labels.get("namespace", ""), pod), {})
            for t in values:
                times[t] = min(times.get(t, node), node)
    return {pod: Placement(times) for pod, times in node_at.items()}


def _base_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PrometheusError(f"invalid Prometheus URL {url!r} (expected e.g. http://prometheus:9090)")
    return url.strip().rstrip("/")


def _iso(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def query_range(
    base: str, query: str, start: int, end: int, step_s: int, timeout_s: float = DEFAULT_TIMEOUT_S
) -> list[Series]:
    """One `/api/v1/query_range` call to the Prometheus at `base` (its URL, no trailing slash); every way it
    can fail becomes a PrometheusError naming the cause."""
    params = urllib.parse.urlencode({"query": query, "start": start, "end": end, "step": step_s})
    target = f"{base}/api/v1/query_range"
    request = urllib.request.Request(f"{target}?{params}", headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        raise PrometheusError(_http_error(target, exc)) from None
    except urllib.error.URLError as exc:
        raise PrometheusError(f"cannot reach Prometheus at {base}: {_one_line(exc.reason)}") from None
    except TimeoutError:
        raise PrometheusError(f"Prometheus at {base} did not answer within {timeout_s:g} s") from None
    except (OSError, http.client.HTTPException) as exc:
        raise PrometheusError(f"cannot read from Prometheus at {base}: {_one_line(exc)}") from None
    document = _json(body)
    if document is None:
        raise PrometheusError(f"{target} did not answer JSON: is {base} a Prometheus server?")
    return _matrix(target, document)


def _http_error(target: str, exc: urllib.error.HTTPError) -> str:
    """Prometheus's own error text when the answer carries one (a bad query is HTTP 400 with JSON)."""
    try:
        body = exc.read()
    except OSError:
        body = b""
    document = _json(body)
    if isinstance(document, dict) and document.get("status") == "error":
        return f"Prometheus refused the query (HTTP {exc.code}): {_refusal(document)}"
    return f"{target} answered HTTP {exc.code} {_one_line(exc.reason)}: is this a Prometheus URL?"


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None


def _refusal(document: dict[str, Any]) -> str:
    return _one_line(f"{document.get('errorType', 'error')}: {document.get('error', '(no reason given)')}")


def _matrix(target: str, document: Any) -> list[Series]:
    if not isinstance(document, dict) or "status" not in document:
        raise PrometheusError(f"{target} answered JSON that is not a Prometheus API answer")
    if document["status"] != "success":
        raise PrometheusError(f"Prometheus refused the query: {_refusal(document)}")
    data = document.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        raise PrometheusError(f"{target} answered without a matrix result")
    out: list[Series] = []
    try:
        for item in data["result"]:
            labels = {str(k): str(v) for k, v in item["metric"].items()}
            points = {float(t): float(v) for t, v in item["values"]}
            if not all(map(math.isfinite, points.values())):
                points = {t: v for t, v in points.items() if math.isfinite(v)}
            out.append((labels, points))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise PrometheusError(f"{target} answered a malformed series: {_one_line(exc)}") from None
    return out


def _one_line(value: object) -> str:
    return " ".join(str(value).split())
