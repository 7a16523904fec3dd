"""A Prometheus pull at fleet scale: node by node, `--concurrency` nodes at a time, each node written to the
Parquet dataset as soon as its queries answer, and resumable (`colo-sim convert --prometheus URL --to DIR`).

One pull of every pod at once (`colo_sim.prometheus.read_prometheus`) holds the whole cluster's series in one
process and asks Prometheus for all of them in one query per quantity: fine for a few hundred pods, not for a
thousand nodes × 30 pods × 7 days. Here:

1. the placement (`kube_pod_info`) of every pod over the range is read once: it says which pods ran on which
   node;
2. each node's pods are then read with the same queries as `QUERIES`, narrowed by a matcher on the pods'
   namespaces and names (`namespace=~"…", pod=~"…"`; a pod of another namespace that the product of the two
   lets through is dropped), and a sample is kept where the pod's placement is the node at that step;
3. each node's samples are written as `DIR/node=NAME/part-00000.parquet` (renamed into place when complete).

`DIR/_colo_sim.json` records the pull's URL, range and step and each node's allocatable
(`kube_node_status_allocatable`): a second run with the same `--to` reuses the range (not "now" again), reads
only the nodes without a file, and a replay of the dataset sizes each node by its allocatable. Pods with no
`kube_pod_info` (kube-state-metrics did not know them) have no node and are not in a per-node pull.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from colo_sim.parquet_trace import MANIFEST, filesystem, partition_dir, read_manifest, write_node
from colo_sim.prometheus import (
    _CONTAINERS,
    DEFAULT_TIMEOUT_S,
    MAX_POINTS,
    Grid,
    PrometheusError,
    Series,
    by_pod,
    nodes_by_pod,
    pod_samples,
    promql,
    read_allocatable,
)

PART = "part-00000"


@dataclass(frozen=True, slots=True)
class Pulled:
    rows: int
    nodes: int
    resumed: int  # nodes already in the dataset from an earlier run


def node_promql(name: str, step_s: int, namespaces: list[str], pods: list[str]) -> str:
    """The query `name` of QUERIES narrowed to the given namespaces and pods."""
    matcher = f'namespace=~"{_alternatives(namespaces)}",pod=~"{_alternatives(pods)}"'
    query = promql(name, step_s)
    if _CONTAINERS in query:
        return query.replace(_CONTAINERS, f"{_CONTAINERS},{matcher}")
    return re.sub(r'\{resource="(cpu|memory)"\}', lambda m: f'{{resource="{m.group(1)}",{matcher}}}', query)


def _alternatives(names: list[str]) -> str:
    """A RE2 alternation matching exactly `names` (PromQL anchors =~ at both ends); escaped for a PromQL string."""
    return "|".join(re.escape(n) for n in sorted(set(names))).replace("\\", "\\\\").replace('"', '\\"')


def _write_manifest(fs: Any, root: str, doc: dict[str, Any]) -> None:
    fs.create_dir(root, recursive=True)
    with fs.open_output_stream(f"{root}/{MANIFEST}") as f:
        f.write(json.dumps(doc, indent=1, sort_keys=True).encode())


def pull_to_dataset(
    url: str,
    since_s: float,
    step_s: float,
    target: str,
    concurrency: int = 4,
    *,
    end_unix_s: float | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_points: int = MAX_POINTS,
    progress: Callable[[int, int], None] | None = None,
) -> Pulled:
    """Pull every node's samples into the dataset at `target` (see the module's docstring)."""
    fs, root = filesystem(target)
    manifest = read_manifest(fs, root)
    if manifest is not None:
        if manifest.get("url") != url.strip().rstrip("/"):
            raise PrometheusError(f"{target} holds a pull of {manifest.get('url')}, not of {url}: choose another --to")
        fresh = Grid.of(url, float(manifest["step"]), float(manifest["step"]), float(manifest["end"]))
        grid = Grid(fresh.base, int(manifest["start"]), int(manifest["end"]), int(manifest["step"]))
    else:
        grid = Grid.of(url, since_s, step_s, end_unix_s)
        try:
            allocatable = read_allocatable(
                url,
                grid.end - grid.start,
                step_s=grid.step,
                end_unix_s=grid.end,
                timeout_s=timeout_s,
                max_points=max_points,
            )
        except PrometheusError:
            allocatable = {}  # no kube-state-metrics node series: the replay uses --node-cpu/--node-memory
        manifest = {
            "url": grid.base,
            "start": grid.start,
            "end": grid.end,
            "step": grid.step,
            "allocatable": {n: list(v) for n, v in allocatable.items()},
        }
        _write_manifest(fs, root, manifest)
    placement = nodes_by_pod(grid.read(promql("node", grid.step), timeout_s, max_points))
    if not placement:
        raise PrometheusError(f"{url}: no kube_pod_info series {grid.span}; is kube-state-metrics scraped?")
    pods_of: dict[str, list[tuple[str, str]]] = {}
    for pod, where in placement.items():
        for node in sorted(set(where.nodes)):
            pods_of.setdefault(node, []).append(pod)
    done = {node for node in pods_of if _exists(fs, f"{partition_dir(root, node)}/{PART}.parquet")}
    todo = sorted(set(pods_of) - done)

    def pull(node: str) -> int:
        pods = pods_of[node]
        namespaces, names = [p[0] for p in pods], [p[1] for p in pods]
        wanted = set(pods)

        def fetch(name: str) -> dict[tuple[str, str], dict[float, float]]:
            series: list[Series] = grid.read(node_promql(name, grid.step, namespaces, names), timeout_s, max_points)
            return {pod: points for pod, points in by_pod(series).items() if pod in wanted}

        got = {name: fetch(name) for name in ("cpu_usage", "memory_usage", "cpu_request", "memory_request")}
        samples = [
            s
            for s in pod_samples(
                got["cpu_usage"], got["memory_usage"], got["cpu_request"], got["memory_request"], placement
            )
            if s.node == node
        ]
        samples.sort(key=lambda s: (s.pod, s.unix_s))
        return write_node(fs, root, node, samples, part=PART) if samples else 0

    rows = 0
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        for i, written in enumerate(pool.map(pull, todo)):
            rows += written
            if progress is not None:
                progress(i + 1, len(todo))
    return Pulled(rows, len(todo), len(done))


def _exists(fs: Any, path: str) -> bool:
    import pyarrow.fs as pafs

    return bool(fs.get_file_info(path).type == pafs.FileType.File)
