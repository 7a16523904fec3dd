"""A trace's usable rows as columns (numpy), checked and summarised in one pass, whatever their source.

Every reader (CSV, Parquet, a Prometheus pull) hands `Intake` batches of rows already parsed into numbers;
`Intake` applies the rules that need a pod's history — a sample earlier than, or at the same time as, the pod's
previous usable one is skipped (`time_backwards`, `duplicate_time`) — converts millisecond, microsecond or
nanosecond clocks to seconds, and gathers what the replay needs before it looks at any node: the first and
last times, the intervals between a pod's samples (for the step), each pod's largest requests (for packing)
and its sample count. It keeps the rows themselves only when asked (`keep=True`): a file is then held as 48
bytes a sample; a dataset partitioned by node is not held at all (each node is read again when replayed).

A pod is a (node, pod) pair, as in the readers: the same name on two nodes is two pods.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Codes = npt.NDArray[np.int64]

#: A clock's unit from the size of its first usable time (seconds since 1970 stay below 1e11 until year 5138).
UNIT_LIMITS = ((1e17, "nanoseconds", 1e9), (1e14, "microseconds", 1e6), (1e11, "milliseconds", 1e3))


@dataclass(slots=True)
class Batch:
    """Rows whose numbers passed their checks, in input order: pod code, time and the four quantities."""

    code: Codes
    t: Floats
    cpu_request: Floats
    cpu_usage: Floats
    memory_request: Floats
    memory_usage: Floats

    def __len__(self) -> int:
        return len(self.t)

    def take(self, index: npt.NDArray[np.intp] | npt.NDArray[np.bool_]) -> Batch:
        return Batch(
            self.code[index],
            self.t[index],
            self.cpu_request[index],
            self.cpu_usage[index],
            self.memory_request[index],
            self.memory_usage[index],
        )

    def reorder(self, index: npt.NDArray[np.intp]) -> None:
        """Put the rows in the order `index`, one column at a time (never two copies of every column at once)."""
        for f in _FIELDS:
            setattr(self, f, getattr(self, f)[index])

    def compact(self) -> Batch:
        """The rows in arrays of their own (a view into a larger parsed block would keep the block alive)."""
        return Batch(
            *(
                np.array(getattr(self, f), copy=True) if getattr(self, f).base is not None else getattr(self, f)
                for f in _FIELDS
            )
        )

    @staticmethod
    def concat(parts: list[Batch]) -> Batch:
        if not parts:
            e = np.empty(0)
            return Batch(np.empty(0, np.int64), e, e, e, e, e)
        if len(parts) == 1:
            return parts[0]
        return Batch(*(np.concatenate([getattr(p, f) for p in parts]) for f in _FIELDS))


_FIELDS = ("code", "t", "cpu_request", "cpu_usage", "memory_request", "memory_usage")


class Pods:
    """(node, pod) names by code, in order of first appearance."""

    def __init__(self) -> None:
        self.names: list[tuple[str, str]] = []
        self._code: dict[tuple[str, str], int] = {}

    def code(self, node: str, pod: str) -> int:
        key = (node, pod)
        got = self._code.get(key)
        if got is None:
            got = self._code[key] = len(self.names)
            self.names.append(key)
        return got

    def __len__(self) -> int:
        return len(self.names)


@dataclass(slots=True)
class Summary:
    """What the replay needs to know of the whole trace before any node: see the module's docstring."""

    t0: float = np.inf
    t_end: float = -np.inf
    first_pod: int = -1  # code of the pod of the earliest sample
    last_pod: int = -1  # code of the pod of the latest sample
    samples: int = 0
    gaps: Counter[int] = field(default_factory=Counter)  # rounded seconds between a pod's samples -> count
    largest_cpu: Floats = field(default_factory=lambda: np.zeros(0))
    largest_memory: Floats = field(default_factory=lambda: np.zeros(0))
    count: Codes = field(default_factory=lambda: np.zeros(0, np.int64))  # samples per pod code
    first_t: Floats = field(default_factory=lambda: np.zeros(0))  # each pod's first time (inf: none)
    last_t: Floats = field(default_factory=lambda: np.zeros(0))  # each pod's latest time (-inf: none)


class Intake:
    """Checks batches in input order and summarises them (`summary`); keeps the rows when `keep`."""

    def __init__(self, pods: Pods, keep: bool, divisor: float | None = None) -> None:
        self.pods = pods
        self.keep = keep
        self.divisor = divisor  # None: decided on the first usable time
        self.warnings: list[str] = []
        self.skipped: Counter[str] = Counter()
        self.summary = Summary()
        self._parts: list[Batch] = []

    def add(self, batch: Batch) -> Batch:
        """Check `batch`, summarise its usable rows and return them (also kept when `keep`)."""
        if len(batch) == 0:
            return batch
        self._grow(len(self.pods))
        if self.divisor is None:
            self.divisor = self._unit(float(batch.t[0]))
        if self.divisor != 1.0:
            batch.t = batch.t / self.divisor
        keep, backwards, duplicate = order_check(batch.code, batch.t, self.summary.last_t)
        if backwards:
            self.skipped["time_backwards"] += backwards
        if duplicate:
            self.skipped["duplicate_time"] += duplicate
        if keep is not None:
            batch = batch.take(keep)
        if len(batch):
            self._summarise(batch)
            if self.keep:
                self._parts.append(batch.compact())
        return batch

    def rows(self) -> Batch:
        """Every kept row, in input order, handed over: the intake keeps no reference to them (the caller's
        copy grouped by node is then the only one)."""
        parts, self._parts = self._parts, []
        return Batch.concat(parts)

    def _unit(self, t: float) -> float:
        for limit, name, divisor in UNIT_LIMITS:
            if t >= limit:
                self.warnings.append(
                    f"unix_s {t:.0f} of the first usable row looks like {name} since 1970: "
                    f"every time is divided by {divisor:.0f}"
                )
                return divisor
        return 1.0

    def _grow(self, n: int) -> None:
        s = self.summary
        if len(self.summary.last_t) < n:
            extra = n - len(s.last_t)
            s.last_t = np.concatenate([s.last_t, np.full(extra, -np.inf)])
            s.first_t = np.concatenate([s.first_t, np.full(extra, np.inf)])
            s.largest_cpu = np.concatenate([s.largest_cpu, np.zeros(extra)])
            s.largest_memory = np.concatenate([s.largest_memory, np.zeros(extra)])
            s.count = np.concatenate([s.count, np.zeros(extra, np.int64)])

    def _summarise(self, b: Batch) -> None:
        s = self.summary
        lo, hi = int(np.argmin(b.t)), int(np.argmax(b.t))
        if b.t[lo] < s.t0:
            s.t0, s.first_pod = float(b.t[lo]), int(b.code[lo])
        if b.t[hi] > s.t_end:
            s.t_end, s.last_pod = float(b.t[hi]), int(b.code[hi])
        s.samples += len(b)
        # intervals between a pod's consecutive usable samples, the previous batch's last one included
        order = np.argsort(b.code, kind="stable")
        code, t = b.code[order], b.t[order]
        prev = np.empty_like(t)
        prev[1:] = t[:-1]
        starts = np.ones(len(t), bool)
        starts[1:] = code[1:] != code[:-1]
        prev[starts] = self.summary.last_t[code[starts]]
        gaps = t - prev
        gaps = gaps[np.isfinite(gaps)]
        if len(gaps):
            values, counts = np.unique(np.rint(gaps), return_counts=True)
            s.gaps.update(dict(zip(values.astype(np.int64).tolist(), counts.tolist(), strict=True)))
        ends = np.ones(len(t), bool)
        ends[:-1] = starts[1:]
        self.summary.last_t[code[ends]] = t[ends]
        np.minimum.at(s.first_t, b.code, b.t)
        np.maximum.at(s.largest_cpu, b.code, b.cpu_request)
        np.maximum.at(s.largest_memory, b.code, b.memory_request)
        s.count += np.bincount(b.code, minlength=len(s.count))


def usable(values: Floats, empty: npt.NDArray[np.bool_], skipped: Counter[str]) -> npt.NDArray[np.bool_]:
    """Which rows of `values` (one row of numbers per column, NaN where a number did not parse) are usable, by
    the CSV reader's rules in its order: an empty pod name (`empty_pod`), then a number that is missing, NaN or
    infinite (`not_a_number`), then a negative one (`negative`); the others are counted in `skipped`."""
    not_number = ~np.isfinite(values).all(axis=0) & ~empty
    negative = (values < 0).any(axis=0) & ~empty & ~not_number
    for reason, mask in (("empty_pod", empty), ("not_a_number", not_number), ("negative", negative)):
        n = int(mask.sum())
        if n:
            skipped[reason] += n
    ok: npt.NDArray[np.bool_] = ~(empty | not_number | negative)
    return ok


def order_check(code: Codes, t: Floats, last: Floats) -> tuple[npt.NDArray[np.bool_] | None, int, int]:
    """Which rows keep their pod's time moving forward: a row is usable when its time is after every earlier
    usable time of its pod (`last` holds each pod's latest before this batch, -inf for none; it is not
    updated here). Returns (mask or None when all are usable, rows earlier, rows at the same time)."""
    order = np.argsort(code, kind="stable")
    c, tt = code[order], t[order]
    prev = np.empty_like(tt)
    prev[1:] = tt[:-1]
    starts = np.ones(len(tt), bool)
    starts[1:] = c[1:] != c[:-1]
    prev[starts] = last[c[starts]]
    bad = tt <= prev
    if not bad.any():
        return None, 0, 0
    # the slow path, only for the pods with a row out of order: a running maximum of the usable times
    keep_sorted = np.ones(len(tt), bool)
    backwards = duplicate = 0
    group = np.cumsum(starts) - 1
    first_of = np.flatnonzero(starts)
    for g in np.unique(group[bad]).tolist():
        lo = int(first_of[g])
        hi = int(first_of[g + 1]) if g + 1 < len(first_of) else len(tt)
        top = float(last[c[lo]])
        for i in range(lo, hi):
            v = float(tt[i])
            if v > top:
                top = v
            else:
                keep_sorted[i] = False
                if v < top:
                    backwards += 1
                else:
                    duplicate += 1
    keep = np.empty(len(tt), bool)
    keep[order] = keep_sorted
    return keep, backwards, duplicate
