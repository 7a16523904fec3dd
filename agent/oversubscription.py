"""Publishes oversubscribable capacity as Volcano's node annotations (and optionally koordinator's
extended resources), following the rules of the oversubscription issue:

- enabled by node label `volcano.sh/oversubscription=true` (or on all nodes by configuration); switched
  off, Colo's annotations are removed;
- `volcano.sh/oversubscription-types` on the node selects cpu, memory or both (default both); a type not
  selected is published as 0;
- `volcano.sh/oversubscription-cpu` in integer milli-CPU, `volcano.sh/oversubscription-memory` in bytes;
- 0 while the node is evicting or sampling has stalled (no stale capacity);
- a value is patched when it moved by more than `update_fraction`, or changed at all and
  `update_interval_seconds` passed since the last write; a drop to 0 is written at once;
- at shutdown the published values become 0: no agent protects the node until the next one starts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from agent import capacity
from agent.config import OversubscriptionConfig
from agent.publisher import Changes
from agent.resources import node_allocatable
from agent.view import AgentView
from contract import annotations as keys

log = logging.getLogger(__name__)

LABEL_ENABLED = keys.OVERSUBSCRIPTION_LABEL
ANNOTATION_TYPES = keys.OVERSUBSCRIPTION_TYPES
ANNOTATION_CPU = keys.OVERSUBSCRIPTION_CPU
ANNOTATION_MEMORY = keys.OVERSUBSCRIPTION_MEMORY
BATCH_CPU = keys.BATCH_CPU
BATCH_MEMORY = keys.BATCH_MEMORY
ALL_TYPES = ("cpu", "memory")


def parse_types(value: object, warn: Callable[[str], None] | None = None) -> frozenset[str]:
    """`cpu`, `memory` or `cpu,memory`; anything else warns and means both."""
    if value is None:
        return frozenset(ALL_TYPES)
    parts = {p.strip() for p in str(value).split(",") if p.strip()}
    if not parts or not parts <= set(ALL_TYPES):
        if warn:
            warn(f"{ANNOTATION_TYPES}={value!r} is not cpu, memory or cpu,memory; publishing both")
        return frozenset(ALL_TYPES)
    return frozenset(parts)


def oversubscription_enabled(node: Mapping[str, Any], enabled_on_all_nodes: bool) -> bool:
    """Is this node oversubscribed? The one definition, for publishing capacity and for eviction's rule."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return enabled_on_all_nodes or labels.get(LABEL_ENABLED) == "true"


def _int_or_none(value: object) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


class OversubscriptionOwner:
    """Computes capacity from the latest snapshot and decides which annotations to write."""

    name = "oversubscription"

    def __init__(
        self,
        view: AgentView,
        config: OversubscriptionConfig,
        *,
        evicting: Callable[[], bool] = lambda: False,
    ) -> None:
        self.view, self.config, self.evicting = view, config, evicting
        self.params = capacity.CapacityParams(
            config.peak_window, config.min_history_seconds, config.cpu_reclaim_ratio, config.memory_reclaim_ratio
        )
        self.last: dict[str, Any] = {"enabled": None, "reason": "no node object yet"}
        self._last_write: float | None = None
        self._warned_types: str | None = None
        self._withdrawn = False

    def enabled(self, node: Mapping[str, Any]) -> bool:
        return oversubscription_enabled(node, self.config.enabled_on_all_nodes)

    def withdraw(self) -> None:
        """Shutting down: from now on only zeros for the values the node carries."""
        self._withdrawn = True

    def _warn_types(self, msg: str) -> None:
        if self._warned_types != msg:
            self._warned_types = msg
            log.warning(msg)

    def desired(self, node: dict[str, Any], now: float) -> tuple[bool, dict[str, int]]:
        """(enabled, {"cpu": milli, "memory": bytes}) and the explanation kept in `self.last`."""
        meta = node.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        if not self.enabled(node):
            self.last = {"enabled": False, "reason": f"node label {LABEL_ENABLED} is not 'true'"}
            return False, {}
        types = parse_types(annotations.get(ANNOTATION_TYPES), self._warn_types)
        snap = self.view.snapshot
        alloc_cpu, alloc_mem = node_allocatable(node)
        stall = self.config.stall_intervals * self.view.interval
        reason = "computed"
        values = {"cpu": 0, "memory": 0}
        detail: dict[str, Any] = {}
        if snap is None or self.view.last_tick_mono is None or now - self.view.last_tick_mono > stall:
            reason = "sampling stalled: publishing 0"
        elif alloc_cpu is None or alloc_mem is None:
            reason = "node has no status.allocatable: publishing 0"
        else:
            with self.view.windows_lock:
                cpu, mem = capacity.compute(snap, self.view.windows, alloc_cpu, alloc_mem, self.params)
            detail = capacity.as_json(cpu, mem)
            if self.evicting():
                reason = "node is evicting offline pods: publishing 0"
            else:
                values = {"cpu": int(cpu.oversubscription * 1000), "memory": int(mem.oversubscription)}
        values = {k: (v if k in types else 0) for k, v in values.items()}
        self.last = {
            "enabled": True,
            "types": sorted(types),
            "reason": reason,
            "cpu_millicores": values["cpu"],
            "memory_bytes": values["memory"],
            **detail,
        }
        return True, values

    def _should_write(self, old: int | None, new: int, now: float) -> bool:
        if old is None:
            return True
        if old == new:
            return False
        if new == 0:
            return True  # safety first: take capacity away at once
        if abs(new - old) > self.config.update_fraction * max(abs(old), 1):
            return True
        return self._last_write is None or now - self._last_write >= self.config.update_interval_seconds

    def changes(self, node: dict[str, Any], now: float) -> Changes:
        meta = node.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        if self._withdrawn:
            return self._zeros(node)
        enabled, values = self.desired(node, now)
        out = Changes()
        if not enabled:
            out.annotations = {k: None for k in (ANNOTATION_CPU, ANNOTATION_MEMORY) if k in annotations}
            if self.config.extended_resources:
                cap = (node.get("status") or {}).get("capacity") or {}
                out.extended_resources = {k: None for k in (BATCH_CPU, BATCH_MEMORY) if k in cap}
            return out
        current = {"cpu": _int_or_none(annotations.get(ANNOTATION_CPU)),
                   "memory": _int_or_none(annotations.get(ANNOTATION_MEMORY))}  # fmt: skip
        if any(self._should_write(current[k], values[k], now) for k in ALL_TYPES):
            out.annotations = {ANNOTATION_CPU: str(values["cpu"]), ANNOTATION_MEMORY: str(values["memory"])}
            if self.config.extended_resources:
                out.extended_resources = {BATCH_CPU: str(values["cpu"]), BATCH_MEMORY: str(values["memory"])}
        return out

    def _zeros(self, node: dict[str, Any]) -> Changes:
        """0 for each published value the node carries (a scheduler must not count on stale capacity)."""
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        out = Changes()
        out.annotations = {k: "0" for k in (ANNOTATION_CPU, ANNOTATION_MEMORY) if annotations.get(k) not in (None, "0")}
        if self.config.extended_resources:
            cap = (node.get("status") or {}).get("capacity") or {}
            out.extended_resources = {k: "0" for k in (BATCH_CPU, BATCH_MEMORY) if cap.get(k) not in (None, "0")}
        self.last = {**self.last, "reason": "agent stopping: publishing 0"}
        return out

    def committed(self, changes: Changes, now: float) -> None:
        self._last_write = now

    def section(self) -> dict[str, Any]:
        """The `oversubscription` key of /api/v1/node."""
        return dict(self.last)

    def metrics(self) -> Iterable[Metric]:
        last = self.last
        if not last.get("enabled"):
            return []
        g = GaugeMetricFamily("colo_oversubscription_cpu_cores", "Oversubscribable CPU published, cores")
        g.add_metric([], last.get("cpu_millicores", 0) / 1000.0)
        m = GaugeMetricFamily("colo_oversubscription_memory_bytes", "Oversubscribable memory published, bytes")
        m.add_metric([], float(last.get("memory_bytes", 0)))
        out: list[Metric] = [g, m]
        for res in ("cpu", "memory"):
            d = last.get(res)
            if isinstance(d, dict):
                for field_name in ("reclaimable", "headroom", "system_usage", "online_peak"):
                    fam = GaugeMetricFamily(
                        f"colo_capacity_{field_name}_{'cores' if res == 'cpu' else 'bytes'}",
                        f"Capacity computation: {field_name.replace('_', ' ')} of {res}",
                    )
                    fam.add_metric([], float(d[field_name]))
                    out.append(fam)
        return out
