"""colo-sim's terminal table (policy × resource) and its progress bar."""

from __future__ import annotations

import sys
from typing import TextIO

from colo_sim.replay import RESOURCES, Result

UNITS = {"cpu": "core-h", "memory": "GiB-h"}


def table(result: Result) -> str:
    """The policies' figures, one row per policy and resource."""
    head = (
        f"{'policy':<16} {'resource':<8} {'lent':>14} {'oracle_fraction':>16} {'violation_rate':>15} "
        f"{'violation_p99':>14}"
    )
    lines = [
        f"{result.nodes} nodes, {result.pods} pods, {result.steps} steps of {result.step_s:g} s scored per node, "
        f"horizon {result.horizon_s:g} s",
        head,
        "-" * len(head),
    ]
    for name, figures in result.policies.items():
        for resource in RESOURCES:
            f = figures[resource]
            lent = f"{f['lent']:,.0f} {UNITS[resource]}"
            lines.append(
                f"{name:<16} {resource:<8} {lent:>14} {f['oracle_fraction']:>16.3f} "
                f"{f['violation_rate']:>15.4f} {f['violation_p99']:>14.3f}"
            )
    if result.skipped_rows:
        lines.append("skipped rows: " + ", ".join(f"{k} {v}" for k, v in result.skipped_rows.items()))
    return "\n".join(lines)


class Progress:
    """A one-line bar on `stream`, drawn only when it is a terminal."""

    def __init__(self, stream: TextIO | None = None, width: int = 30, label: str = "replaying") -> None:
        self.stream = sys.stderr if stream is None else stream
        self.width = width
        self.label = label
        self.on = self.stream.isatty()

    def __call__(self, done: int, total: int) -> None:
        if not self.on or total <= 0:
            return
        filled = self.width * done // total
        self.stream.write(
            f"\rcolo-sim: {self.label} [{'#' * filled}{' ' * (self.width - filled)}] {done}/{total} nodes"
        )
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()
