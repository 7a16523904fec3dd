"""How a policy's lending compares with the peak oracle's (definitions in docs/simulation.md).

At each evaluated node-step, with L the policy's capacity lent to batch and L* the oracle's:

- violation: L > L* (batch holds what online pods need within the horizon);
- violation_rate = violations / node-steps;
- violation_p99 = the 99th percentile (type 7) of (L − L*) / allocatable over the violating steps (0 without any);
- oracle_fraction = Σ min(L, L*) / Σ L* (0 when Σ L* is 0);
- lent = Σ L × step, in core-hours (cpu) or GiB-hours (memory).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from agent.windows.store import quantile

GIB = float(1 << 30)


def future_max(values: Sequence[float], width: int) -> list[float]:
    """max(values[k : k + width]) for every k (the window shortened at the end); O(n) with a deque."""
    n = len(values)
    out = [0.0] * n
    window: deque[int] = deque()  # indexes of decreasing values within [k, k + width)
    for k in range(n - 1, -1, -1):
        v = values[k]
        while window and values[window[-1]] <= v:
            window.pop()
        window.append(k)
        while window[0] >= k + width:
            window.popleft()
        out[k] = values[window[0]]
    return out


def oracle_lend(usage: Sequence[float], allocatable: float, width: int) -> list[float]:
    """L*(k) = max(0, allocatable − max(usage over steps [k, k + width)))."""
    return [max(0.0, allocatable - m) for m in future_max(usage, width)]


@dataclass(slots=True)
class Tally:
    """One policy's running sums over node-steps for one resource."""

    steps: int = 0
    violations: int = 0
    lent: float = 0.0  # Σ L (cores or bytes, per step)
    safe: float = 0.0  # Σ min(L, L*)
    possible: float = 0.0  # Σ L*
    excess: list[float] = field(default_factory=list)  # (L − L*) / allocatable of each violation

    def add(self, lent: Sequence[float], oracle: Sequence[float], allocatable: float, lo: int, hi: int) -> None:
        """Count the node-steps lo..hi-1."""
        safe = possible = total = 0.0
        excess = self.excess
        for k in range(lo, hi):
            x, o = lent[k], oracle[k]
            total += x
            possible += o
            if x > o:
                safe += o
                excess.append((x - o) / allocatable)
            else:
                safe += x
        self.violations = len(excess)
        self.steps += hi - lo
        self.lent += total
        self.safe += safe
        self.possible += possible

    def summary(self, step_s: float, resource: str) -> dict[str, float]:
        unit = step_s / 3600.0 / (GIB if resource == "memory" else 1.0)
        return {
            "lent": self.lent * unit,
            "oracle_fraction": self.safe / self.possible if self.possible > 0 else 0.0,
            "violation_rate": self.violations / self.steps if self.steps else 0.0,
            "violation_p99": quantile(sorted(self.excess), 0.99) if self.excess else 0.0,
        }
