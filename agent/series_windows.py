"""One series' windows: the statistics read at scrape time (and the capacity stage's `max_avg_1h`) over the
state that `agent.series_feed.SeriesFeed` keeps and its O(1) ``add`` feeds.

How each window is defined (grid, coverage, quantiles) is documented in `agent.window_grid`.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right

from agent.series_feed import SeriesFeed
from agent.window_grid import (
    _NEG_INF,
    _P1H,
    _P5,
    AVG_BUCKETS,
    BUCKET_SECONDS,
    DAY_BUCKETS,
    DAY_SLOTS,
    EMPTY,
    HOUR_BUCKETS,
    MINUTE_SLOTS,
    QUANTILES,
    RAW_SPAN,
    SLOT_BUCKETS,
    WINDOW_NAMES,
    WINDOW_SPANS,
    WindowValue,
    _ring_slice,
    quantile,
)


class SeriesWindows(SeriesFeed):
    """All windows of one series. Not thread-safe on its own (`WindowStore` locks around it)."""

    __slots__ = ()

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

    def has_data(self, now: float) -> bool:
        """Whether any window at `now` still sees data (else the series can be forgotten)."""
        if self._last_t == _NEG_INF:
            return False
        now = max(now, self._last_t)
        return self._raw(now, RAW_SPAN)[0] is not None or self._max_1d(now).value is not None
