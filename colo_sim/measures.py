"""How a policy's lending compares with the peak oracle's (definitions in docs/simulation.md).

At each evaluated node-step, with L the policy's capacity lent to batch and L* the oracle's:

- violation: L > L* (batch holds what online pods need within the horizon);
- violation_rate = violations / node-steps;
- violation_p99 = the 99th percentile (type 7) of (L − L*) / allocatable over the violating steps (0 without any);
- oracle_fraction = Σ min(L, L*) / Σ L* (0 when Σ L* is 0);
- lent = Σ L × step, in core-hours (cpu) or GiB-hours (memory).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from agent.windows.store import quantile

GIB = float(1 << 30)

#: A per-step series as a policy returns it: a list or a numpy array of floats.
Series = Sequence[float] | npt.NDArray[np.float64]


def future_max(values: Series, width: int) -> npt.NDArray[np.float64]:
    """max(values[k : k + width]) for every k (the window shortened at the end)."""
    v = np.asarray(values, np.float64)
    n = len(v)
    if n == 0:
        return v.copy()
    width = max(1, min(width, n))
    padded = np.concatenate([v, np.full(width - 1, -np.inf)])
    out = np.lib.stride_tricks.sliding_window_view(padded, width).max(axis=1)
    return np.asarray(out, np.float64)


def oracle_lend(usage: Series, allocatable: float, width: int) -> npt.NDArray[np.float64]:
    """L*(k) = max(0, allocatable − max(usage over steps [k, k + width)))."""
    return np.maximum(0.0, allocatable - future_max(usage, width))


@dataclass(frozen=True, slots=True)
class Part:
    """One node's contribution to a Tally: its sums over its scored steps, each added in step order."""

    steps: int
    lent: float
    safe: float
    possible: float
    excess: npt.NDArray[np.float64]


def _ordered_sum(values: npt.NDArray[np.float64]) -> float:
    """Σ values added one after another from the first (as a loop would; numpy's sum adds pairwise)."""
    return 0.0 + float(np.cumsum(values)[-1]) if len(values) else 0.0


@dataclass(slots=True)
class Tally:
    """One policy's running sums over node-steps for one resource."""

    steps: int = 0
    violations: int = 0
    lent: float = 0.0  # Σ L (cores or bytes, per step)
    safe: float = 0.0  # Σ min(L, L*)
    possible: float = 0.0  # Σ L*
    excess: list[float] = field(default_factory=list)  # (L − L*) / allocatable of each violation

    @staticmethod
    def part(lent: Series, oracle: Series, allocatable: float, lo: int, hi: int) -> Part:
        """One node's sums over its node-steps lo..hi-1."""
        x = np.asarray(lent, np.float64)[lo:hi]
        o = np.asarray(oracle, np.float64)[lo:hi]
        over = x > o
        return Part(
            max(0, hi - lo),
            _ordered_sum(x),
            _ordered_sum(np.where(over, o, x)),
            _ordered_sum(o),
            (x[over] - o[over]) / allocatable,
        )

    def merge(self, part: Part) -> None:
        self.excess.extend(part.excess.tolist())
        self.violations = len(self.excess)
        self.steps += part.steps
        self.lent += part.lent
        self.safe += part.safe
        self.possible += part.possible

    def add(self, lent: Series, oracle: Series, allocatable: float, lo: int, hi: int) -> None:
        """Count the node-steps lo..hi-1."""
        self.merge(self.part(lent, oracle, allocatable, lo, hi))

    def summary(self, step_s: float, resource: str) -> dict[str, float]:
        unit = step_s / 3600.0 / (GIB if resource == "memory" else 1.0)
        return {
            "lent": self.lent * unit,
            "oracle_fraction": self.safe / self.possible if self.possible > 0 else 0.0,
            "violation_rate": self.violations / self.steps if self.steps else 0.0,
            "violation_p99": quantile(sorted(self.excess), 0.99) if self.excess else 0.0,
        }
