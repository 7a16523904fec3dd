"""Counters to rates, the only place the agent turns one: the delta over the real elapsed monotonic time,
never negative, never from one sample. `CounterRates` holds single counters (network bytes, the node's busy
time); `CpuRates` a cgroup's CPU usage and CFS periods together, so cores and the throttled ratio come from the
same two readings. `counter_rate` and `cpu_rate` are the same of two readings, for the collectors that keep
the last one in a slot of their own (a pod's, a container's)."""

from __future__ import annotations

from collections.abc import Hashable


class CounterRates:
    """Remembers each counter's last value and time.

    A first sample has no rate; a counter that went backwards (reset, wrap, recreated cgroup) restarts
    from its new value instead of producing a negative rate (or, with `clamp`, counts as no change: /proc/stat's
    idle time may step backwards on tickless kernels); a late tick divides by the time that really passed.
    Times are monotonic, so wall-clock steps change nothing.
    """

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[Hashable, tuple[float, float]] = {}

    def rate(self, key: Hashable, value: float, t: float, *, clamp: bool = False) -> float | None:
        prev = self._last.get(key)
        self._last[key] = (value, t)
        if prev is None:
            return None
        return counter_rate(prev[0], prev[1], value, t, clamp=clamp)

    def forget(self, key: Hashable) -> None:
        self._last.pop(key, None)

    def __len__(self) -> int:
        return len(self._last)


class CpuRates:
    """Per cgroup, the last (time, usage ns, CFS periods, throttled periods): cores used and the share of
    throttled periods since the previous reading. One tuple per cgroup, replaced in place each pass."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, int, int, int]] = {}

    def rate(
        self, cgroup: str, t: float, usage_ns: int, nr_periods: int, nr_throttled: int
    ) -> tuple[float | None, float | None]:
        """(cores, throttled ratio); (None, None) on a first reading or when a counter went backwards (the
        cgroup was recreated)."""
        prev = self._last.get(cgroup)
        self._last[cgroup] = (t, usage_ns, nr_periods, nr_throttled)
        if prev is None:
            return None, None
        return cpu_rate(*prev, t, usage_ns, nr_periods, nr_throttled)

    def forget(self, cgroup: str) -> None:
        self._last.pop(cgroup, None)

    def __len__(self) -> int:
        return len(self._last)


def counter_rate(v0: float, t0: float, value: float, t: float, *, clamp: bool = False) -> float | None:
    """`CounterRates.rate` of two readings: None when no time passed or the counter went backwards (with
    `clamp`, no change)."""
    dv, dt = value - v0, t - t0
    if dt <= 0:
        return None
    if dv < 0:
        return 0.0 if clamp else None
    return dv / dt


def cpu_rate(
    t0: float, usage0: int, periods0: int, throttled0: int, t: float, usage_ns: int, nr_periods: int, nr_throttled: int
) -> tuple[float | None, float | None]:
    """`CpuRates.rate` of two readings, for a caller that keeps the last one in a slot of its own (the
    collectors keep one per cgroup): (None, None) when no time passed or a counter went backwards."""
    dt = t - t0
    if dt <= 0 or usage_ns < usage0 or nr_periods < periods0:
        return None, None
    periods = nr_periods - periods0
    throttled = nr_throttled - throttled0
    ratio = (min(1.0, throttled / periods) if throttled >= 0 else None) if periods > 0 else 0.0
    return (usage_ns - usage0) / 1e9 / dt, ratio
