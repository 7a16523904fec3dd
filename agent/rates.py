"""Counters to rates: the delta over the real elapsed monotonic time, never negative, never from one sample."""

from __future__ import annotations

from collections.abc import Hashable


class CounterRates:
    """Remembers each counter's last value and time.

    A first sample has no rate; a counter that went backwards (reset, wrap, recreated cgroup) restarts
    from its new value instead of producing a negative rate; a late tick divides by the time that really
    passed. Times are monotonic, so wall-clock steps change nothing.
    """

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[Hashable, tuple[float, float]] = {}

    def rate(self, key: Hashable, value: float, t: float) -> float | None:
        prev = self._last.get(key)
        self._last[key] = (value, t)
        if prev is None:
            return None
        dv, dt = value - prev[0], t - prev[1]
        if dv < 0 or dt <= 0:
            return None
        return dv / dt

    def __len__(self) -> int:
        return len(self._last)
