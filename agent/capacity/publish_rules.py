"""When a published capacity number changes: the pure rules behind agent/capacity/owner.py (docs/publishing.md).

- smoothing: the number a pass proposes is the mean of the values computed in the last
  `publish_window_seconds` (`WindowMean`): one noisy sample of system usage moves it by 1/window;
- the floor: `kubernetes.io/batch-*` never go below what the node's batch pods request (kubelet re-admits
  every running pod against status.allocatable when it restarts: below that it rejects and kills them);
- hysteresis in both directions: a value moves only when it leaves the band `update_fraction` around what the
  node carries, and then at most once per `update_interval_seconds`;
- except for safety, written at once: a value below the floor, and a drop while the node is evicting, not
  sampled or not computed, the resource is under pressure (its smoothed usage within
  `pressure_margin_percent` points of eviction's high watermark) or deselected, or the agent is stopping;
- under pressure a drop goes to its target in one write: the pass's own value when it is below the window's
  mean (`proposed`), not the mean trailing down to it a step a pass.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from dataclasses import dataclass


class WindowMean:
    """The mean of the values of the last `seconds` (monotonic time), kept as a running sum: O(1) per sample."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._q: collections.deque[tuple[float, int]] = collections.deque()
        self._sum = 0

    def add(self, t: float, value: int) -> int:
        self._q.append((t, value))
        self._sum += value
        while self._q[0][0] <= t - self.seconds:
            self._sum -= self._q.popleft()[1]
        return self._sum // len(self._q)

    def clear(self) -> None:
        self._q.clear()
        self._sum = 0


@dataclass(frozen=True, slots=True)
class Band:
    """The hysteresis: relative band and the minimum seconds between two writes not made for safety."""

    fraction: float
    min_interval: float


def proposed(smoothed: int, computed: int, pressing: bool) -> int:
    """The value a pass proposes for publishing: the window's mean (`smoothed`); under pressure, this pass's
    own value (`computed`) when it is lower. The mean follows a fall only pass by pass (1/window of it each
    second): a drop written at once would follow it down in as many writes (1274 → 1260 → … → 1200 in 6 s);
    the pass's value is where it is going, written once."""
    return min(smoothed, computed) if pressing else smoothed


def should_write(
    old: int | None,
    new: int,
    band: Band,
    *,
    since_last_write: float | None,
    shrink_now: bool = False,
    floor: int = 0,
) -> bool:
    """Whether a published value moves from `old` (what the node carries; None: absent or unreadable) to `new`.

    Written at once: an absent value, a value below `floor` (running pods would not be re-admitted), and a
    drop when `shrink_now` (safety). Otherwise only outside the band and not within `min_interval` of the
    last write (`since_last_write` None: no write yet by this agent)."""
    if old is None:
        return True
    if old == new:
        return False
    if old < floor:
        return True
    if new < old and shrink_now:
        return True
    if abs(new - old) <= band.fraction * max(abs(old), 1):
        return False
    return since_last_write is None or since_last_write >= band.min_interval


def floored(values: Mapping[str, int], floor: Mapping[str, int]) -> dict[str, int]:
    """Per resource max(value, floor): free ≤ 0 places nothing new, yet every running pod still fits."""
    return {k: max(v, floor.get(k, 0)) for k, v in values.items()}
