"""Parquet input and output of `colo-sim`: one file, or a dataset (a directory of Parquet files, partitioned by
node for traces larger than memory), on a local path or any URL pyarrow's filesystem layer opens (s3://,
gs://, hdfs://, abfs://).

pyarrow is the library: it reads Parquet by row groups and only the columns asked for, it is the reader
Dask, Ray and Spark themselves use (a dataset written here opens in any of them, and in DuckDB or Polars), and
its filesystem layer gives the workers of a distributed replay the same paths and URLs as the command line.

Schema: the long format's columns (`colo_sim.trace.LONG_HEADER`) with their names; `unix_s` in seconds (a
number, or a Parquet timestamp of any unit), the quantities numbers. A dataset partitioned by node is Hive
style, `DIR/node=NAME/*.parquet` (NAME percent-encoded, unplaced pods under `node=__HIVE_DEFAULT_PARTITION__`),
the node then taken from the directory: what `colo-sim convert` writes. Such a dataset is replayed node by
node, each node's files read by the process that replays it; any other Parquet input is read whole (48 bytes
a sample) and grouped by node in memory.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from colo_sim.columns import Batch, Intake, Pods, usable
from colo_sim.node_plan import NodeSpec, Plan, grid_of, node_names, packed_nodes, plan_rows
from colo_sim.packing import NodeSize
from colo_sim.trace import LONG_HEADER, Sample, TraceError

NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
#: A dataset's own facts (a Prometheus pull's range and each node's allocatable, `colo_sim.prometheus_pull`);
#: Parquet readers skip files whose name starts with "_".
MANIFEST = "_colo_sim.json"
VALUES = LONG_HEADER[2:]  # unix_s and the four quantities


def is_parquet(path: str) -> bool:
    """A Parquet input: a directory, a .parquet/.pq file, a URL with a scheme, or a file starting with PAR1."""
    if "://" in path or os.path.isdir(path) or path.endswith((".parquet", ".pq")):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"PAR1"
    except OSError:
        return False


def _pyarrow() -> tuple[Any, Any, Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.dataset as ds
        import pyarrow.fs as pafs
    except ImportError:
        raise TraceError("Parquet input and output need pyarrow: make sim") from None
    return pa, pc, ds, pafs


def filesystem(path: str) -> tuple[Any, str]:
    _, _, _, pafs = _pyarrow()
    try:
        if "://" in path:
            fs, root = pafs.FileSystem.from_uri(path)
            return fs, str(root)
        return pafs.LocalFileSystem(), os.path.abspath(path)
    except Exception as exc:  # pyarrow raises several types for a URL it cannot open
        raise TraceError(f"{path}: cannot open it: {_one_line(exc)}") from None


def open_dataset(path: str) -> tuple[Any, Any, str]:
    pa, _, ds, pafs = _pyarrow()
    fs, root = filesystem(path)
    try:
        is_dir = fs.get_file_info(root).type == pafs.FileType.Directory
        partitioning = ds.partitioning(pa.schema([("node", pa.string())]), flavor="hive") if is_dir else None
        dataset = ds.dataset(root, format="parquet", filesystem=fs, partitioning=partitioning)
        names = set(dataset.schema.names)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise TraceError(f"{path}: cannot read it as Parquet: {_one_line(exc)}") from None
    missing = [c for c in LONG_HEADER if c not in names]
    if missing:
        raise TraceError(
            f"{path}: not the long format's columns: {', '.join(missing)} missing (expected {','.join(LONG_HEADER)})"
        )
    return dataset, fs, root


def _one_line(value: object) -> str:
    return " ".join(str(value).split())[:300]


def arrow_batches(
    batches: Iterable[Any], pods: Pods, skipped: Counter[str], node: str | None = None
) -> Iterator[Batch]:
    """Batches of usable numbers from pyarrow record batches of the long format (`node` given: every row's
    node), skipped rows counted by the CSV reader's reasons."""
    pa, pc, _, _ = _pyarrow()
    for rb in batches:
        if rb.num_rows == 0:
            continue
        pod_col = pc.fill_null(pc.utf8_trim_whitespace(rb.column("pod").cast(pa.string())), "")
        if node is None:
            node_col = pc.fill_null(pc.utf8_trim_whitespace(rb.column("node").cast(pa.string())), "")
        values = []
        for name in VALUES:
            col = rb.column(name)
            if pa.types.is_timestamp(col.type):
                unit = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}[col.type.unit]
                col = pc.divide(col.cast(pa.int64()).cast(pa.float64()), unit)
            try:
                col = col.cast(pa.float64())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise TraceError(f"column {name} is {col.type}, not a number") from None
            values.append(np.asarray(pc.fill_null(col, np.nan).to_numpy(zero_copy_only=False), np.float64))
        table = np.vstack(values)
        empty = np.asarray(pc.equal(pod_col, "").to_numpy(zero_copy_only=False), bool)
        ok = usable(table, empty, skipped)
        if not ok.any():
            continue
        keep = pa.array(ok)
        codes = coded(pc.filter(pod_col, keep), node, None if node is not None else pc.filter(node_col, keep), pods)
        yield Batch(codes, *(np.ascontiguousarray(table[i][ok]) for i in range(5)))


def coded(pod_col: Any, node: str | None, node_col: Any, pods: Pods) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Each row's pod code, looking up each distinct (node, pod) of the batch once."""
    _, pc, _, _ = _pyarrow()
    pod_dict = pc.dictionary_encode(pod_col)
    pod_idx = np.asarray(pod_dict.indices.to_numpy(zero_copy_only=False), np.int64)
    pod_names = pod_dict.dictionary.to_pylist()
    if node is not None:
        lookup = np.array([pods.code(node, p) for p in pod_names], np.int64)
        return lookup[pod_idx]
    node_dict = pc.dictionary_encode(node_col)
    node_idx = np.asarray(node_dict.indices.to_numpy(zero_copy_only=False), np.int64)
    node_names_ = node_dict.dictionary.to_pylist()
    pair = node_idx * len(pod_names) + pod_idx
    uniq, inverse = np.unique(pair, return_inverse=True)
    lookup = np.array(
        [pods.code(node_names_[u // len(pod_names)], pod_names[u % len(pod_names)]) for u in uniq.tolist()], np.int64
    )
    codes: np.ndarray[Any, np.dtype[np.int64]] = lookup[inverse.reshape(-1)]
    return codes


def file_batches(fs: Any, files: Iterable[str], columns: Iterable[str]) -> Iterator[Any]:
    """The record batches of `files` in order (file by file, row group by row group): the replay keeps the
    rows' order, which decides which of two samples of a pod in one step counts."""
    import pyarrow.parquet as pq

    for path in sorted(files):
        with fs.open_input_file(path) as f:
            yield from pq.ParquetFile(f).iter_batches(batch_size=1 << 17, columns=list(columns))


@dataclass(frozen=True, slots=True)
class PartitionRows:
    """A node's files in a dataset partitioned by node; read by the process that replays the node."""

    root: str  # the path or URL given (to open the same filesystem)
    node: str
    files: tuple[str, ...]
    divisor: float

    def load(self) -> tuple[list[tuple[str, str]], Batch]:
        pa, _, _, _ = _pyarrow()
        fs, _ = filesystem(self.root)
        pods = Pods()
        intake = Intake(pods, keep=True, divisor=self.divisor)
        try:
            for batch in arrow_batches(file_batches(fs, self.files, LONG_HEADER[1:]), pods, Counter(), self.node):
                intake.add(batch)
        except (OSError, pa.ArrowException) as exc:  # e.g. a worker that cannot see the dataset
            raise TraceError(f"{self.root}: node {self.node!r}: cannot read it: {_one_line(exc)}") from None
        return pods.names, intake.rows()


def _by_node(dataset: Any) -> dict[str, list[str]] | None:
    """node -> its files when the dataset is partitioned by node, else None."""
    _, _, ds, _ = _pyarrow()
    files: dict[str, list[str]] = {}
    for fragment in dataset.get_fragments():
        keys = ds.get_partition_keys(fragment.partition_expression)
        if "node" not in keys and NULL_PARTITION not in fragment.path.split("/")[-2]:
            return None
        files.setdefault(keys.get("node") or "", []).append(fragment.path)
    return files or None


def plan_parquet(
    path: str,
    size: NodeSize,
    pack_to: float,
    step: float | None,
    max_span_s: float,
    sizes: dict[str, NodeSize] | None = None,
) -> Plan:
    """The plan of a Parquet file or dataset (see the module's docstring for which is held in memory)."""
    pa, _, _, _ = _pyarrow()
    dataset, fs, root = open_dataset(path)
    if sizes is None:  # a pull's dataset knows each node's allocatable (colo_sim.prometheus_pull)
        manifest = read_manifest(fs, root) or {}
        sizes = {str(n): NodeSize(float(v[0]), float(v[1])) for n, v in manifest.get("allocatable", {}).items()}
    pods = Pods()
    skipped: Counter[str] = Counter()
    try:
        partitions = _by_node(dataset)
        if partitions is None:
            intake = Intake(pods, keep=True)
            files = sorted(f.path for f in dataset.get_fragments())
            for batch in arrow_batches(file_batches(dataset.filesystem, files, LONG_HEADER), pods, skipped):
                intake.add(batch)
            intake.skipped.update(skipped)
            if intake.summary.samples == 0:
                raise TraceError(f"{path}: no usable row")
            return plan_rows(intake, pods, size, pack_to, step, max_span_s, sizes)
        return _plan_partitions(path, partitions, pods, size, pack_to, step, max_span_s, sizes)
    except (OSError, pa.ArrowException) as exc:
        raise TraceError(f"{path}: cannot read it: {_one_line(exc)}") from None


def _plan_partitions(
    path: str,
    partitions: dict[str, list[str]],
    pods: Pods,
    size: NodeSize,
    pack_to: float,
    step: float | None,
    max_span_s: float,
    sizes: dict[str, NodeSize] | None,
) -> Plan:
    """One pass over every node's files for the summary; the unplaced pods' rows are kept (they are packed)."""
    fs, _ = filesystem(path)
    skipped: Counter[str] = Counter()
    intake = Intake(pods, keep=False)
    for node in sorted(partitions):
        intake.keep = node == ""
        for batch in arrow_batches(file_batches(fs, partitions[node], LONG_HEADER[1:]), pods, skipped, node):
            intake.add(batch)
    intake.skipped.update(skipped)
    summary = intake.summary
    if summary.samples == 0:
        raise TraceError(f"{path}: no usable row")
    grid = grid_of(summary, pods, step, max_span_s)
    named = [n for n in partitions if n]
    specs = []
    divisor = intake.divisor or 1.0
    packed = packed_nodes(pods, summary, size, pack_to)
    for name in node_names(named, packed)[: len(named)]:
        specs.append(
            NodeSpec(name, (sizes or {}).get(name, size), PartitionRows(path, name, tuple(partitions[name]), divisor))
        )
    if packed:
        unplaced = plan_rows(intake, pods, size, pack_to, step, max_span_s)
        specs += [s for s in unplaced.nodes if s.name.startswith("packed-")]
    pods_seen = int((summary.count > 0).sum())
    return Plan(grid, specs, pods_seen, summary.samples, dict(sorted(intake.skipped.items())), intake.warnings)


def read_manifest(fs: Any, root: str) -> dict[str, Any] | None:
    try:
        with fs.open_input_stream(f"{root}/{MANIFEST}") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


# ---------------------------------------------------------------------- writing


def partition_dir(root: str, node: str) -> str:
    return f"{root.rstrip('/')}/node={urllib.parse.quote(node, safe='') if node else NULL_PARTITION}"


def write_node(
    fs: Any,
    root: str,
    node: str,
    rows: Iterable[Sample] | Batch,
    names: list[tuple[str, str]] | None = None,
    part: str = "part-0",
) -> int:
    """Write one node's rows as `root/node=NAME/<part>.parquet` (a temporary name renamed when complete, so
    an interrupted write leaves no partial file); returns the rows written."""
    pa, _, _, _ = _pyarrow()
    import pyarrow.parquet as pq

    if isinstance(rows, Batch):
        assert names is not None
        pod = pa.array([names[c][1] for c in rows.code.tolist()], pa.string())
        cols = [rows.t, rows.cpu_request, rows.cpu_usage, rows.memory_request, rows.memory_usage]
    else:
        samples = list(rows)
        pod = pa.array([s.pod for s in samples], pa.string())
        cols = [np.array([getattr(s, f) for s in samples], np.float64) for f in VALUES]
    table = pa.table([pod.dictionary_encode(), *cols], names=list(LONG_HEADER[1:]))
    directory = partition_dir(root, node)
    fs.create_dir(directory, recursive=True)
    final = f"{directory}/{part}.parquet"
    partial = f"{directory}/.{part}.parquet.partial"
    pq.write_table(table, partial, filesystem=fs, compression="zstd")
    fs.move(partial, final)
    return int(table.num_rows)


def write_plan(plan: Plan, target: str) -> int:
    """Write every node of an in-memory plan as a dataset partitioned by node; unplaced pods keep no node."""
    fs, root = filesystem(target)
    total = 0
    for spec in plan.nodes:
        names, rows = spec.rows.load()
        by_node: dict[str, list[int]] = {}
        for c, (node, _) in enumerate(names):
            by_node.setdefault(node, []).append(c)
        for node, codes in by_node.items():
            mask = np.isin(rows.code, codes)
            part = spec.name if not node else "part-0"
            total += write_node(fs, root, node, rows.take(mask), names, part)
    return total
