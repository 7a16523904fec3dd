"""Trace input of `colo-sim`: one typed record per sample and the readers that produce them.

Every source (a CSV file in either schema below, or a Prometheus server) yields the same `Sample` records;
the replay (`colo_sim.replay`) takes any sequence of them, so a new source only has to produce samples.

Schemas, detected from the header (or named by `--format`):

``long``
    ``node,pod,unix_s,cpu_request_cores,cpu_usage_cores,memory_request_bytes,memory_usage_bytes``; an empty
    ``node`` means the pod is unplaced and gets packed (`colo_sim.packing`).
``bitbrains``
    ``vm,unix_s,cores,cpu_prov_mhz,cpu_used_mhz,mem_prov_kb,mem_used_kb`` (the Grid Workloads Archive's
    GWA-T-12 Bitbrains trace, Shen et al., CCGrid 2015): a VM is an unplaced online pod whose CPU request is
    ``cores`` and whose usage in cores is ``cpu_used_mhz / (cpu_prov_mhz / cores)``; memory request
    ``mem_prov_kb`` KiB, usage ``mem_used_kb`` KiB.

Malformed rows are skipped and counted by reason (`SKIP_REASONS`); they never stop the run.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from colo_sim.columns import Batch, Pods

Format = Literal["long", "bitbrains"]

LONG_HEADER = (
    "node",
    "pod",
    "unix_s",
    "cpu_request_cores",
    "cpu_usage_cores",
    "memory_request_bytes",
    "memory_usage_bytes",
)
BITBRAINS_HEADER = ("vm", "unix_s", "cores", "cpu_prov_mhz", "cpu_used_mhz", "mem_prov_kb", "mem_used_kb")
HEADERS: dict[Format, tuple[str, ...]] = {"long": LONG_HEADER, "bitbrains": BITBRAINS_HEADER}

#: Why a row was skipped.
SKIP_REASONS = (
    "column_count",  # not the header's number of columns (a blank line is no row: not counted)
    "not_a_number",  # a numeric column that does not parse, or is NaN or infinite
    "negative",  # a negative time, request or usage
    "zero_cores",  # bitbrains: cores or cpu_prov_mhz of 0 (the usage in cores is undefined)
    "empty_pod",  # long: no pod name
    "time_backwards",  # earlier than the pod's previous sample
    "duplicate_time",  # the same time as the pod's previous sample
)


class TraceError(Exception):
    """The input cannot be used at all (unreadable, unknown header, no usable row): one line for the user."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One pod's requests and usage at one time. `node` "" means unplaced (to be packed)."""

    node: str
    pod: str
    unix_s: float
    cpu_request_cores: float
    cpu_usage_cores: float
    memory_request_bytes: float
    memory_usage_bytes: float


@dataclass(slots=True)
class TraceRows:
    """What a reader produced: the usable samples (each pod's in time order) and the skipped rows by reason."""

    samples: list[Sample]
    skipped: dict[str, int] = field(default_factory=dict)


def detect_format(header: list[str]) -> Format:
    names = tuple(h.strip() for h in header)
    for fmt, expected in HEADERS.items():
        if names == expected:
            return fmt
    raise TraceError(
        f"unknown header {','.join(names)[:120]!r}: expected {','.join(LONG_HEADER)!r} "
        f"or {','.join(BITBRAINS_HEADER)!r}"
    )


def _open_text(path: str) -> io.TextIOWrapper:
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", newline="")
    # utf-8-sig: a byte-order mark (what spreadsheets write) is not part of the first column's name
    return open(path, encoding="utf-8-sig", newline="")  # closed by the caller


@contextlib.contextmanager
def open_csv(path: str, fmt: Format | None = None) -> Iterator[tuple[Iterator[list[str]], Format]]:
    """The data rows of the CSV file at `path` (gzip or plain) and its schema, checked against `fmt`; every way
    the file cannot be read is a TraceError naming it."""
    try:
        with _open_text(path) as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                raise TraceError(f"{path}: empty file")
            try:
                found = detect_format(header)
            except TraceError as exc:
                raise TraceError(f"{path}: {exc}") from None
            if fmt is not None and fmt != found:
                raise TraceError(f"{path}: header is the {found} format, not {fmt}")
            yield reader, found
    except (OSError, UnicodeDecodeError, EOFError, csv.Error) as exc:
        raise TraceError(f"{path}: cannot read it: {exc}") from exc


def read_trace(path: str, fmt: Format | None = None) -> TraceRows:
    """Every usable sample of the CSV file at `path` (gzip or plain); raises TraceError when none is usable."""
    with open_csv(path, fmt) as (reader, found):
        rows = parse_rows(reader, found)
    if not rows.samples:
        raise TraceError(f"{path}: no usable row ({no_row_reasons(rows.skipped)})")
    return rows


def no_row_reasons(skipped: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())) or "no data rows"


def parse_rows(rows: Iterable[list[str]], fmt: Format) -> TraceRows:
    """Samples from the data rows (header removed) of schema `fmt`, malformed rows counted and skipped."""
    skipped: Counter[str] = Counter()
    last: dict[tuple[str, str], float] = {}
    out: list[Sample] = []
    append = out.append
    for fields in parse_fields(rows, fmt, skipped):
        sample = Sample(*fields)
        key = (sample.node, sample.pod)
        prev = last.get(key)
        if prev is not None and sample.unix_s <= prev:
            skipped["time_backwards" if sample.unix_s < prev else "duplicate_time"] += 1
            continue
        last[key] = sample.unix_s
        append(sample)
    return TraceRows(out, dict(sorted(skipped.items())))


_INF = math.inf

#: One row's fields once parsed and checked: the fields of `Sample` in order.
Fields = tuple[str, str, float, float, float, float, float]


def parse_fields(rows: Iterable[list[str]], fmt: Format, skipped: Counter[str]) -> Iterator[Fields]:
    """The fields of every data row of schema `fmt` whose numbers are usable (the checks that need no other
    row); the others are counted in `skipped` by reason."""
    return (_bitbrains if fmt == "bitbrains" else _long)(rows, skipped)


def _reject(fields: list[str], skipped: Counter[str]) -> None:
    """Count why numeric `fields` were refused (the slow path: only for a row that failed the fast one)."""
    try:
        values = [float(x) for x in fields]
    except ValueError:
        skipped["not_a_number"] += 1
        return
    skipped["not_a_number" if not all(math.isfinite(v) for v in values) else "negative"] += 1


def _bitbrains(rows: Iterable[list[str]], skipped: Counter[str]) -> Iterator[Fields]:
    for row in rows:
        if len(row) != 7:
            if not row:
                continue  # a blank line is not a row
            skipped["column_count"] += 1
            continue
        try:
            t, cores, prov, used, mprov, mused = (
                float(row[1]),
                float(row[2]),
                float(row[3]),
                float(row[4]),
                float(row[5]),
                float(row[6]),
            )
        except ValueError:
            skipped["not_a_number"] += 1
            continue
        if not (
            0.0 <= t < _INF
            and 0.0 <= cores < _INF
            and 0.0 <= prov < _INF
            and 0.0 <= used < _INF
            and 0.0 <= mprov < _INF
            and 0.0 <= mused < _INF
        ):
            _reject(row[1:], skipped)
            continue
        if cores == 0.0 or prov == 0.0:
            skipped["zero_cores"] += 1
            continue
        yield ("", row[0].strip(), t, cores, used * cores / prov, mprov * 1024.0, mused * 1024.0)


def _long(rows: Iterable[list[str]], skipped: Counter[str]) -> Iterator[Fields]:
    for row in rows:
        if len(row) != 7:
            if not row:
                continue  # a blank line is not a row
            skipped["column_count"] += 1
            continue
        pod = row[1].strip()
        if not pod:
            skipped["empty_pod"] += 1
            continue
        try:
            t, creq, cuse, mreq, muse = float(row[2]), float(row[3]), float(row[4]), float(row[5]), float(row[6])
        except ValueError:
            skipped["not_a_number"] += 1
            continue
        if not (
            0.0 <= t < _INF and 0.0 <= creq < _INF and 0.0 <= cuse < _INF and 0.0 <= mreq < _INF and 0.0 <= muse < _INF
        ):
            _reject(row[2:], skipped)
            continue
        yield (row[0].strip(), pod, t, creq, cuse, mreq, muse)


def csv_batches(
    path: str, fmt: Format | None, pods: Pods, skipped: Counter[str], rows: int = 1 << 18
) -> Iterator[Batch]:
    """The CSV file's rows whose numbers are usable, as batches of at most `rows` rows in file order (the checks
    that need a pod's history are `colo_sim.columns.Intake`'s); skipped rows counted in `skipped`."""
    with open_csv(path, fmt) as (reader, found):
        code_of = pods.code
        codes: list[int] = []
        values: list[float] = []
        for node, pod, t, creq, cuse, mreq, muse in parse_fields(reader, found, skipped):
            codes.append(code_of(node, pod))
            values += (t, creq, cuse, mreq, muse)
            if len(codes) >= rows:
                yield _batch(codes, values)
                codes, values = [], []
        if codes:
            yield _batch(codes, values)


def _batch(codes: list[int], values: list[float]) -> Batch:
    import numpy as np  # here: the module is read by colo-sim before it checks that numpy is installed

    from colo_sim.columns import Batch

    table = np.array(values, np.float64).reshape(-1, 5)
    return Batch(np.array(codes, np.int64), *(np.ascontiguousarray(table[:, i]) for i in range(5)))
