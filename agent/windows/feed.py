"""One series' window state and the O(1) ``add`` of the 1 Hz hot path: raw samples, the minute ring of
5-minute averages and the day ring of their maxima; expiry and persistence of that state. The statistics read
at scrape time are `agent.windows.stats.SeriesWindows` (a subclass: one object, one set of slots).

How each window is defined (grid, coverage, quantiles) is documented in `agent.windows.grid`.
"""

from __future__ import annotations

import math
from array import array
from typing import ClassVar, Self

from agent.windows.grid import (
    _COMPACT_AT,
    _FAR_PAST,
    _INF,
    _NEG_INF,
    AVG_BUCKETS,
    BUCKET_SECONDS,
    DAY_SLOTS,
    DEFAULT_MAX_GAP,
    HOUR_BUCKETS,
    HOUR_SLOTS,
    MINUTE_SLOTS,
    PHASE_PERIOD,
    RAW_SPAN,
    SLOT_BUCKETS,
    SeriesState,
    _linear,
    _neg_infs,
    _ring,
    _zeros,
)

#: What emptied minute buckets are set to (slices of them, assigned to the rings).
_ZEROS = _zeros(MINUTE_SLOTS)
_NEG_INFS = _neg_infs(MINUTE_SLOTS)


class SeriesFeed:
    """The state of one series' windows and the 1 Hz path that feeds it; `SeriesWindows` adds the statistics.
    Not thread-safe on its own (`WindowStore` locks around it)."""

    #: whether `_advance` takes the shortcut for one bucket with samples (a test turns it off to compare)
    one_bucket_shortcut: ClassVar[bool] = True

    __slots__ = (
        "_d0",
        "_dcov",
        "_dhead",
        "_dmax",
        "_gap",
        "_hhead",
        "_hlo",
        "_hmax",
        "_hmax_k",
        "_hours",
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

    def __init__(self, *, phase: float = 0.0, max_gap: float = DEFAULT_MAX_GAP, hours: bool = False) -> None:
        if not 0.0 < max_gap <= RAW_SPAN:  # up to one 5-minute average: a replayed trace's step (colo-sim)
            raise ValueError(f"max_gap must be in (0, {RAW_SPAN}], got {max_gap}")
        if not math.isfinite(phase):
            raise ValueError(f"phase must be finite, got {phase}")
        self._phase = phase % PHASE_PERIOD
        self._gap = float(max_gap)
        # raw samples: _t[_s:], _v[_s:]; _d0 is the coverage of the sample at index 0 (any later sample's is
        # its distance to the one before, capped: kept only for the first, whose predecessor is gone)
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
        # hourly maxima of the 5-minute averages (only for series that keep them: `hours`), index h % HOUR_SLOTS
        # for the hour h = k // 60 of boundary k, valid for h in (hhead - HOUR_SLOTS, hhead]
        self._hours: array[float] | None = _neg_infs(HOUR_SLOTS) if hours else None
        self._hhead = 0
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
            if s >= _COMPACT_AT:
                d0 = ts[s] - ts[s - 1]  # the first live sample's coverage, which goes with it to index 0
                self._d0 = d0 if d0 < gap else gap
                del ts[:s]
                del self._v[:s]
                s = 0
            self._s = s
        x = (t - self._phase) / BUCKET_SECONDS
        if x > self._kcf:  # ceil(x) > kc: a new bucket (exactly the bucket rule, without an int per add)
            k = math.ceil(x)
            if last == _NEG_INF:
                self._dhead = k // SLOT_BUCKETS
                self._hhead = k // HOUR_BUCKETS
            else:
                self._advance(k)
            self._kc = k  # (`_set_kc`, inline: once per add at a replayed trace's step)
            self._kcf = float(k)
            self._j = j = k % MINUTE_SLOTS
        else:
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
        """Close bucket kc: evaluate the 5-minute averages at the boundaries kc .. min(k_new - 1, kc + 4) that it
        completes, open k_new. One pass without a call per boundary: at a replayed trace's step every add closes
        a bucket. Each average is `_avg5`'s to the bit: empty buckets are left out of its sums, as their 0.0
        adds nothing, exactly (at a trace's 5-minute step four of the five are empty)."""
        kc = self._kc
        msum, mcnt, mcov, mev = self._msum, self._mcnt, self._mcov, self._mev
        held = []  # (bucket, sum, count) of the non-empty buckets kc-4 .. kc, oldest first, read before clearing
        for x in range(kc - AVG_BUCKETS + 1, kc + 1):
            j = x % MINUTE_SLOTS
            c = mcnt[j]
            if c:
                held.append((x, msum[j], c))
        cov = mcov[self._j]
        if kc // SLOT_BUCKETS == self._dhead:  # `_day_put(kc, cov, -inf)` in the head slot
            self._dcov[self._dhead % DAY_SLOTS] += cov
        else:
            self._day_put(kc, cov, _NEG_INF)
        # empty the buckets kc+1 .. k_new (at most a lap), one or two slices of each ring
        a = max(kc + 1, k_new - MINUTE_SLOTS + 1) % MINUTE_SLOTS
        b = k_new % MINUTE_SLOTS + 1
        for lo, hi in ((a, b),) if a < b else ((a, MINUTE_SLOTS), (0, b)):
            zeros = _ZEROS[: hi - lo]
            msum[lo:hi] = mcnt[lo:hi] = mcov[lo:hi] = zeros
            mev[lo:hi] = _NEG_INFS[: hi - lo]
        oldest = k_new - MINUTE_SLOTS
        hours = self._hours
        dmax = self._dmax
        last = min(k_new - 1, kc + AVG_BUCKETS - 1)  # the boundaries kc .. last are complete now
        if len(held) == 1 and self.one_bucket_shortcut:
            # one bucket with samples (every step of a replayed trace): each boundary that reaches it has its mean
            # (0.0 + its sum, 0.0 + its count: the generic sums below, as a sum is never -0.0), so the day's and
            # the hours' rings take it once per slot and per hour, as many equal puts would leave them
            x0, total, count = held[0]
            v = total / count
            last = min(last, x0 + AVG_BUCKETS - 1)
            for k in range(max(kc, oldest + 1), last + 1):
                mev[k % MINUTE_SLOTS] = v
            for s in range(kc // SLOT_BUCKETS, last // SLOT_BUCKETS + 1):
                if s == self._dhead:
                    j = s % DAY_SLOTS
                    if v > dmax[j]:
                        dmax[j] = v
                else:
                    self._day_put(max(kc, s * SLOT_BUCKETS), 0.0, v)
            if hours is not None:
                for h in range(kc // HOUR_BUCKETS, last // HOUR_BUCKETS + 1):
                    self._hour_put(max(kc, h * HOUR_BUCKETS), v)
            if v >= self._hmax:
                self._hmax = v
                self._hmax_k = last
            return
        for k in range(kc, last + 1):
            lo = k - AVG_BUCKETS + 1
            total = count = 0.0
            for x, v, c in held:
                if x >= lo:
                    total += v
                    count += c
            if not count:
                continue
            v = total / count
            if k > oldest:
                mev[k % MINUTE_SLOTS] = v
            s = k // SLOT_BUCKETS
            if s == self._dhead:  # `_day_put(k, 0.0, v)` in the head slot (a coverage is never -0.0: += 0.0 is none)
                j = s % DAY_SLOTS
                if v > dmax[j]:
                    dmax[j] = v
            else:
                self._day_put(k, 0.0, v)
            if hours is not None:
                self._hour_put(k, v)
            if v >= self._hmax:
                self._hmax = v
                self._hmax_k = k

    def _set_kc(self, k: int) -> None:
        self._kc = k
        self._kcf = float(k)
        self._j = k % MINUTE_SLOTS

    def _hour_put(self, k: int, ev: float) -> None:
        hours = self._hours
        assert hours is not None
        h = k // HOUR_BUCKETS
        head = self._hhead
        if h > head:
            for x in range(max(head + 1, h - HOUR_SLOTS + 1), h + 1):
                hours[x % HOUR_SLOTS] = _NEG_INF
            self._hhead = head = h
        elif h <= head - HOUR_SLOTS:
            return
        j = h % HOUR_SLOTS
        if ev > hours[j]:
            hours[j] = ev

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

    # ------------------------------------------------------------------ introspection, expiry and persistence

    @property
    def last_t(self) -> float | None:
        """Time of the latest sample, None before the first."""
        return None if self._last_t == _NEG_INF else self._last_t

    @property
    def phase(self) -> float:
        return self._phase

    def _coverage_at(self, i: int) -> float:
        """Coverage of the raw sample at index i: its distance to the previous sample, capped (index 0: _d0)."""
        if i == 0:
            return self._d0
        d = self._t[i] - self._t[i - 1]
        return d if d < self._gap else self._gap

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
            d0=self._coverage_at(self._s) if self._s < len(self._t) else self._d0,  # (no raw sample: unused)
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
            hours=None if self._hours is None else _linear(self._hours, self._hhead),
            hhead=self._hhead,
        )

    @classmethod
    def from_state(
        cls, state: SeriesState, *, shift: float, phase: float, max_gap: float | None = None, hours: bool = False
    ) -> Self:
        """Rebuild a series from `state`, moving its times by `shift` seconds onto a grid of `phase`.

        `phase` must be `state.phase + shift` modulo PHASE_PERIOD, so that buckets and 5-minute slots map
        onto buckets and slots (their indexes move by a multiple of 5 and 1). Hours move by whole hours
        (dk // 60): an hour's maximum may land on the hour before its own, by less than one hour. `hours`: the
        series keeps hourly maxima (empty when `state` has none).
        """
        dslot = state.slots_moved(shift=shift, phase=phase)  # validates the state first
        dk = dslot * SLOT_BUCKETS
        keep_hours = hours or state.hours is not None
        sw = cls(phase=phase, max_gap=state.max_gap if max_gap is None else max_gap, hours=keep_hours)
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
        if state.hours is not None and len(state.hours) == HOUR_SLOTS:
            sw._hhead = state.hhead + dk // HOUR_BUCKETS
            sw._hours = _ring(state.hours, sw._hhead)
        elif keep_hours:
            sw._hhead = sw._kc // HOUR_BUCKETS
        return sw
