"""The minute grid of the rolling usage windows: spans, value type, quantiles, ring arrays, saved state.

The agent samples every series (node or pod, cpu or memory) once a second and needs crane-scheduler's and
node-exporter-plus's windows at scrape time. Memory is bounded by keeping raw samples only for the
shortest span that needs them (5 minutes) and deriving every longer window from per-minute aggregates.

Time base
    ``t`` and ``now`` are monotonic seconds (``time.monotonic()`` or a synthetic clock). Samples must come in
    non-decreasing ``t``; a sample older than the previous one, or with a non-finite time or value, is
    rejected (counted in ``rejected``). Gaps are missing samples, never interpolated. A query with ``now``
    earlier than the latest sample is answered as of that sample's time.

Minute grid
    Buckets are aligned to the grid ``B_k = phase + 60*k`` (``phase`` in [0, 300), so every fifth boundary
    starts a 5-minute slot). Bucket ``k`` holds the samples with ``B_(k-1) < t <= B_k``, i.e.
    ``k = ceil((t - phase) / 60)``. At time ``now`` the latest boundary is ``K = floor((now - phase) / 60)``.
    ``wall_aligned_phase`` puts the boundaries on whole wall-clock minutes, like a PromQL subquery.

Windows (each a ``WindowValue(value, coverage)``; value None when the window has no data)
    ``avg_1m``, ``avg_5m``
        mean of the raw samples with ``now - span < t <= now``.
    ``p50_5m`` .. ``p99_5m``
        percentiles of those 5-minute raw samples, linear interpolation between closest ranks (Hyndman-Fan
        type 7, numpy's default and Prometheus' ``quantile_over_time``): ``h = (n-1)q``,
        ``x[floor h] + (h - floor h) * (x[floor h + 1] - x[floor h])``.
    ``max_avg_1h``
        ``max_over_time(avg_over_time(x[5m])[1h:1m])``: the maximum over the 60 boundaries
        ``k in [K-59, K]`` of ``avg5(k)``, the mean of the samples in buckets ``k-4 .. k`` (the 5 minutes
        ending at ``B_k``). Boundaries with no sample in their 5 minutes are skipped. Only completed
        boundaries count (as in PromQL): a spike shows in ``avg_5m`` at once and here at the next
        boundary. The 1h percentiles likewise leave out the minute in progress.
    ``max_avg_1d``
        the same maximum over the boundaries ``k in [k0, K]`` with ``k0 = 5 * floor((K - 1439) / 5)``: the
        last 1440 boundaries, reaching back to the start of the 5-minute slot of the oldest one (1440 to
        1444 boundaries). The day is kept as one maximum per 5-minute slot, hence the slot-aligned start;
        for a peak, reaching up to 4 minutes further back is the safe side.
    ``p50_1h`` .. ``p99_1h``
        type-7 percentiles of the per-minute means of the buckets ``k in [K-59, K]`` that have samples
        (every minute weighs the same, however many samples it has).

Coverage (0..1): how much of the window's span the data covers
    Sample ``i`` covers ``d_i = min(t_i - t_(i-1), max_gap)`` seconds (``max_gap`` for a series' first
    sample; ``DEFAULT_MAX_GAP`` is 5 s for a 1 s tick), so a sampling gap longer than ``max_gap`` counts as
    uncovered. A window's coverage is
    ``min(1, sum(d_i) / span)`` over the samples it uses: the raw samples of the window for the raw
    windows (span 60 or 300 s); the samples of buckets ``[K-59, K]`` for the 1h windows (span 3600 s); the
    samples of buckets ``[k0, K]`` for ``max_avg_1d`` (span ``60 * (K - k0 + 1)``). A 1h window with 10
    minutes of 1 s samples reports ~0.167. A max-of-averages window can have a value while its coverage is
    ~0: its oldest averages reach 4 minutes back, before the window.

Memory per series: the raw samples of 5 minutes (two ``array('d')``), a 64-minute ring of per-minute
(sum, count, coverage, 5-minute average) and a 289-slot ring of per-5-minute (max average, coverage),
about 14 KB at 1 Hz whatever the history (and ~0.8 KB of the statistics' caches, `agent.windows.stats`).
``add`` is O(1) amortized; the hourly maximum is maintained incrementally (a cached argmax, rescanned only
when it leaves the hour).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from contract.windows import WINDOW_NAMES as WINDOW_NAMES  # the contract's names, shared with the controller

WINDOW_SPANS: dict[str, float] = {
    "avg_1m": 60.0,
    "avg_5m": 300.0,
    "max_avg_1h": 3600.0,
    "max_avg_1d": 86400.0,
    "p50_5m": 300.0,
    "p90_5m": 300.0,
    "p95_5m": 300.0,
    "p99_5m": 300.0,
    "p50_1h": 3600.0,
    "p90_1h": 3600.0,
    "p95_1h": 3600.0,
    "p99_1h": 3600.0,
}

#: The percentile windows and their quantile.
QUANTILES: dict[str, float] = {
    "p50_5m": 0.50,
    "p90_5m": 0.90,
    "p95_5m": 0.95,
    "p99_5m": 0.99,
    "p50_1h": 0.50,
    "p90_1h": 0.90,
    "p95_1h": 0.95,
    "p99_1h": 0.99,
}

SeriesKey = tuple[str, str, str]

#: Seconds one sample can stand for: a longer silence is a gap (uncovered time).
DEFAULT_MAX_GAP = 5.0
BUCKET_SECONDS = 60.0
#: Raw samples are kept for the longest raw window.
RAW_SPAN = 300.0
#: Boundaries per 5-minute average, per hour, per day; buckets per day slot.
AVG_BUCKETS = 5
HOUR_BUCKETS = 60
DAY_BUCKETS = 1440
SLOT_BUCKETS = 5
#: Grid period: phases are taken modulo this so that 5-minute slots map onto slots across restarts.
PHASE_PERIOD = BUCKET_SECONDS * SLOT_BUCKETS
#: Ring sizes: 60 completed minutes + the current one + slack for the pending 5-minute averages.
MINUTE_SLOTS = 64
#: Enough 5-minute slots for [k0, K] (at most 289 slots).
DAY_SLOTS = 289

_INF = math.inf
_NEG_INF = -math.inf
_COMPACT_AT = 64  # drop expired raw samples from the arrays' front in batches of this many
_FAR_PAST = -(1 << 62)

_P5 = tuple((n, q) for n, q in QUANTILES.items() if n.endswith("_5m"))
_P1H = tuple((n, q) for n, q in QUANTILES.items() if n.endswith("_1h"))


class WindowValue(NamedTuple):
    """One window's value (None without data) and the fraction of its span that data covers.

    A named tuple rather than a frozen dataclass: a scrape makes thousands, and a tuple is made in a third of
    the time."""

    value: float | None
    coverage: float  # 0..1


EMPTY = WindowValue(None, 0.0)


def wall_aligned_phase(mono_now: float, wall_now: float) -> float:
    """The grid phase that puts minute boundaries on whole wall-clock minutes (PromQL subquery alignment)."""
    return (mono_now - wall_now) % PHASE_PERIOD


def quantile(ordered: Sequence[float], q: float) -> float:
    """Type-7 percentile (linear between closest ranks) of an ascending, non-empty sequence."""
    h = (len(ordered) - 1) * q
    i = int(h)
    lo = ordered[i]
    if i + 1 < len(ordered):
        return lo + (h - i) * (ordered[i + 1] - lo)
    return lo


def _valid(t: float, value: float) -> bool:
    return _NEG_INF < t < _INF and _NEG_INF < value < _INF


def _zeros(n: int) -> array[float]:
    return array("d", bytes(8 * n))


def _neg_infs(n: int) -> array[float]:
    return array("d", [_NEG_INF]) * n


def _linear(ring: array[float], head: int) -> array[float]:
    """Ring contents oldest first, for indexes head-size+1 .. head."""
    i0 = (head + 1) % len(ring)
    return ring[i0:] + ring[:i0]


def _ring(linear: array[float], head: int) -> array[float]:
    """Inverse of `_linear`: place oldest-first contents so that index x lands at x % size."""
    size = len(linear)
    cut = size - (head + 1) % size
    return linear[cut:] + linear[:cut]


def _ring_slice(ring: array[float], lo: int, hi: int) -> array[float]:
    """Ring entries for indexes lo..hi (inclusive, at most one lap), in index order."""
    if hi < lo:
        return array("d")
    size = len(ring)
    a, b = lo % size, hi % size
    if a <= b:
        return ring[a : b + 1]
    return ring[a:] + ring[: b + 1]


@dataclass(slots=True)
class SeriesState:
    """A series' full state as plain values, for persistence: times in the series' own time base.

    Minute arrays hold buckets ``kc-63 .. kc`` oldest first, day arrays slots ``dhead-288 .. dhead``.
    """

    phase: float
    max_gap: float
    times: array[float]
    values: array[float]
    d0: float
    last_t: float
    last_gap_t: float
    kc: int
    msum: array[float]
    mcnt: array[float]
    mcov: array[float]
    mev: array[float]
    dhead: int
    dmax: array[float]
    dcov: array[float]

    def slots_moved(self, *, shift: float, phase: float) -> int:
        """How many 5-minute slots the grid moves when the times move by `shift` onto a grid of `phase`.

        Raises ValueError when the arrays do not have their ring sizes (a damaged or foreign file), or
        when `phase` is not `self.phase + shift` modulo PHASE_PERIOD (buckets would not map onto buckets).
        """
        if len(self.times) != len(self.values):
            raise ValueError("times and values differ in length")
        for name, arr, size in (
            ("msum", self.msum, MINUTE_SLOTS),
            ("mcnt", self.mcnt, MINUTE_SLOTS),
            ("mcov", self.mcov, MINUTE_SLOTS),
            ("mev", self.mev, MINUTE_SLOTS),
            ("dmax", self.dmax, DAY_SLOTS),
            ("dcov", self.dcov, DAY_SLOTS),
        ):
            if len(arr) != size:
                raise ValueError(f"{name} has {len(arr)} entries, expected {size}")
        laps = (self.phase + shift - phase) / PHASE_PERIOD
        if not math.isfinite(laps) or abs(laps - round(laps)) > 1e-6:
            raise ValueError("phase does not match state.phase + shift modulo the grid period")
        return round(laps)
