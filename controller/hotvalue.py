"""Recent pod bindings per node and crane's `node_hot_value`.

crane counts "Scheduled" events; we watch Pods instead: a pod that has `spec.nodeName` is bound, and its
`PodScheduled` condition says when. That survives event TTLs and leader failover (a new leader's initial
list reproduces the recent bindings). Memory is bounded: records older than the longest hotValue
timeRange are dropped, and at most `max_records` are kept. The pod informer caches `BindingRecords.keep`'s
stub (well under 1 KB) instead of the Pod (tens of KB parsed), and only for pods bound within that range
when it last saw them: older pods are not cached at all, and a stub whose binding aged out goes at the
pod's next event or the next relist.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from controller.policy import HotValuePolicy


def _rfc3339(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _scheduled(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's PodScheduled=True condition, if any."""
    status = pod.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for cond in conditions if isinstance(conditions, list) else ():
        if isinstance(cond, Mapping) and cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            return cond
    return None


def binding_time(pod: Mapping[str, Any]) -> float | None:
    """When the pod was bound: PodScheduled=True's lastTransitionTime, else its creation time."""
    cond = _scheduled(pod)
    stamp = _rfc3339(cond.get("lastTransitionTime")) if cond is not None else None
    if stamp is not None:
        return stamp
    meta = pod.get("metadata")
    return _rfc3339(meta.get("creationTimestamp")) if isinstance(meta, Mapping) else None


_KEPT_META = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")


class BindingRecords:
    """Bindings seen within the longest time range, by node."""

    def __init__(
        self,
        hot_policy: tuple[HotValuePolicy, ...],
        *,
        max_records: int = 200_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.hot_policy = hot_policy
        self.horizon = max((h.time_range for h in hot_policy), default=0.0)
        self.max_records = max_records
        self.clock = clock
        self._by_uid: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def keep(self, pod: Mapping[str, Any]) -> dict[str, Any] | None:
        """The pod informer's transform: a bound pod cut down to what `observe` reads.

        None (not cached at all) for an unbound pod or one bound before the longest time range: it can
        never count again. Such a pod that the informer already held is dropped at its next event.
        """
        spec = pod.get("spec")
        meta = pod.get("metadata")
        if not isinstance(spec, Mapping) or not isinstance(meta, Mapping) or not spec.get("nodeName"):
            return None
        stamp = binding_time(pod)
        if stamp is not None and stamp <= self.clock() - self.horizon:
            return None
        kept_meta = {k: meta[k] for k in _KEPT_META if k in meta}
        if isinstance(kept_meta.get("namespace"), str):
            kept_meta["namespace"] = sys.intern(kept_meta["namespace"])  # shared by many pods
        node = spec["nodeName"]
        out: dict[str, Any] = {
            "metadata": kept_meta,
            "spec": {"nodeName": sys.intern(node) if isinstance(node, str) else node},
        }
        cond = _scheduled(pod)
        if cond is not None:
            scheduled = {"type": "PodScheduled", "status": "True"}
            if "lastTransitionTime" in cond:
                scheduled["lastTransitionTime"] = cond["lastTransitionTime"]
            out["status"] = {"conditions": [scheduled]}
            kept_meta.pop("creationTimestamp", None)  # only a fallback for a pod without the condition
        return out

    def on_event(self, etype: str, pod: Mapping[str, Any]) -> None:
        """The pod informer's event handler."""
        if etype in ("ADDED", "MODIFIED"):
            self.observe(pod)

    def observe(self, pod: Mapping[str, Any]) -> None:
        """Record a pod's binding once (ADDED or MODIFIED events of a bound pod)."""
        if self.horizon <= 0:
            return
        spec = pod.get("spec")
        meta = pod.get("metadata")
        if not isinstance(spec, Mapping) or not isinstance(meta, Mapping):
            return
        node = spec.get("nodeName")
        uid = meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"
        if not isinstance(node, str) or not node or not isinstance(uid, str):
            return
        now = self.clock()
        stamp = binding_time(pod)
        if stamp is None:
            stamp = now
        if stamp <= now - self.horizon:
            return
        with self._lock:
            if uid in self._by_uid:
                return
            if len(self._by_uid) >= self.max_records:
                self._gc_locked(now)
                if len(self._by_uid) >= self.max_records:
                    oldest = min(self._by_uid, key=lambda u: self._by_uid[u][1])
                    del self._by_uid[oldest]
            self._by_uid[uid] = (node, stamp)

    def gc(self) -> None:
        """Forget bindings older than every time range."""
        with self._lock:
            self._gc_locked(self.clock())

    def _gc_locked(self, now: float) -> None:
        cutoff = now - self.horizon
        for uid in [u for u, (_, t) in self._by_uid.items() if t <= cutoff]:
            del self._by_uid[uid]

    def counts(self, time_range: float, now: float | None = None) -> dict[str, int]:
        """Bindings per node with timestamp > now - time_range (crane's comparison)."""
        now = self.clock() if now is None else now
        cutoff = now - time_range
        out: dict[str, int] = {}
        with self._lock:
            for node, stamp in self._by_uid.values():
                if stamp > cutoff:
                    out[node] = out.get(node, 0) + 1
        return out

    def hot_values(self, now: float | None = None) -> dict[str, int]:
        """Σ over hotValue entries of floor(bindings within timeRange / count), for nodes with any."""
        now = self.clock() if now is None else now
        out: dict[str, int] = {}
        for entry in self.hot_policy:
            for node, n in self.counts(entry.time_range, now).items():
                out[node] = out.get(node, 0) + n // entry.count
        return {node: v for node, v in out.items() if v > 0}
