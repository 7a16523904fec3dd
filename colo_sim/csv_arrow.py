"""The CSV trace read by pyarrow's streaming CSV reader: the same rows and skip counts as the standard
library's reader (`colo_sim.trace.csv_batches`), parsed in C in blocks of a few MB — a third of the CPU on
the shared trace (1.2 s instead of 3.7 s) — and never the whole file at once; `read_csv` says when it is used.

pyarrow parses a number a little more strictly than Python's `float()` (no surrounding spaces, no `_`
between digits): a file with such a number makes this reader give up (`Unsupported`), and the caller reads
the file again with the standard library's reader, which accepts them. Everything pyarrow takes as a missing
value (an empty field, `NA`, `NaN`, `null`, …) is one that `float()` refuses or reads as NaN:
`not_a_number` either way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np

from colo_sim.columns import Batch, Intake, Pods, usable
from colo_sim.trace import BITBRAINS_HEADER, HEADERS, Format, TraceError, open_csv

#: Bytes of the file parsed at a time.
BLOCK = 1 << 22


class Unsupported(Exception):
    """pyarrow cannot read this file as Python would: read it with the standard library instead."""


def arrow_csv_batches(path: str, fmt: Format | None, pods: Pods, skipped: Counter[str]) -> Iterator[Batch]:
    """As `colo_sim.trace.csv_batches`; raises Unsupported (possibly after some batches: start again) where
    pyarrow and Python would read a field differently."""
    try:
        import pyarrow as pa
        import pyarrow.csv as pacsv
    except ImportError:
        raise Unsupported("no pyarrow") from None
    with open_csv(path, fmt) as (_, found):  # the header, checked as the standard reader checks it
        pass
    names = list(HEADERS[found])
    ids = ("vm",) if found == "bitbrains" else ("node", "pod")
    types = {n: (pa.string() if n in ids else pa.float64()) for n in names}

    def bad_row(row: Any) -> str:
        skipped["column_count"] += 1
        return "skip"

    with open(path, "rb") as probe:
        gz = probe.read(2) == b"\x1f\x8b"
    try:
        stream = pa.input_stream(path, compression="gzip" if gz else None)
        read = pacsv.ReadOptions(column_names=names, skip_rows=1, block_size=BLOCK, use_threads=False)
        parse = pacsv.ParseOptions(invalid_row_handler=bad_row, ignore_empty_lines=True, newlines_in_values=True)
        convert = pacsv.ConvertOptions(column_types=types, strings_can_be_null=False, quoted_strings_can_be_null=False)
        reader = pacsv.open_csv(stream, read_options=read, parse_options=parse, convert_options=convert)
        with reader:
            for rb in reader:
                yield _checked(rb, found, pods, skipped)
    except pa.ArrowInvalid as exc:
        raise Unsupported(str(exc)) from None
    except (OSError, pa.ArrowException) as exc:
        raise TraceError(f"{path}: cannot read it: {exc}") from None


def _checked(rb: Any, fmt: Format, pods: Pods, skipped: Counter[str]) -> Batch:
    import pyarrow as pa
    import pyarrow.compute as pc

    def floats(name: str) -> np.ndarray[Any, np.dtype[np.float64]]:
        return np.asarray(pc.fill_null(rb.column(name), np.nan).to_numpy(zero_copy_only=False), np.float64)

    if fmt == "bitbrains":
        pod_col = pc.utf8_trim_whitespace(rb.column("vm"))
        raw = np.vstack([floats(n) for n in BITBRAINS_HEADER[1:]])  # t, cores, prov, used, mprov, mused
        ok = usable(raw, np.zeros(rb.num_rows, bool), skipped)
        zero = ok & ((raw[1] == 0.0) | (raw[2] == 0.0))
        if zero.any():
            skipped["zero_cores"] += int(zero.sum())
            ok &= ~zero
        t, cores, prov, used, mprov, mused = raw[:, ok]
        values = [t, used * cores / prov, mprov * 1024.0, mused * 1024.0]
        values.insert(1, cores)
        node = ""
        node_col = None
    else:
        pod_col = pc.utf8_trim_whitespace(rb.column("pod"))
        raw = np.vstack(
            [
                floats(n)
                for n in (
                    "unix_s",
                    "cpu_request_cores",
                    "cpu_usage_cores",
                    "memory_request_bytes",
                    "memory_usage_bytes",
                )
            ]
        )
        empty = np.asarray(pc.equal(pod_col, "").to_numpy(zero_copy_only=False), bool)
        ok = usable(raw, empty, skipped)
        values = list(raw[:, ok])
        node = None
        node_col = pc.filter(pc.utf8_trim_whitespace(rb.column("node")), pa.array(ok))
    from colo_sim.parquet_trace import coded

    if not ok.any():
        e = np.empty(0)
        return Batch(np.empty(0, np.int64), e, e, e, e, e)
    codes = coded(pc.filter(pod_col, pa.array(ok)), node, node_col, pods)
    return Batch(codes, *(np.ascontiguousarray(v) for v in values))


def read_csv(path: str, fmt: Format | None, fast: bool = False) -> tuple[Pods, Intake]:
    """Every usable row of the CSV file at `path` through an Intake (kept); TraceError when none is usable.

    `fast`: pyarrow's reader first (the standard library's when it gives up). Measured on the shared trace it
    saves 2.7 s of CPU of the whole replay's 28.7 s, but the process then peaks at 429 MiB instead of 260 MiB
    (pyarrow's libraries, its reader's buffers and what the allocator keeps of them): `colo-sim convert` and a
    parallel replay (where the read is the part no other process shares) use it, `--jobs 1` does not."""
    from colo_sim.trace import csv_batches, no_row_reasons

    for reader in (arrow_csv_batches, csv_batches) if fast else (csv_batches,):
        pods = Pods()
        intake = Intake(pods, keep=True)
        skipped: Counter[str] = Counter()
        try:
            for batch in reader(path, fmt, pods, skipped):
                intake.add(batch)
        except Unsupported:
            continue
        break
    intake.skipped.update(skipped)
    if intake.summary.samples == 0:
        raise TraceError(f"{path}: no usable row ({no_row_reasons(dict(intake.skipped))})")
    return pods, intake
