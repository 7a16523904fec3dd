"""Window statistics of one snapshot, computed once and shared by /metrics and the JSON API.

Both the Prometheus render and ``/api/v1/pods`` need all twelve windows of every pod and of the node at
the snapshot's ``mono``. Computing them is the most expensive part of either (a sort of the 5-minute raw
samples per series; the long windows are kept by the series from one minute to the next, see
`agent.windows.stats`), so the result is cached per snapshot ``seq``: concurrent callers for the same
snapshot wait for one computation instead of each doing it. A series' windows are one row (`WindowSet`
reads it by name), not a dict each.

``view.windows_lock`` is taken once per pod rather than around the whole pass, so the sampler (which
takes it to feed the store) is never held up for more than a few series' worth of work.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from agent.snapshot import Snapshot
from agent.view import AgentView
from agent.windows.store import WINDOW_NAMES, WindowValue
from common.families import Family

RESOURCES: tuple[str, str] = ("cpu", "memory")

NODE_WINDOW = Family("colo_node_window_ratio", "Node usage over a rolling window (0-1).")
NODE_WINDOW_COVERAGE = Family(
    "colo_node_window_coverage_ratio", "Fraction of the window's span that samples cover (0-1)."
)
POD_CPU_WINDOW = Family("colo_pod_cpu_window_cores", "Pod CPU cores over a rolling window.")
POD_MEMORY_WINDOW = Family("colo_pod_memory_window_bytes", "Pod working set over a rolling window.")


def _crane(name: str, res: str, window: str) -> tuple[Family, str, str]:
    return Family(name, f"crane-scheduler compatible node {res} usage {window}, in percent (0-100)."), res, window


#: crane-scheduler's gauges (its names, its unit: percent 0-100) -> the node window they export.
CRANE_GAUGES: tuple[tuple[Family, str, str], ...] = (
    _crane("cpu_usage_avg_5m", "cpu", "avg_5m"),
    _crane("cpu_usage_max_avg_1h", "cpu", "max_avg_1h"),
    _crane("cpu_usage_max_avg_1d", "cpu", "max_avg_1d"),
    _crane("mem_usage_avg_5m", "memory", "avg_5m"),
    _crane("mem_usage_max_avg_1h", "memory", "max_avg_1h"),
    _crane("mem_usage_max_avg_1d", "memory", "max_avg_1d"),
)

_INDEX = {name: i for i, name in enumerate(WINDOW_NAMES)}


class WindowSet(Mapping[str, WindowValue]):
    """One series' windows by name, over the row the store computed (`row`, in WINDOW_NAMES order): a
    scrape holds one per series, so a tuple rather than a dict of twelve."""

    __slots__ = ("row",)

    def __init__(self, row: tuple[WindowValue, ...]) -> None:
        self.row = row

    def __getitem__(self, name: str) -> WindowValue:
        return self.row[_INDEX[name]]

    def __iter__(self) -> Iterator[str]:
        return iter(WINDOW_NAMES)

    def __len__(self) -> int:
        return len(WINDOW_NAMES)


@dataclass(frozen=True, slots=True)
class SnapshotWindows:
    """All windows at one snapshot: node ratios and pod cores/bytes, keyed by resource then window."""

    seq: int
    node: dict[str, WindowSet]  # "cpu" | "memory" -> windows (ratios 0..1)
    pods: dict[str, dict[str, WindowSet]]  # uid -> "cpu" (cores) | "memory" (bytes) -> windows


class WindowStatsCache:
    """Computes `SnapshotWindows` at most once per snapshot and keeps the latest `keep` (~0.8 MiB each at
    250 pods). The render asks once per scrape and the JSON API seldom: by default only the latest is kept,
    and it is let go before the next is computed, so that two never live at once."""

    def __init__(self, view: AgentView, keep: int = 1) -> None:
        self._view = view
        self._keep = keep
        self._lock = threading.Lock()  # serialises computation: a second caller waits, then hits the cache
        self._cache: OrderedDict[int, SnapshotWindows] = OrderedDict()
        self.computations = 0  # how many passes were computed (tests and the benchmark read it)

    def get(self, snap: Snapshot) -> SnapshotWindows:
        with self._lock:
            hit = self._cache.get(snap.seq)
            if hit is not None:
                return hit
            while len(self._cache) >= self._keep:
                self._cache.popitem(last=False)
            result = self._compute(snap)
            self.computations += 1
            self._cache[snap.seq] = result
            return result

    def _compute(self, snap: Snapshot) -> SnapshotWindows:
        view = self._view
        store = view.windows
        lock = view.windows_lock
        now = snap.mono
        with lock:
            node = {res: WindowSet(store.row(("node", "", res), now)) for res in RESOURCES}
        pods: dict[str, dict[str, WindowSet]] = {}
        for uid in snap.pods:
            with lock:
                pods[uid] = {res: WindowSet(store.row(("pod", uid, res), now)) for res in RESOURCES}
        return SnapshotWindows(seq=snap.seq, node=node, pods=pods)
