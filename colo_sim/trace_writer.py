"""Samples saved as a trace file (`colo-sim --save FILE`), so a pull from Prometheus can be kept and replayed
later with `--trace`.

The columns are the long format's (`node,pod,unix_s,cpu_request_cores,cpu_usage_cores,memory_request_bytes,
memory_usage_bytes`): the fields of `Sample` in order. Numbers are written as Python's shortest exact form,
so a file read back gives the same floats.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path

from colo_sim.trace import LONG_HEADER, Sample


def write_csv(samples: Iterable[Sample], path: str | Path) -> int:
    """Write `samples` to `path` (plain text, header first) in the given order; returns the rows written."""
    rows = 0
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(LONG_HEADER)
        for s in samples:
            writer.writerow(
                (
                    s.node,
                    s.pod,
                    repr(s.unix_s),
                    repr(s.cpu_request_cores),
                    repr(s.cpu_usage_cores),
                    repr(s.memory_request_bytes),
                    repr(s.memory_usage_bytes),
                )
            )
            rows += 1
    return rows
