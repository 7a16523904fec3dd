"""One series' windows: the statistics read at scrape time (and the capacity stage's `max_avg_1h`) over the
state that `agent.windows.feed.SeriesFeed` keeps and its O(1) ``add`` feeds.

How each window is defined (grid, coverage, quantiles) is documented in `agent.windows.grid`.

What a scrape costs, and why it is no more
    The windows split by how often they change. The six raw ones (``avg_1m``, ``avg_5m``, the 5-minute
    percentiles) change with every sample: a query copies the 5-minute values out of the raw array once
    (`array.tolist`), sums them in time order, sorts that copy in place and reads the four percentiles from
    it. The six long ones (``max_avg_1h``, ``max_avg_1d``, the 1-hour percentiles) depend only on the state
    of the finished minutes and on the query's minute: each is computed when first asked in a minute (a
    capacity pass asks one or two per series, a scrape all six from one sort of the minute means) and kept, keyed
    by (current bucket, the query's minute, and the current bucket's sample count when that bucket is
    already complete at the query). The day peak keeps the maximum over its finished 5-minute slots (a slot
    is final once a later one has begun) and where it was reached, so a minute costs a comparison for it
    rather than 289, and a scan (in C) only when that slot leaves the day. Every
    value is computed with the same arithmetic, in the same order, as a from-scratch pass (plain sums in time
    order, `math.fsum`, type-7 percentiles): a cached or incremental value is bit-identical to a fresh one.
    None of this is persisted: a restored series starts with empty caches. The caches hold about 0.8 KB
    per series (the six kept values and their key).

    Left out, for memory: a sorted copy of the 5-minute values kept between scrapes (the sort is most of a
    raw query, but a copy that Python can update cheaply is a list of float objects, ~10 KB per series),
    and the hour's sorted minute means kept between minutes (~0.5 KB per series for a few microseconds a
    minute). Plain sums cannot slide either: a sum kept by adding and subtracting rounds differently
    from the sum of the window's samples in order.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable
from itertools import compress, repeat
from operator import itemgetter, sub, truediv

from agent.windows.feed import SeriesFeed
from agent.windows.grid import (
    _NEG_INF,
    _P1H,
    _P5,
    AVG_BUCKETS,
    BUCKET_SECONDS,
    DAY_BUCKETS,
    DAY_SLOTS,
    DEFAULT_MAX_GAP,
    EMPTY,
    HOUR_BUCKETS,
    HOUR_SLOTS,
    MINUTE_SLOTS,
    PROFILE_DAYS,
    RAW_SPAN,
    SLOT_BUCKETS,
    WINDOW_NAMES,
    WINDOW_SPANS,
    WindowValue,
    _ring_slice,
    quantile,
)

#: The raw windows, in the order `_raw_row` returns them, and the long ones, in `_long_row`'s order.
RAW_WINDOWS: tuple[str, ...] = ("avg_1m", "avg_5m", *(name for name, _ in _P5))
LONG_WINDOWS: tuple[str, ...] = ("max_avg_1h", "max_avg_1d", *(name for name, _ in _P1H))
_Q5 = tuple(q for _, q in _P5)
_Q1H = tuple(q for _, q in _P1H)
#: Where each window of WINDOW_NAMES is in raw row + long row.
_PICK: Callable[[tuple[WindowValue, ...]], tuple[WindowValue, ...]] = itemgetter(
    *[(RAW_WINDOWS + LONG_WINDOWS).index(name) for name in WINDOW_NAMES]
)
_INDEX = {name: i for i, name in enumerate(WINDOW_NAMES)}
_LONG_AT = {name: i for i, name in enumerate(LONG_WINDOWS)}
#: Per sample count n >= 2, where each 5-minute percentile falls: (i, h - i) with h = (n - 1) q, so that
#: x[i] + (h - i) (x[i+1] - x[i]) is `quantile`'s own arithmetic (i + 1 < n for every q < 1).
_PLANS: dict[int, tuple[tuple[int, float], ...]] = {}


def _plan(n: int) -> tuple[tuple[int, float], ...]:
    steps = []
    for q in _Q5:
        h = (n - 1) * q
        steps.append((int(h), h - int(h)))
    if len(_PLANS) > 4096:  # sample counts are bounded in practice; a strange feed must not grow this
        _PLANS.clear()
    plan = _PLANS[n] = tuple(steps)
    return plan


_EMPTY_RAW = (EMPTY,) * len(RAW_WINDOWS)
_EMPTY_ROW = (EMPTY,) * len(WINDOW_NAMES)


class SeriesWindows(SeriesFeed):
    """All windows of one series. Not thread-safe on its own (`WindowStore` locks around it)."""

    __slots__ = ("_cov1h", "_d1", "_dfin", "_dfin_k", "_dfin_max", "_h1", "_long", "_long_key", "_p1h")

    def __init__(self, *, phase: float = 0.0, max_gap: float = DEFAULT_MAX_GAP, hours: bool = False) -> None:
        super().__init__(phase=phase, max_gap=max_gap, hours=hours)
        # the long windows kept for the minute `_long_key` (see the module docstring); None/-1: not computed yet
        self._long_key: tuple[float, ...] = ()
        self._cov1h = -1.0
        self._h1: WindowValue | None = None
        self._d1: WindowValue | None = None
        self._p1h: list[WindowValue | None] | None = None  # the 1-hour percentiles asked so far
        self._long: tuple[WindowValue, ...] | None = None  # the whole row, once asked
        self._dfin = (0, -1)  # finished day slots [lo, hi] that `_dfin_max` is the maximum of, reached at _dfin_k
        self._dfin_max = _NEG_INF
        self._dfin_k = 0

    # ------------------------------------------------------------------ raw windows (every query)

    def _coverage(self, lo: int, n: int, span: float) -> float:
        """Coverage of the raw samples lo..n-1 (lo < n) over `span` seconds."""
        ts = self._t
        gap = self._gap
        if lo == 0:
            cov = self._d0
        else:
            cov = ts[lo] - ts[lo - 1]
            if cov > gap:
                cov = gap
        t_lo = ts[lo]
        if self._last_gap_t > t_lo:  # a gap inside the window: sum the capped intervals, in time order
            cov = sum(map(min, map(sub, ts[lo + 1 : n], ts[lo : n - 1]), repeat(gap)), cov)
        else:
            cov += ts[n - 1] - t_lo
        return min(1.0, cov / span)

    def _raw_row(self, now: float) -> tuple[WindowValue, ...]:
        """The windows of RAW_WINDOWS at `now` (>= the latest sample)."""
        ts = self._t
        n = len(ts)
        lo5 = bisect_right(ts, now - RAW_SPAN, self._s, n)
        if lo5 >= n:
            return _EMPTY_RAW
        lo1 = bisect_right(ts, now - 60.0, lo5, n)
        vals = self._v[lo5:n].tolist()  # one float object per value, shared by the sums and the sort
        cov5 = self._coverage(lo5, n, RAW_SPAN)
        avg5 = WindowValue(sum(vals) / len(vals), cov5)
        avg1 = EMPTY if lo1 >= n else WindowValue(sum(vals[lo1 - lo5 :]) / (n - lo1), self._coverage(lo1, n, 60.0))
        vals.sort()
        m = len(vals)
        if m == 1:
            one = WindowValue(vals[0], cov5)
            return (avg1, avg5, one, one, one, one)
        plan = _PLANS.get(m) or _plan(m)
        return (avg1, avg5, *[WindowValue(vals[i] + f * (vals[i + 1] - vals[i]), cov5) for i, f in plan])

    # ------------------------------------------------------------------ long windows (once a minute)

    def _k_now(self, now: float) -> int:
        return math.floor((now - self._phase) / BUCKET_SECONDS)

    def _long_minute(self, now: float) -> int:
        """The query's minute kn; forgets the long windows kept for another (see the module docstring)."""
        kn = self._k_now(now)
        kc = self._kc
        # bucket kc is complete at kn >= kc, yet a sample may still land in it (a query ahead of the samples)
        key = (kc, kn, self._mcnt[self._j]) if kn >= kc else (kc, kn)
        if key != self._long_key:
            self._long_key = key
            self._cov1h = -1.0
            self._h1 = self._d1 = None
            self._p1h = self._long = None
        return kn

    def _hour_coverage(self, kn: int) -> float:
        cov = self._cov1h
        if cov < 0.0:
            lo, hi = max(kn - HOUR_BUCKETS + 1, self._kc - MINUTE_SLOTS + 1), min(kn, self._kc)
            cov = self._cov1h = min(1.0, math.fsum(_ring_slice(self._mcov, lo, hi)) / 3600.0)
        return cov

    def _hour_peak(self, kn: int) -> WindowValue:
        """max_avg_1h at minute kn, kept for the minute."""
        got = self._h1
        if got is None:
            best = self._max_1h_value(kn)
            got = self._h1 = WindowValue(best if best > _NEG_INF else None, self._hour_coverage(kn))
        return got

    def _hour_means(self, kn: int) -> list[float]:
        """The means of the minutes [kn-59, kn] that have samples, oldest first; the hour's coverage is kept on the
        way if it was not (`_hour_coverage`, from the same slice of the rings). The rings are turned into lists
        first: iterating an array makes a float object per entry, and a replayed trace's hour has 12 minutes
        with samples in 60."""
        kc = self._kc
        lo, hi = max(kn - HOUR_BUCKETS + 1, kc - MINUTE_SLOTS + 1), min(kn, kc)
        if hi < lo:
            if self._cov1h < 0.0:
                self._cov1h = 0.0  # (fsum of nothing)
            return []
        a, b = lo % MINUTE_SLOTS, hi % MINUTE_SLOTS + 1  # `_ring_slice`'s, for the three rings at once
        mcnt, msum = self._mcnt, self._msum
        if a < b:
            counts, sums = mcnt[a:b].tolist(), msum[a:b].tolist()
            if self._cov1h < 0.0:
                self._cov1h = min(1.0, math.fsum(self._mcov[a:b]) / 3600.0)
        else:
            counts, sums = (mcnt[a:] + mcnt[:b]).tolist(), (msum[a:] + msum[:b]).tolist()
            if self._cov1h < 0.0:
                mcov = self._mcov
                self._cov1h = min(1.0, math.fsum(mcov[a:] + mcov[:b]) / 3600.0)
        return list(map(truediv, compress(sums, counts), compress(counts, counts)))

    def _minute_means_sorted(self, kn: int) -> list[float]:
        means = self._hour_means(kn)
        means.sort()
        return means

    def _hour_percentile(self, kn: int, i: int) -> WindowValue:
        """The 1-hour percentile _Q1H[i] at minute kn, kept for the minute (the sorted means are not: ~2 KB)."""
        got = self._p1h
        if got is None:
            got = self._p1h = [None] * len(_Q1H)
        wv = got[i]
        if wv is None:
            means = self._hour_means(kn)  # (keeps the hour's coverage too)
            means.sort()
            wv = got[i] = WindowValue(quantile(means, _Q1H[i]) if means else None, self._cov1h)
        return wv

    def _hour_percentiles(self, kn: int) -> list[WindowValue]:
        """Every 1-hour percentile at minute kn from one sort (the scrape's row), kept for the minute."""
        got = self._p1h
        if got is not None and None not in got:
            return [wv for wv in got if wv is not None]
        means = self._minute_means_sorted(kn)
        cov = self._cov1h  # (kept by `_hour_means`)
        row = [WindowValue(quantile(means, q) if means else None, cov) for q in _Q1H]
        self._p1h = list(row)
        return row

    def _day_peak(self, kn: int) -> WindowValue:
        """max_avg_1d at minute kn, kept for the minute."""
        got = self._d1
        if got is None:
            got = self._d1 = self._max_1d(kn)
        return got

    def _long_row(self, now: float) -> tuple[WindowValue, ...]:
        """The windows of LONG_WINDOWS at `now` (>= the latest sample), each kept while its inputs hold."""
        kn = self._long_minute(now)
        row = self._long
        if row is None:  # (the scrape asks the whole row of every series: kept whole for the minute too)
            row = self._long = (
                self._hour_peak(kn),
                self._day_peak(kn),
                *self._hour_percentiles(kn),
            )
        return row

    def _long_value(self, i: int, now: float) -> WindowValue:
        """LONG_WINDOWS[i] at `now` alone: a capacity pass asks one or two of them per series, not all six."""
        kn = self._long_minute(now)
        if i == 0:
            return self._hour_peak(kn)
        if i == 1:
            return self._day_peak(kn)
        return self._hour_percentile(kn, i - 2)

    def _max_1h_value(self, kn: int) -> float:
        """max_avg_1h's value at minute kn (-inf without any average); O(1) amortized."""
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
        return best

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

    def _max_1d(self, kn: int) -> WindowValue:
        """max_avg_1d at minute kn: the finished slots' maximum is kept until the slot range moves."""
        kc = self._kc
        k0 = (kn - DAY_BUCKETS + 1) // SLOT_BUCKETS * SLOT_BUCKETS
        head = self._dhead
        s_lo, s_hi = max(k0 // SLOT_BUCKETS, head - DAY_SLOTS + 1), min(kn // SLOT_BUCKETS, head)
        best = _NEG_INF
        fin = min(s_hi, head - 1)  # slots before the head are final: only the head slot still changes
        if s_lo <= fin:
            if self._dfin != (s_lo, fin):
                self._finished_day_max(s_lo, fin)
            best = self._dfin_max
        if s_lo <= head <= s_hi:
            v = self._dmax[head % DAY_SLOTS]
            if v > best:  # strictly: on a tie the earlier slot's value stands, as max() over the slots keeps it
                best = v
        cov = math.fsum(_ring_slice(self._dcov, s_lo, s_hi))
        if k0 <= kc <= kn:  # bucket kc is complete but not merged into its slot yet
            cov += self._mcov[kc % MINUTE_SLOTS]
        for k in range(max(kc, k0), min(kn, kc + AVG_BUCKETS - 1) + 1):
            v = self._avg5(k)
            if v > best:
                best = v
        return WindowValue(best if best > _NEG_INF else None, min(1.0, cov / (60.0 * (kn - k0 + 1))))

    def _finished_day_max(self, s_lo: int, fin: int) -> None:
        """Keep `_dfin_max`, the maximum of the finished day slots [s_lo, fin]: when the range slides on and its
        maximum is still inside, only the slots that joined are looked at; otherwise one scan (in C)."""
        dmax = self._dmax
        old_lo, old_fin = self._dfin
        if old_lo <= s_lo <= self._dfin_k and old_fin <= fin and old_lo <= old_fin:
            best, best_s = self._dfin_max, self._dfin_k
            for x in range(old_fin + 1, fin + 1):
                v = dmax[x % DAY_SLOTS]
                if v > best:
                    best, best_s = v, x
        else:
            seen = _ring_slice(dmax, s_lo, fin)
            best = max(seen)
            best_s = s_lo + seen.index(best)
        self._dfin, self._dfin_max, self._dfin_k = (s_lo, fin), best, best_s

    # ------------------------------------------------------------------ queries

    def row(self, now: float) -> tuple[WindowValue, ...]:
        """Every window of WINDOW_NAMES at `now`, in that order (the scrape path)."""
        if self._last_t == _NEG_INF:
            return _EMPTY_ROW
        now = max(now, self._last_t)
        return _PICK(self._raw_row(now) + self._long_row(now))

    def stats(self, now: float) -> dict[str, WindowValue]:
        """Every window of WINDOW_NAMES at `now`, by name."""
        return dict(zip(WINDOW_NAMES, self.row(now)))  # noqa: B905 (row has WINDOW_NAMES' length)

    def value(self, name: str, now: float) -> WindowValue:
        """One window; the long ones come from the per-minute cache, the averages without sorting."""
        i = _INDEX.get(name)
        if i is None:
            raise KeyError(f"unknown window {name!r}")
        if self._last_t == _NEG_INF:
            return EMPTY
        now = max(now, self._last_t)
        j = _LONG_AT.get(name)
        if j is not None:
            return self._long_value(j, now)
        if name.startswith("avg_"):
            ts = self._t
            n = len(ts)
            span = WINDOW_SPANS[name]
            lo = bisect_right(ts, now - span, self._s, n)
            if lo >= n:
                return EMPTY
            return WindowValue(sum(self._v[lo:n]) / (n - lo), self._coverage(lo, n, span))
        return self._raw_row(now)[RAW_WINDOWS.index(name)]

    def values(self, names: tuple[str, ...], now: float) -> tuple[WindowValue, ...]:
        """Several windows at `now` in the order of `names`, each what `value` gives: the query's time and minute
        are worked out once (a capacity pass reads two or three windows of each series it asks, colo-sim every
        pod's at every step)."""
        if self._last_t == _NEG_INF:
            for name in names:
                if name not in _INDEX:
                    raise KeyError(f"unknown window {name!r}")
            return (EMPTY,) * len(names)
        now = max(now, self._last_t)
        kn: int | None = None
        out: list[WindowValue] = []
        for name in names:
            j = _LONG_AT.get(name)
            if j is not None:
                if kn is None:
                    kn = self._long_minute(now)
                if j == 0:
                    out.append(self._hour_peak(kn))
                elif j == 1:
                    out.append(self._day_peak(kn))
                else:
                    out.append(self._hour_percentile(kn, j - 2))
            elif name in _INDEX:
                out.append(self.value(name, now))
            else:
                raise KeyError(f"unknown window {name!r}")
        return tuple(out)

    def minute_means(self, now: float) -> list[float]:
        """The means of the last hour's minutes that have samples, oldest first (the 1-hour percentiles' inputs;
        the `nsigma` predictor's mean and deviation): no state of its own."""
        if self._last_t == _NEG_INF:
            return []
        now = max(now, self._last_t)
        return self._hour_means(self._long_minute(now))  # (the minute's caches: `_hour_means` keeps its coverage)

    def day_profile(self, now: float, days: int) -> tuple[float | None, int]:
        """The highest 5-minute average of this hour of the day and the next one, over the last `days` days
        (at most PROFILE_DAYS), and how many of those days had any; (None, 0) for a series without hourly
        maxima or without data then."""
        hours = self._hours
        if hours is None or self._last_t == _NEG_INF:
            return None, 0
        h = self._k_now(max(now, self._last_t)) // HOUR_BUCKETS
        head = self._hhead
        best = _NEG_INF
        seen = 0
        for d in range(1, min(days, PROFILE_DAYS) + 1):
            day = _NEG_INF
            for x in (h - 24 * d, h - 24 * d + 1):
                if head - HOUR_SLOTS < x <= head:
                    v = hours[x % HOUR_SLOTS]
                    if v > day:
                        day = v
            if day > _NEG_INF:
                seen += 1
                best = max(best, day)
        return (best if seen else None), seen

    def days_peak(self, now: float, days: int) -> float | None:
        """The highest 5-minute average of the hours of the last `days` days (at most PROFILE_DAYS) this series
        kept, the current hour's finished averages included; None for a series without hourly maxima or data."""
        hours = self._hours
        if hours is None or self._last_t == _NEG_INF:
            return None
        h = self._k_now(max(now, self._last_t)) // HOUR_BUCKETS
        lo = max(h - 24 * min(days, PROFILE_DAYS) + 1, self._hhead - HOUR_SLOTS + 1)
        best = max(_ring_slice(hours, lo, min(h, self._hhead)), default=_NEG_INF)
        return best if best > _NEG_INF else None

    def has_data(self, now: float) -> bool:
        """Whether any window at `now` still sees data (else the series can be forgotten)."""
        if self._last_t == _NEG_INF:
            return False
        now = max(now, self._last_t)
        ts = self._t
        if bisect_right(ts, now - RAW_SPAN, self._s, len(ts)) < len(ts):
            return True
        return self._max_1d(self._k_now(now)).value is not None
