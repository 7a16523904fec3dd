"""Rolling usage windows of every series, bounded in memory and cheap to feed (the agent's window store).

The grid and the definition of every window are in `agent.windows.grid`, one series' windows in
`agent.windows.stats` (statistics) over `agent.windows.feed` (its state and the 1 Hz add); this module keeps
the names the rest of Colo imports from `agent.windows.store`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator

from agent.windows.grid import (
    BUCKET_SECONDS,
    DAY_SLOTS,
    DEFAULT_MAX_GAP,
    EMPTY,
    MINUTE_SLOTS,
    PHASE_PERIOD,
    QUANTILES,
    WINDOW_NAMES,
    WINDOW_SPANS,
    SeriesKey,
    SeriesState,
    WindowValue,
    _valid,
    quantile,
    wall_aligned_phase,
)
from agent.windows.stats import SeriesWindows

_EMPTY_ROW = (EMPTY,) * len(WINDOW_NAMES)

__all__ = [
    "BUCKET_SECONDS",
    "DAY_SLOTS",
    "DEFAULT_MAX_GAP",
    "EMPTY",
    "MINUTE_SLOTS",
    "PHASE_PERIOD",
    "QUANTILES",
    "WINDOW_NAMES",
    "WINDOW_SPANS",
    "SeriesKey",
    "SeriesState",
    "SeriesWindows",
    "WindowStore",
    "WindowValue",
    "quantile",
    "wall_aligned_phase",
]


#: The scopes whose series also keep hourly maxima for a week (the time-of-day profile predictor): the node's
#: online and system usage, four series a node; 170 floats (1.4 KB) each, persisted with them.
HOURLY_SCOPES = frozenset({"online", "system"})


def online_key(resource: str) -> SeriesKey:
    """The window series of the node's online usage (`NodeState`'s: all pods' − offline pods'; cores or bytes),
    fed every pass."""
    return ("online", "", resource)


def system_key(resource: str) -> SeriesKey:
    """The window series of the node's usage outside every pod (cores or bytes), fed every pass."""
    return ("system", "", resource)


class WindowStore:
    """Windows of every series, keyed by (scope, id, resource). Thread-safe: one lock around each call.

    `lock` is that lock (reentrant): a reader that wants several calls to see the same tick holds it around
    them, and the agent's view hands out this very lock, so the store has one lock, not two."""

    __slots__ = ("_lock", "_max_gap", "_phase", "_series", "notes", "rejected")

    def __init__(self, *, phase: float = 0.0, max_gap: float = DEFAULT_MAX_GAP) -> None:
        SeriesWindows(phase=phase, max_gap=max_gap)  # validates both
        self._phase = phase % PHASE_PERIOD
        self._max_gap = float(max_gap)
        self._series: dict[SeriesKey, SeriesWindows] = {}
        self._lock = threading.RLock()
        self.rejected = 0  # first samples of unknown series that were rejected
        #: small named figures kept with the windows across restarts (the learned lending margins,
        #: agent.capacity.margin); finite floats only, saved in the state file's header
        self.notes: dict[str, float] = {}

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    @property
    def phase(self) -> float:
        """Offset of the minute grid in this store's time base (see the module docstring)."""
        return self._phase

    @property
    def max_gap(self) -> float:
        return self._max_gap

    def add(self, key: SeriesKey, t: float, value: float) -> None:
        """Record one sample of `key`, creating the series on its first valid sample."""
        with self._lock:
            sw = self._series.get(key)
            if sw is None:
                if not _valid(t, value):
                    self.rejected += 1
                    return
                sw = self._series[key] = SeriesWindows(
                    phase=self._phase, max_gap=self._max_gap, hours=key[0] in HOURLY_SCOPES
                )
            sw.add(t, value)

    def add_many(self, t: float, samples: Iterable[tuple[SeriesKey, float]]) -> None:
        """Record one tick of many series under a single lock acquisition."""
        with self._lock:
            series = self._series
            for key, value in samples:
                sw = series.get(key)
                if sw is None:
                    if not _valid(t, value):
                        self.rejected += 1
                        continue
                    sw = series[key] = SeriesWindows(
                        phase=self._phase, max_gap=self._max_gap, hours=key[0] in HOURLY_SCOPES
                    )
                sw.add(t, value)

    def get(self, key: SeriesKey) -> SeriesWindows | None:
        """The series object itself (not locked: use it from the thread that feeds the store)."""
        return self._series.get(key)

    def stats(self, key: SeriesKey, now: float) -> dict[str, WindowValue]:
        with self._lock:
            sw = self._series.get(key)
            if sw is None:
                return dict.fromkeys(WINDOW_NAMES, EMPTY)
            return sw.stats(now)

    def row(self, key: SeriesKey, now: float) -> tuple[WindowValue, ...]:
        """Every window of `key` at `now` in WINDOW_NAMES order (the scrape path: no dict per series)."""
        with self._lock:
            sw = self._series.get(key)
            if sw is None:
                return _EMPTY_ROW
            return sw.row(now)

    def value(self, key: SeriesKey, name: str, now: float) -> WindowValue:
        with self._lock:
            sw = self._series.get(key)
            if sw is None:
                if name not in WINDOW_SPANS:
                    raise KeyError(f"unknown window {name!r}")
                return EMPTY
            return sw.value(name, now)

    def values(self, key: SeriesKey, names: tuple[str, ...], now: float) -> tuple[WindowValue, ...]:
        """Several windows of `key` at `now`, in the order of `names`, under one lock and one lookup (a capacity
        pass reads two or three windows of each series it asks)."""
        with self._lock:
            sw = self._series.get(key)
            if sw is None:
                for name in names:
                    if name not in WINDOW_SPANS:
                        raise KeyError(f"unknown window {name!r}")
                return (EMPTY,) * len(names)
            return sw.values(names, now)

    def values_of(self, keys: Iterable[SeriesKey], names: tuple[str, ...], now: float) -> list[tuple[WindowValue, ...]]:
        """`values` of each of `keys`, in their order, under one lock (a per-pod predictor reads every online
        pod's series in a pass)."""
        with self._lock:
            series = self._series
            empty: tuple[WindowValue, ...] | None = None
            out: list[tuple[WindowValue, ...]] = []
            for key in keys:
                sw = series.get(key)
                if sw is not None:
                    out.append(sw.values(names, now))
                else:
                    if empty is None:
                        for name in names:
                            if name not in WINDOW_SPANS:
                                raise KeyError(f"unknown window {name!r}")
                        empty = (EMPTY,) * len(names)
                    out.append(empty)
            return out

    def minute_means(self, key: SeriesKey, now: float) -> list[float]:
        """The last hour's per-minute means of `key` (`SeriesWindows.minute_means`); empty without the series."""
        with self._lock:
            sw = self._series.get(key)
            return [] if sw is None else sw.minute_means(now)

    def day_profile(self, key: SeriesKey, now: float, days: int) -> tuple[float | None, int]:
        """`SeriesWindows.day_profile` of `key`: (None, 0) without the series or its hourly maxima."""
        with self._lock:
            sw = self._series.get(key)
            return (None, 0) if sw is None else sw.day_profile(now, days)

    def days_peak(self, key: SeriesKey, now: float, days: int) -> float | None:
        """`SeriesWindows.days_peak` of `key`: None without the series or its hourly maxima."""
        with self._lock:
            sw = self._series.get(key)
            return None if sw is None else sw.days_peak(now, days)

    def put(self, key: SeriesKey, series: SeriesWindows) -> None:
        """Insert or replace a series (it must use this store's grid phase)."""
        if series.phase != self._phase:
            raise ValueError(f"series phase {series.phase} differs from the store's {self._phase}")
        with self._lock:
            self._series[key] = series

    def retain(self, keep: Callable[[SeriesKey], bool]) -> int:
        """Drop the series `keep` rejects (vanished pods); returns how many were dropped."""
        with self._lock:
            keys = list(self._series)
        gone = [key for key in keys if not keep(key)]  # outside the lock: `keep` may use the store
        with self._lock:
            return sum(self._series.pop(key, None) is not None for key in gone)

    def expire(self, now: float) -> int:
        """Drop series no window sees any more at `now`; returns how many were dropped."""
        with self._lock:
            gone = [key for key, sw in self._series.items() if not sw.has_data(now)]
            for key in gone:
                del self._series[key]
            return len(gone)

    def keys(self) -> list[SeriesKey]:
        with self._lock:
            return list(self._series)

    def __iter__(self) -> Iterator[SeriesKey]:
        """Iterates over a copy of the keys (series may come and go meanwhile)."""
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._series)

    def __contains__(self, key: object) -> bool:
        return key in self._series

    def snapshot(self) -> list[tuple[SeriesKey, SeriesState]]:
        """Copies of every series' state, taken under the lock (for `save_windows`)."""
        with self._lock:
            return [(key, sw.state()) for key, sw in self._series.items()]

    def restore(self, key: SeriesKey, state: SeriesState, *, shift: float, now: float) -> bool:
        """Insert a persisted series moved by `shift` onto this store's grid; False if nothing is left at
        `now` (then it is not inserted)."""
        sw = SeriesWindows.from_state(
            state, shift=shift, phase=self._phase, max_gap=self._max_gap, hours=key[0] in HOURLY_SCOPES
        )
        sw.expire(now)
        if not sw.has_data(now):
            return False
        with self._lock:
            self._series[key] = sw
        return True
