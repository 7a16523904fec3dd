"""Publishes oversubscribable capacity as Volcano's node annotations and as the extended resources
`kubernetes.io/batch-cpu`/`batch-memory` in node status (koordinator's), following the rules of the
oversubscription issue (11 for the extended resources):

- enabled by node label `volcano.sh/oversubscription=true` (or on all nodes by configuration); switched
  off, Colo's annotations are removed;
- `volcano.sh/oversubscription-types` on the node selects cpu, memory or both (default both); a type not
  selected is published as 0;
- `volcano.sh/oversubscription-cpu` in integer milli-CPU, `volcano.sh/oversubscription-memory` in bytes;
- 0 while the node is evicting or sampling has stalled (no stale capacity);
- a value is patched when it moved by more than `update_fraction`, or changed at all and
  `update_interval_seconds` passed since the last write; a drop to 0 is written at once;
- at shutdown the published values become 0: no agent protects the node until the next one starts;
- the extended resources carry the same numbers, in `status.capacity` and `status.allocatable`, on by default
  (`extended_resources`); switched off (the label removed, or `extended_resources: false`) they are removed.

What is published is the node's batch allocatable (agent/batch_capacity.py): the scheduler subtracts the
requests of the batch pods already bound; batch memory above its requests is taken off here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from agent import batch_capacity, capacity
from agent.batch_capacity import BatchRequests, BatchUse
from agent.config import OversubscriptionConfig
from agent.node_state import NodeState
from agent.publisher import Changes
from agent.resources import node_allocatable, quantity
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


def _status_int(value: object) -> int | None:
    """A status quantity as an integer: the API server writes 2000 back as '2k'."""
    q = quantity(value)
    return None if q is None or q != q.to_integral_value() else int(q)


def _batch_held(node: Mapping[str, Any]) -> dict[str, list[object]]:
    """The node's batch resources, each with its values in status.capacity and status.allocatable."""
    status = node.get("status") or {}
    out: dict[str, list[object]] = {}
    for field_name in ("capacity", "allocatable"):
        for key, value in (status.get(field_name) or {}).items():
            if key in (BATCH_CPU, BATCH_MEMORY):
                out.setdefault(key, []).append(value)
    return out


class OversubscriptionOwner:
    """Computes capacity from the latest snapshot and decides which annotations to write."""

    name = "oversubscription"

    def __init__(
        self,
        view: AgentView,
        config: OversubscriptionConfig,
        *,
        evicting: Callable[[], bool] = lambda: False,
        batch_requests: Callable[[], BatchRequests] = BatchRequests,
    ) -> None:
        self.view, self.config, self.evicting = view, config, evicting
        self.batch_requests = batch_requests
        self.params = capacity.params_from(config)
        self._ages = capacity.PodAges()  # the online pods seen pass after pass (the predictor's young pods)
        self.last: dict[str, Any] = {"enabled": None, "reason": "no node object yet"}
        self._last_write: float | None = None
        self._warned_types: str | None = None
        self._withdrawn = False
        # the capacity of the latest pass, computed in that pass (sampling thread); replaced, never changed
        self._pass: tuple[capacity.ResourceCapacity, capacity.ResourceCapacity] | None = None
        self._batch: tuple[BatchRequests, BatchUse] = (BatchRequests(), BatchUse())

    def enabled(self, node: Mapping[str, Any]) -> bool:
        return oversubscription_enabled(node, self.config.enabled_on_all_nodes)

    def on_state(self, state: NodeState, node: Mapping[str, Any]) -> None:
        """Capacity is a stage of the pass: computed from the pass's state, so what is published and what
        /api/v1/node explains come from one pass. Only where it is published (the label) and the Node has an
        allocatable."""
        if not self.enabled(node) or not state.allocatable_from_node:
            self._pass = None
            self._batch = (self.batch_requests(), BatchUse())
            return
        with self.view.windows_lock:
            self._pass = capacity.compute_state(state, self.view.windows, self.params, self._ages)
        self._batch = (self.batch_requests(), batch_capacity.batch_use(state.offline))

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
        values = {"cpu": 0, "memory": 0, "batch_cpu": 0, "batch_memory": 0}  # annotations, kubernetes.io/batch-*
        detail: dict[str, Any] = {}
        if snap is None or self.view.last_tick_mono is None or now - self.view.last_tick_mono > stall:
            reason = "sampling stalled: publishing 0"
        elif alloc_cpu is None or alloc_mem is None:
            reason = "node has no status.allocatable: publishing 0"
        elif self._pass is None:
            reason = "no pass has computed capacity yet: publishing 0"
        else:
            cpu, mem = self._pass
            detail = capacity.as_json(cpu, mem)
            if self.evicting():
                reason = "node is evicting offline pods: publishing 0"
            else:
                use = self._batch[1]
                values = {"cpu": batch_capacity.allocatable("cpu", int(cpu.oversubscription * 1000), use),
                          "memory": batch_capacity.allocatable("memory", int(mem.oversubscription), use),
                          "batch_cpu": batch_capacity.allocatable("cpu", int(cpu.batch * 1000), use),
                          "batch_memory": batch_capacity.allocatable("memory", int(mem.batch), use)}  # fmt: skip
        values = {k: (v if k.removeprefix("batch_") in types else 0) for k, v in values.items()}
        requests, use = self._batch
        self.last = {
            "enabled": True,
            "types": sorted(types),
            "reason": reason,
            "cpu_millicores": values["cpu"],
            "memory_bytes": values["memory"],
            "extended_resources": self.config.extended_resources,
            "batch": batch_capacity.section(
                {"cpu": values["batch_cpu"], "memory": values["batch_memory"]}, requests, use
            ),
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
        """Annotations and extended resources move together: one decision (hysteresis) over both, so the
        scheduler and Volcano never see two different numbers for long. Extended resources switched off
        (label removed or `extended_resources: false`) are removed from status."""
        meta = node.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        if self._withdrawn:
            return self._zeros(node)
        enabled, values = self.desired(node, now)
        extended = enabled and self.config.extended_resources
        out = Changes()
        if not extended:
            out.extended_resources = {k: None for k in _batch_held(node)}
        if not enabled:
            out.annotations = {k: None for k in (ANNOTATION_CPU, ANNOTATION_MEMORY) if k in annotations}
            return out
        status = node.get("status") or {}
        current = [(k, _int_or_none(annotations.get(key))) for k, key in (("cpu", ANNOTATION_CPU),
                                                                         ("memory", ANNOTATION_MEMORY))]  # fmt: skip
        if extended:
            for field_name in ("capacity", "allocatable"):
                held = status.get(field_name) or {}
                current += [("batch_cpu", _status_int(held.get(BATCH_CPU))),
                            ("batch_memory", _status_int(held.get(BATCH_MEMORY)))]  # fmt: skip
        if any(self._should_write(old, values[k], now) for k, old in current):
            out.annotations = {ANNOTATION_CPU: str(values["cpu"]), ANNOTATION_MEMORY: str(values["memory"])}
            if extended:
                batch: dict[str, str | None] = {BATCH_CPU: str(values["batch_cpu"]),
                                                BATCH_MEMORY: str(values["batch_memory"])}  # fmt: skip
                out.extended_resources = batch
        return out

    def _zeros(self, node: dict[str, Any]) -> Changes:
        """0 for each published value the node carries (a scheduler must not count on stale capacity)."""
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        out = Changes()
        out.annotations = {k: "0" for k in (ANNOTATION_CPU, ANNOTATION_MEMORY) if annotations.get(k) not in (None, "0")}
        if self.config.extended_resources:
            held = _batch_held(node)
            if any(_status_int(v) != 0 for values in held.values() for v in values):
                out.extended_resources = {k: "0" for k in held}
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
        batch = last.get("batch")
        if isinstance(batch, dict):
            pods = GaugeMetricFamily("colo_node_batch_pods", "Pods on the node with kubernetes.io/batch-* requests")
            pods.add_metric([], float(batch["pods"]))
            out.append(pods)
            helps = {"allocated": "Σ batch requests of the node's pods that have not finished",
                     "free": "published batch allocatable − allocated (negative: over-allocated)"}  # fmt: skip
            for res, unit, scale in (("cpu", "cores", 1000.0), ("memory", "bytes", 1.0)):
                for what, help_text in helps.items():
                    fam = GaugeMetricFamily(f"colo_node_batch_{what}_{res}_{unit}", f"Batch {res}: {help_text}")
                    fam.add_metric([], batch[res][what] / scale)
                    out.append(fam)
        return out
