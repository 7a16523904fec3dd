"""Rolling usage windows per series, bounded in memory and cheap to feed.

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
about 14 KB at 1 Hz whatever the history. ``add`` is O(1) amortized; the hourly maximum is maintained
incrementally (a cached argmax, rescanned only when it leaves the hour).
"""

from __future__ import annotations

import math
import threading
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True)
class WindowValue:
    """One window's value (None without data) and the fraction of its span that data covers."""

    value: float | None
    coverage: float  # 0..1


EMPTY = WindowValue(None, 0.0)


def wall_aligned_phase(mono_now: float, wall_now: float) -> float:
    """The grid phase that puts minute boundaries on whole wall-clock minutes (PromQL subquery alignment)."""
    return (mono_now - wall_now) % PHASE_PERIOD


def quantile(ordered: list[float], q: float) -> float:
    """Type-7 percentile (linear between closest ranks) of an ascending, non-empty list."""
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


class SeriesWindows:
    """All windows of one series. Not thread-safe on its own (`WindowStore` locks around it)."""

    __slots__ = (
        "_d0",
        "_dcov",
        "_dhead",
        "_dmax",
        "_gap",
        "_hlo",
        "_hmax",
        "_hmax_k",
        "_j",
        "_kc",
        "_kcf",
        "_last_gap_t",
        "_last_t",
        "_mcnt",
        "_mcov",
        "_mev",
        "_msum",
        "_phase",
        "_s",
        "_t",
        "_v",
        "rejected",
    )

    def __init__(self, *, phase: float = 0.0, max_gap: float = DEFAULT_MAX_GAP) -> None:
        if not 0.0 < max_gap <= BUCKET_SECONDS:
            raise ValueError(f"max_gap must be in (0, {BUCKET_SECONDS}], got {max_gap}")
        if not math.isfinite(phase):
            raise ValueError(f"phase must be finite, got {phase}")
        self._phase = phase % PHASE_PERIOD
        self._gap = float(max_gap)
        # raw samples: _t[_s:], _v[_s:]; _d0 is the coverage of the sample at _s
        self._t: array[float] = array("d")
        self._v: array[float] = array("d")
        self._s = 0
        self._d0 = 0.0
        self._last_t = _NEG_INF  # -inf: no sample yet
        self._last_gap_t = _NEG_INF  # time of the latest sample that followed a gap
        # minute ring, index k % MINUTE_SLOTS, valid for k in (kc - MINUTE_SLOTS, kc]
        self._kc = 0
        self._kcf = _NEG_INF  # float(kc), -inf before the first sample: the hot path compares floats
        self._j = 0  # kc % MINUTE_SLOTS
        self._msum = _zeros(MINUTE_SLOTS)
        self._mcnt = _zeros(MINUTE_SLOTS)
        self._mcov = _zeros(MINUTE_SLOTS)
        self._mev = _neg_infs(MINUTE_SLOTS)  # avg5 at boundary k once finalized (k < kc)
        # day ring of 5-minute slots, index s % DAY_SLOTS, valid for s in (dhead - DAY_SLOTS, dhead]
        self._dhead = 0
        self._dmax = _neg_infs(DAY_SLOTS)
        self._dcov = _zeros(DAY_SLOTS)
        # cached max of finalized avg5 over boundaries [_hlo, kc-1], reached at _hmax_k
        self._hmax = _NEG_INF
        self._hmax_k = _FAR_PAST - 1  # no argmax yet: the first query rescans
        self._hlo = _FAR_PAST  # every finalized average is pushed, so the cache covers all of them
        self.rejected = 0

    # ------------------------------------------------------------------ feeding

    def add(self, t: float, value: float) -> None:
        """Record one sample; O(1) amortized, no sorting (the hot path, ~500 calls a second)."""
        last = self._last_t
        if not (_NEG_INF < t < _INF and t >= last and _NEG_INF < value < _INF):
            self.rejected += 1
            return
        gap = self._gap
        d = t - last
        if d > gap:
            d = gap
            self._last_gap_t = t
        self._last_t = t
        ts = self._t
        s = self._s
        if s == len(ts):
            self._d0 = d
        ts.append(t)
        self._v.append(value)
        cutoff = t - RAW_SPAN
        if ts[s] <= cutoff:
            s += 1
            while ts[s] <= cutoff:
                s += 1
            d0 = ts[s] - ts[s - 1]
            self._d0 = d0 if d0 < gap else gap
            if s >= _COMPACT_AT:
                del ts[:s]
                del self._v[:s]
                s = 0
            self._s = s
        x = (t - self._phase) / BUCKET_SECONDS
        if x > self._kcf:  # ceil(x) > kc: a new bucket (exactly the bucket rule, without an int per add)
            k = math.ceil(x)
            if last == _NEG_INF:
                self._dhead = k // SLOT_BUCKETS
            else:
                self._advance(k)
            self._set_kc(k)
        j = self._j
        self._msum[j] += value
        self._mcnt[j] += 1.0
        self._mcov[j] += d

    def _avg5(self, k: int) -> float:
        """Mean of buckets k-4..k (buckets after kc are empty); -inf without samples."""
        kc = self._kc
        total = count = 0.0
        for x in range(max(k - AVG_BUCKETS + 1, kc - MINUTE_SLOTS + 1), min(k, kc) + 1):
            j = x % MINUTE_SLOTS
            total += self._msum[j]
            count += self._mcnt[j]
        return total / count if count else _NEG_INF

    def _advance(self, k_new: int) -> None:
        """Close bucket kc: evaluate the 5-minute averages at the boundaries now complete, open k_new."""
        kc = self._kc
        evs = [self._avg5(k) for k in range(kc, min(k_new - 1, kc + AVG_BUCKETS - 1) + 1)]
        self._day_put(kc, self._mcov[kc % MINUTE_SLOTS], _NEG_INF)
        msum, mcnt, mcov, mev = self._msum, self._mcnt, self._mcov, self._mev
        for k in range(max(kc + 1, k_new - MINUTE_SLOTS + 1), k_new + 1):
            j = k % MINUTE_SLOTS
            msum[j] = mcnt[j] = mcov[j] = 0.0
            mev[j] = _NEG_INF
        oldest = k_new - MINUTE_SLOTS
        for i, v in enumerate(evs):
            k = kc + i
            if v == _NEG_INF:
                continue
            if k > oldest:
                mev[k % MINUTE_SLOTS] = v
            self._day_put(k, 0.0, v)
            if v >= self._hmax:
                self._hmax = v
                self._hmax_k = k

    def _set_kc(self, k: int) -> None:
        self._kc = k
        self._kcf = float(k)
        self._j = k % MINUTE_SLOTS

    def _day_put(self, k: int, cov: float, ev: float) -> None:
        s = k // SLOT_BUCKETS
        head = self._dhead
        if s > head:
            for x in range(max(head + 1, s - DAY_SLOTS + 1), s + 1):
                j = x % DAY_SLOTS
                self._dmax[j] = _NEG_INF
                self._dcov[j] = 0.0
            self._dhead = s
        elif s <= head - DAY_SLOTS:
            return
        j = s % DAY_SLOTS
        self._dcov[j] += cov
        if ev > self._dmax[j]:
            self._dmax[j] = ev

    # ------------------------------------------------------------------ queries

    def _raw(self, now: float, span: float) -> tuple[array[float] | None, float]:
        """Raw values with now-span < t <= now and their coverage (now >= the latest sample)."""
        ts = self._t
        n = len(ts)
        s = self._s
        lo = bisect_right(ts, now - span, s, n)
        if lo >= n:
            return None, 0.0
        gap = self._gap
        if lo == s:
            cov = self._d0
        else:
            cov = ts[lo] - ts[lo - 1]
            if cov > gap:
                cov = gap
        t_lo = ts[lo]
        if self._last_gap_t > t_lo:  # a gap inside the window: sum the capped intervals
            prev = t_lo
            for i in range(lo + 1, n):
                t = ts[i]
                cov += min(t - prev, gap)
                prev = t
        else:
            cov += ts[n - 1] - t_lo
        return self._v[lo:n], min(1.0, cov / span)

    def _k_now(self, now: float) -> int:
        return math.floor((now - self._phase) / BUCKET_SECONDS)

    def _max_1h(self, now: float) -> WindowValue:
        kn = self._k_now(now)
        kc = self._kc
        w = kn - HOUR_BUCKETS + 1
        best = _NEG_INF
        if kc - 1 >= w:  # finalized boundaries in [w, kc-1]
            if not self._hlo <= w <= self._hmax_k:
                self._rescan_hour(w, min(kc, kn + 1))
            best = self._hmax
        for k in range(max(kc, w), min(kn, kc + AVG_BUCKETS - 1) + 1):  # complete, not finalized
            v = self._avg5(k)
            if v > best:
                best = v
        cov = math.fsum(_ring_slice(self._mcov, max(w, kc - MINUTE_SLOTS + 1), min(kn, kc))) / 3600.0
        return WindowValue(best if best > _NEG_INF else None, min(1.0, cov))

    def _rescan_hour(self, w: int, end: int) -> None:
        best = _NEG_INF
        best_k = w - 1
        mev = self._mev
        for k in range(w, end):
            v = mev[k % MINUTE_SLOTS]
            if v >= best and v > _NEG_INF:
                best = v
                best_k = k
        self._hmax, self._hmax_k, self._hlo = best, best_k, w

    def _minute_means_1h(self, now: float) -> tuple[list[float], float]:
        kn = self._k_now(now)
        kc = self._kc
        lo, hi = max(kn - HOUR_BUCKETS + 1, kc - MINUTE_SLOTS + 1), min(kn, kc)
        sums = _ring_slice(self._msum, lo, hi)
        counts = _ring_slice(self._mcnt, lo, hi)
        means = sorted(s / c for s, c in zip(sums, counts, strict=True) if c)
        cov = math.fsum(_ring_slice(self._mcov, lo, hi)) / 3600.0
        return means, min(1.0, cov)

    def _max_1d(self, now: float) -> WindowValue:
        kn = self._k_now(now)
        kc = self._kc
        k0 = (kn - DAY_BUCKETS + 1) // SLOT_BUCKETS * SLOT_BUCKETS
        head = self._dhead
        s_lo, s_hi = max(k0 // SLOT_BUCKETS, head - DAY_SLOTS + 1), min(kn // SLOT_BUCKETS, head)
        maxima = _ring_slice(self._dmax, s_lo, s_hi)
        best = max(maxima) if maxima else _NEG_INF
        cov = math.fsum(_ring_slice(self._dcov, s_lo, s_hi))
        if k0 <= kc <= kn:  # bucket kc is complete but not merged into its slot yet
            cov += self._mcov[kc % MINUTE_SLOTS]
        for k in range(max(kc, k0), min(kn, kc + AVG_BUCKETS - 1) + 1):
            v = self._avg5(k)
            if v > best:
                best = v
        return WindowValue(best if best > _NEG_INF else None, min(1.0, cov / (60.0 * (kn - k0 + 1))))

    def stats(self, now: float) -> dict[str, WindowValue]:
        """Every window of WINDOW_NAMES at `now` (scrape time: sorts the 5-minute samples)."""
        if self._last_t == _NEG_INF:
            return dict.fromkeys(WINDOW_NAMES, EMPTY)
        now = max(now, self._last_t)
        out: dict[str, WindowValue] = {}
        vals, cov = self._raw(now, 60.0)
        out["avg_1m"] = WindowValue(sum(vals) / len(vals), cov) if vals else WindowValue(None, cov)
        vals, cov5 = self._raw(now, RAW_SPAN)
        out["avg_5m"] = WindowValue(sum(vals) / len(vals), cov5) if vals else WindowValue(None, cov5)
        out["max_avg_1h"] = self._max_1h(now)
        out["max_avg_1d"] = self._max_1d(now)
        ordered = sorted(vals) if vals else []
        for name, q in _P5:
            out[name] = WindowValue(quantile(ordered, q) if ordered else None, cov5)
        means, cov1h = self._minute_means_1h(now)
        for name, q in _P1H:
            out[name] = WindowValue(quantile(means, q) if means else None, cov1h)
        return out

    def value(self, name: str, now: float) -> WindowValue:
        """One window; `max_avg_1h` is O(1) amortized (the capacity fast path)."""
        if name not in WINDOW_SPANS:
            raise KeyError(f"unknown window {name!r}")
        if self._last_t == _NEG_INF:
            return EMPTY
        now = max(now, self._last_t)
        if name == "max_avg_1h":
            return self._max_1h(now)
        if name == "max_avg_1d":
            return self._max_1d(now)
        if name.endswith("_1h"):
            means, cov = self._minute_means_1h(now)
            return WindowValue(quantile(means, QUANTILES[name]) if means else None, cov)
        vals, cov = self._raw(now, WINDOW_SPANS[name])
        if not vals:
            return WindowValue(None, cov)
        if name.startswith("avg_"):
            return WindowValue(sum(vals) / len(vals), cov)
        return WindowValue(quantile(sorted(vals), QUANTILES[name]), cov)

    # ------------------------------------------------------------------ introspection and persistence

    @property
    def last_t(self) -> float | None:
        """Time of the latest sample, None before the first."""
        return None if self._last_t == _NEG_INF else self._last_t

    @property
    def phase(self) -> float:
        return self._phase

    def has_data(self, now: float) -> bool:
        """Whether any window at `now` still sees data (else the series can be forgotten)."""
        if self._last_t == _NEG_INF:
            return False
        now = max(now, self._last_t)
        return self._raw(now, RAW_SPAN)[0] is not None or self._max_1d(now).value is not None

    def expire(self, now: float) -> None:
        """Drop raw samples older than the longest raw window at `now` (add does this for its own time)."""
        ts = self._t
        s = self._s
        cutoff = now - RAW_SPAN
        n = len(ts)
        while s < n and ts[s] <= cutoff:
            s += 1
        if s == self._s:
            return
        if s < n:
            self._d0 = min(ts[s] - ts[s - 1], self._gap)
        del ts[:s]
        del self._v[:s]
        self._s = 0

    def state(self) -> SeriesState:
        """A copy of the state, for persistence."""
        return SeriesState(
            phase=self._phase,
            max_gap=self._gap,
            times=self._t[self._s :],
            values=self._v[self._s :],
            d0=self._d0,
            last_t=self._last_t,
            last_gap_t=self._last_gap_t,
            kc=self._kc,
            msum=_linear(self._msum, self._kc),
            mcnt=_linear(self._mcnt, self._kc),
            mcov=_linear(self._mcov, self._kc),
            mev=_linear(self._mev, self._kc),
            dhead=self._dhead,
            dmax=_linear(self._dmax, self._dhead),
            dcov=_linear(self._dcov, self._dhead),
        )

    @classmethod
    def from_state(
        cls, state: SeriesState, *, shift: float, phase: float, max_gap: float | None = None
    ) -> SeriesWindows:
        """Rebuild a series from `state`, moving its times by `shift` seconds onto a grid of `phase`.

        `phase` must be `state.phase + shift` modulo PHASE_PERIOD, so that buckets and 5-minute slots map
        onto buckets and slots (their indexes move by a multiple of 5 and 1).
        """
        if len(state.times) != len(state.values):
            raise ValueError("times and values differ in length")
        for name, arr, size in (
            ("msum", state.msum, MINUTE_SLOTS),
            ("mcnt", state.mcnt, MINUTE_SLOTS),
            ("mcov", state.mcov, MINUTE_SLOTS),
            ("mev", state.mev, MINUTE_SLOTS),
            ("dmax", state.dmax, DAY_SLOTS),
            ("dcov", state.dcov, DAY_SLOTS),
        ):
            if len(arr) != size:
                raise ValueError(f"{name} has {len(arr)} entries, expected {size}")
        laps = (state.phase + shift - phase) / PHASE_PERIOD
        if not math.isfinite(laps) or abs(laps - round(laps)) > 1e-6:
            raise ValueError("phase does not match state.phase + shift modulo the grid period")
        dslot = round(laps)
        dk = dslot * SLOT_BUCKETS
        sw = cls(phase=phase, max_gap=state.max_gap if max_gap is None else max_gap)
        if state.last_t == _NEG_INF:
            return sw
        sw._t = array("d", [t + shift for t in state.times])
        sw._v = array("d", state.values)
        sw._d0 = state.d0
        sw._last_t = state.last_t + shift
        sw._last_gap_t = state.last_gap_t + shift
        sw._set_kc(state.kc + dk)
        sw._msum = _ring(state.msum, sw._kc)
        sw._mcnt = _ring(state.mcnt, sw._kc)
        sw._mcov = _ring(state.mcov, sw._kc)
        sw._mev = _ring(state.mev, sw._kc)
        sw._dhead = state.dhead + dslot
        sw._dmax = _ring(state.dmax, sw._dhead)
        sw._dcov = _ring(state.dcov, sw._dhead)
        sw._hlo = sw._kc + 1  # the hourly cache is rebuilt on the first query
        return sw


class WindowStore:
    """Windows of every series, keyed by (scope, id, resource). Thread-safe: one lock around each call."""

    __slots__ = ("_lock", "_max_gap", "_phase", "_series", "rejected")

    def __init__(self, *, phase: float = 0.0, max_gap: float = DEFAULT_MAX_GAP) -> None:
        SeriesWindows(phase=phase, max_gap=max_gap)  # validates both
        self._phase = phase % PHASE_PERIOD
        self._max_gap = float(max_gap)
        self._series: dict[SeriesKey, SeriesWindows] = {}
        self._lock = threading.Lock()
        self.rejected = 0  # first samples of unknown series that were rejected

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
                sw = self._series[key] = SeriesWindows(phase=self._phase, max_gap=self._max_gap)
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
                    sw = series[key] = SeriesWindows(phase=self._phase, max_gap=self._max_gap)
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

    def value(self, key: SeriesKey, name: str, now: float) -> WindowValue:
        with self._lock:
            sw = self._series.get(key)
            if sw is None:
                if name not in WINDOW_SPANS:
                    raise KeyError(f"unknown window {name!r}")
                return EMPTY
            return sw.value(name, now)

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
        sw = SeriesWindows.from_state(state, shift=shift, phase=self._phase, max_gap=self._max_gap)
        sw.expire(now)
        if not sw.has_data(now):
            return False
        with self._lock:
            self._series[key] = sw
        return True
