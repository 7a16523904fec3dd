"""Publishes oversubscribable capacity as Volcano's node annotations and as the extended resources
`kubernetes.io/batch-cpu`/`batch-memory` in node status (koordinator's), following the rules of the
oversubscription issue (11 for the extended resources, 22 for the floor and the steady publishing;
docs/publishing.md has the whole table):

- enabled by node label `volcano.sh/oversubscription=true` (or on all nodes by configuration); switched
  off, Colo's annotations are removed;
- `volcano.sh/oversubscription-types` on the node selects cpu, memory or both (default both); a type not
  selected is published as 0 in the annotations;
- `volcano.sh/oversubscription-cpu` in integer milli-CPU, `volcano.sh/oversubscription-memory` in bytes;
  0 while the node is evicting, sampling has stalled, no pass has computed yet, and at shutdown;
- the number a pass proposes is the mean computed over the last `publish_window_seconds`; it is written
  with hysteresis (`update_fraction`, both directions) at most once per `update_interval_seconds`, except
  a drop for safety (evicting, stalled, not computed, the resource under pressure or deselected), written
  at once, under pressure to the pass's own value in one write (agent/capacity/publish_rules.py);
- the extended resources, in `status.capacity` and `status.allocatable`, never go below what the node's
  batch pods request (the floor: kubelet re-admits every running pod against them at its restart), in every
  state, at shutdown included; switched off (the label removed, or `extended_resources: false`) they are
  held at the floor while batch pods hold them and removed once none do.

Each model has its own number (agent/capacity/lendable.py): the extended resources are the node's batch allocatable
(the headroom: capacity nobody requested included, since batch pods use nothing else), the annotations only
what online pods requested and do not use (Volcano adds them on top of allocatable). The scheduler
subtracts the requests of the batch pods already bound; batch memory above its requests is taken off here
(agent/capacity/batch_floor.py).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.metrics_core import Metric

from agent.capacity import batch_floor, lendable
from agent.capacity.batch_floor import BatchUse
from agent.capacity.publish_rules import Band, WindowMean, floored, proposed, should_write
from agent.cluster.node_writer import Changes
from agent.config_sections.lending import OversubscriptionConfig
from agent.node_state import BatchRequests, NodeState
from agent.view import AgentView
from common.families import Family
from contract import annotations as keys
from kube.resources import node_allocatable, quantity

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


RESOURCES = ("cpu", "memory")

OVERSUBSCRIPTION_CPU = Family("colo_oversubscription_cpu_cores", "Oversubscribable CPU published, cores")
OVERSUBSCRIPTION_MEMORY = Family("colo_oversubscription_memory_bytes", "Oversubscribable memory published, bytes")
#: The capacity computation's parts, per resource (the `cpu` and `memory` keys of the section).
CAPACITY_FIELDS = ("reclaimable", "headroom", "system_usage", "online_peak")
CAPACITY: dict[tuple[str, str], Family] = {
    (res, field_name): Family(
        f"colo_capacity_{field_name}_{unit}", f"Capacity computation: {field_name.replace('_', ' ')} of {res}"
    )
    for res, unit in (("cpu", "cores"), ("memory", "bytes"))
    for field_name in CAPACITY_FIELDS
}
#: The learned lending margin's factor, per resource (agent/capacity/margin.py).
MARGIN: dict[str, Family] = {
    res: Family(
        f"colo_capacity_margin_factor_{res}",
        f"Learned lending margin of {res}: the share of its lendable "
        "capacity the node lends (1: no recent would-be violation)",
    )
    for res in ("cpu", "memory")
}
BATCH_PODS = Family("colo_node_batch_pods", "Pods on the node with kubernetes.io/batch-* requests")
_BATCH_HELP = {
    "allocated": "Σ batch requests of the node's pods that have not finished",
    "free": "published batch allocatable − allocated (0: nothing more fits; the published value "
    "is never below what is allocated)",
}
BATCH_FIELDS = tuple(_BATCH_HELP)
#: The batch resources' accounting (the `batch` key of the section), per resource.
BATCH: dict[tuple[str, str], Family] = {
    (res, what): Family(f"colo_node_batch_{what}_{res}_{unit}", f"Batch {res}: {help_text}")
    for res, unit in (("cpu", "cores"), ("memory", "bytes"))
    for what, help_text in _BATCH_HELP.items()
}
#: What the Node carries in status.allocatable (the scheduler and kubelet admit against it), per resource: set
#: beside the agent's own figure above, a stale or wrong value on the Node shows (the alert
#: ColoBatchCapacityAboveLendable, docs/operations.md).
NODE_STATUS: dict[str, Family] = {
    res: Family(
        f"colo_node_batch_status_{res}_{unit}",
        f"Batch {res}: kubernetes.io/batch-{res} in the Node's status.allocatable as the agent last read it "
        "(0 when absent)",
    )
    for res, unit in (("cpu", "cores"), ("memory", "bytes"))
}
ANNOTATION_OF = {"cpu": ANNOTATION_CPU, "memory": ANNOTATION_MEMORY}
EXTENDED_OF = {"cpu": BATCH_CPU, "memory": BATCH_MEMORY}
# after a write, the node informer's copy may still show the old value for a moment: within this many
# seconds a difference from what was written is that lag, not someone else's change
CACHE_SETTLE_SECONDS = 5.0


def _held_value(values: list[object] | None) -> int | None:
    """One batch resource's value when status.capacity and status.allocatable agree on it, else None."""
    if not values:
        return None
    ints = {_status_int(v) for v in values}
    if len(ints) != 1 or len(values) != 2:
        return None
    return ints.pop()


@dataclass(frozen=True, slots=True)
class PassCapacity:
    """What one pass computed (sampling thread), replaced whole, never changed."""

    cpu: lendable.ResourceCapacity
    memory: lendable.ResourceCapacity
    computed: dict[str, int]  # this pass's batch allocatable (kubernetes.io/batch-*), milli-cores and bytes
    smoothed: dict[str, int]  # the mean of `computed` over the publish window
    annotations: dict[str, int]  # the mean over the window of Volcano's number (requested but unused only)
    pressure: frozenset[str]  # resources whose smoothed usage is near eviction's high watermark
    use: BatchUse
    volcano: dict[str, int]  # this pass's Volcano number


@dataclass(frozen=True, slots=True)
class Targets:
    """What the node should carry now, before hysteresis."""

    enabled: bool
    extended_on: bool  # enabled and extended_resources
    reason: str
    annotations: dict[str, int]  # Volcano's rule: 0 unless computed
    extended: dict[str, int]  # the batch allocatable, floored
    floor: dict[str, int] | None  # Σ batch requests; None while the pod list is not known
    shrink_now: frozenset[str]  # resources whose drop is written at once


class OversubscriptionOwner:
    """Computes capacity in each pass and decides which annotations and status values to write."""

    name = "oversubscription"

    def __init__(
        self,
        view: AgentView,
        config: OversubscriptionConfig,
        *,
        evicting: Callable[[], bool] = lambda: False,
        batch_requests: Callable[[], BatchRequests | None] = BatchRequests,
        high_watermarks: Callable[[], Mapping[str, int]] = lambda: {"cpu": 80, "memory": 80},
    ) -> None:
        self.view, self.config, self.evicting = view, config, evicting
        self.high_watermarks = high_watermarks  # eviction's, in percent: pressure is near them
        self.batch_requests = batch_requests  # None: the pod list is not known yet
        self.params = lendable.params_from(config)
        # the online pods seen pass after pass (the young-pod rule) and the learned margins, both as the windows
        # restored from the state file remember them: a restart is not a cold start
        with view.windows_lock:
            self._ages = lendable.PodAges.from_windows(view.windows)
            self._margins = lendable.margins(self.params, view.windows)
        self.band = Band(config.update_fraction, config.update_interval_seconds)
        self.last: dict[str, Any] = {"enabled": None, "reason": "no node object yet"}
        self._started: float | None = None  # the publisher's clock at the first round
        self._last_write: dict[str, float] = {}  # "annotations" / "extended" -> when last written
        self._written: dict[str, tuple[dict[str, int | None], float]] = {}  # what was last written, and when
        self._warned_types: str | None = None
        self._withdrawn = False
        self._pass: PassCapacity | None = None  # the latest pass's (sampling thread)
        #: kubernetes.io/batch-* in the Node's status.allocatable at the last round (milli-cores, bytes), replaced
        #: whole: the HTTP thread reads it for /metrics
        self.node_status: dict[str, int] = {}
        # sampling thread only: one window per resource and publishing model
        self._windows = {
            (model, r): WindowMean(config.publish_window_seconds)
            for model in ("batch", "annotations")
            for r in RESOURCES
        }

    def enabled(self, node: Mapping[str, Any]) -> bool:
        return oversubscription_enabled(node, self.config.enabled_on_all_nodes)

    def on_state(self, state: NodeState, node: Mapping[str, Any]) -> None:
        """Capacity is a stage of the pass: computed from the pass's state, so what is published and what
        /api/v1/node explains come from one pass. Only where it is published (the label) and the Node has an
        allocatable; elsewhere the smoothing window starts again. A pass whose CPU rate is not known yet (the
        first after a start) computes nothing: its 0 would hold the window's lowest value for the window."""
        if not state.cpu.known:
            self._pass = None
            return
        if not self.enabled(node) or not state.allocatable_from_node:
            self._pass = None
            for w in self._windows.values():
                w.clear()
            return
        high = self.high_watermarks()
        margin = self.config.pressure_margin_percent
        # lending stops `margin` points below the memory watermark in force (the node's annotation or the default)
        limit = lendable.memory_fill_limit(high.get("memory", 100), margin)
        if limit != self.params.memory_fill_limit:
            self.params = dataclasses.replace(self.params, memory_fill_limit=limit)
        with self.view.windows_lock:
            cpu, mem = lendable.compute_state(state, self.view.windows, self.params, self._ages, self._margins)
        use = batch_floor.batch_use(state.offline)
        # each model by its own rule (agent/capacity/lendable.py): batch-* lend the headroom, the annotations only what
        # online pods requested and do not use
        computed = {
            "cpu": batch_floor.allocatable("cpu", int(cpu.batch * 1000), use),
            "memory": batch_floor.allocatable("memory", int(mem.batch), use),
        }
        volcano = {
            "cpu": batch_floor.allocatable("cpu", int(cpu.oversubscription * 1000), use),
            "memory": batch_floor.allocatable("memory", int(mem.oversubscription), use),
        }
        t = state.snapshot.mono
        smoothed = {r: self._windows["batch", r].add(t, v) for r, v in computed.items()}
        annotations = {r: self._windows["annotations", r].add(t, v) for r, v in volcano.items()}
        pressure = frozenset(r for r, pct in state.smoothed_percent.items() if pct >= high.get(r, 100) - margin)
        self._pass = PassCapacity(cpu, mem, computed, smoothed, annotations, pressure, use, volcano)

    def withdraw(self) -> None:
        """Shutting down: from now on the annotations go to 0 and the batch resources to the floor."""
        self._withdrawn = True

    def _warn_types(self, msg: str) -> None:
        if self._warned_types != msg:
            self._warned_types = msg
            log.warning(msg)

    def _floor(self) -> tuple[BatchRequests | None, dict[str, int] | None]:
        requests = self.batch_requests()
        if requests is None:
            return None, None
        return requests, {"cpu": requests.cpu_milli, "memory": requests.memory_bytes}

    def desired(self, node: dict[str, Any], now: float) -> Targets:
        """What the node should carry now, and the explanation kept in `self.last`."""
        meta = node.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        self.node_status = {r: _status_int(allocatable.get(EXTENDED_OF[r])) or 0 for r in RESOURCES}
        requests, floor = self._floor()
        if not self.enabled(node):
            self.last = {"enabled": False, "reason": f"node label {LABEL_ENABLED} is not 'true'", "floor": floor}
            return Targets(False, False, self.last["reason"], {}, dict(floor or {}), floor, frozenset(RESOURCES))
        types = parse_types(annotations.get(ANNOTATION_TYPES), self._warn_types)
        alloc_cpu, alloc_mem = node_allocatable(node)
        stall = self.config.stall_intervals * self.view.interval
        reason = "computed"
        values = {"cpu": 0, "memory": 0}  # Volcano's annotations
        batch = {"cpu": 0, "memory": 0}  # kubernetes.io/batch-*, before the floor
        detail: dict[str, Any] = {}
        shrink_now = frozenset(RESOURCES)
        p = self._pass
        if self.view.snapshot is None or self.view.last_tick_mono is None or now - self.view.last_tick_mono > stall:
            reason = "sampling stalled: publishing 0"
        elif alloc_cpu is None or alloc_mem is None:
            reason = "node has no status.allocatable: publishing 0"
        elif p is None:
            reason = "no pass has computed capacity yet: publishing 0"
        else:
            detail = lendable.as_json(p.cpu, p.memory)
            if self.evicting():
                reason = "node is evicting offline pods: publishing 0"
            else:
                # under pressure a fall goes to this pass's value in one write, not down the window's mean
                values = {r: proposed(p.annotations[r], p.volcano[r], r in p.pressure) for r in RESOURCES}
                batch = {r: proposed(p.smoothed[r], p.computed[r], r in p.pressure) for r in RESOURCES}
                shrink_now = p.pressure | frozenset(r for r in RESOURCES if r not in types)  # switched off: at once
        values = {k: (v if k in types else 0) for k, v in values.items()}
        extended = floored({k: (v if k in types else 0) for k, v in batch.items()}, floor or {})
        use = p.use if p is not None else BatchUse()
        self.last = {
            "enabled": True,
            "types": sorted(types),
            "reason": reason,
            "cpu_millicores": values["cpu"],
            "memory_bytes": values["memory"],
            "extended_resources": self.config.extended_resources,
            "batch": batch_floor.section(extended, requests or BatchRequests(), use),
            "floor": floor,
            "computed": dict(p.computed) if p is not None else None,
            "pressure": sorted(p.pressure) if p is not None else [],
            **detail,
        }
        return Targets(True, self.config.extended_resources, reason, values, extended, floor, shrink_now)

    def _since_last_write(self, kind: str, now: float) -> float | None:
        last = self._last_write.get(kind, self._started)
        return None if last is None else now - last

    def _current(self, kind: str, on_node: dict[str, int | None], now: float) -> dict[str, int | None]:
        """What the node carries: the informer's copy, or what was just written while that copy lags."""
        written = self._written.get(kind)
        if written is not None and on_node != written[0] and now - written[1] < CACHE_SETTLE_SECONDS:
            return written[0]
        return on_node

    def changes(self, node: dict[str, Any], now: float) -> Changes:
        """The annotations and the batch resources, each written only when its own rule says so (two
        PATCHes at most: the annotations are on the Node, the resources on its status subresource)."""
        if self._started is None:
            self._started = now
        if self._withdrawn:
            return self._final(node)
        t = self.desired(node, now)
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        out = Changes()
        if not t.enabled:
            out.annotations = {ANNOTATION_OF[r]: None for r in RESOURCES if ANNOTATION_OF[r] in annotations}
        else:
            on_node = {r: _int_or_none(annotations.get(ANNOTATION_OF[r])) for r in RESOURCES}
            current = self._current("annotations", on_node, now)
            since = self._since_last_write("annotations", now)
            if any(
                should_write(
                    current[r], t.annotations[r], self.band, since_last_write=since, shrink_now=r in t.shrink_now
                )
                for r in RESOURCES
            ):
                out.annotations = {ANNOTATION_OF[r]: str(t.annotations[r]) for r in RESOURCES}
        out.extended_resources = self._extended_changes(node, t, now)
        return out

    def _extended_changes(self, node: dict[str, Any], t: Targets, now: float) -> dict[str, str | None]:
        if t.floor is None:
            return {}  # the pod list is not known: never lower what running pods may hold
        held = _batch_held(node)
        on_node = {r: _held_value(held.get(EXTENDED_OF[r])) for r in RESOURCES}
        if t.extended_on:
            target = t.extended
            wanted = set(RESOURCES)
        else:
            # switched off: kept at what running batch pods request (kubelet re-admits them against it),
            # removed once none do
            if not any(t.floor.values()):
                return {EXTENDED_OF[r]: None for r in RESOURCES if EXTENDED_OF[r] in held}
            target = dict(t.floor)
            wanted = {r for r in RESOURCES if EXTENDED_OF[r] in held}
        current = self._current("extended", on_node, now)
        since = self._since_last_write("extended", now)
        if any(
            should_write(
                current[r],
                target[r],
                self.band,
                since_last_write=since,
                shrink_now=not t.extended_on or r in t.shrink_now,
                floor=t.floor[r],
            )
            for r in wanted
        ):
            return {EXTENDED_OF[r]: str(target[r]) for r in wanted}
        return {}

    def _final(self, node: dict[str, Any]) -> Changes:
        """At shutdown: 0 in the annotations the node carries (no agent protects the node until the next one
        starts), the batch resources at the floor (the running batch pods are re-admitted; nothing new fits)."""
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        out = Changes()
        out.annotations = {k: "0" for k in ANNOTATION_OF.values() if annotations.get(k) not in (None, "0")}
        _, floor = self._floor()
        if floor is not None:
            held = _batch_held(node)
            wanted = {r for r in RESOURCES if EXTENDED_OF[r] in held}
            if self.enabled(node) and self.config.extended_resources and any(floor.values()):
                wanted = set(RESOURCES)
            if any(_held_value(held.get(EXTENDED_OF[r])) != floor[r] for r in wanted):
                out.extended_resources = {EXTENDED_OF[r]: str(floor[r]) for r in wanted}
        self.last = {
            **self.last,
            "reason": "agent stopping: publishing 0, batch resources at what batch pods request",
            "floor": floor,
        }
        return out

    def committed(self, changes: Changes, now: float) -> None:
        """Remember what was written and when: the hysteresis counts from it, and the informer's lag is
        not mistaken for the node's value."""
        for kind, key_of, written in (
            ("annotations", ANNOTATION_OF, changes.annotations),
            ("extended", EXTENDED_OF, changes.extended_resources),
        ):
            if any(key_of[r] in written for r in RESOURCES):
                values = {r: _int_or_none(written.get(key_of[r])) for r in RESOURCES}
                self._written[kind] = (values, now)
                self._last_write[kind] = now

    def section(self) -> dict[str, Any]:
        """The `oversubscription` key of /api/v1/node."""
        return dict(self.last)

    def metrics(self) -> Iterable[Metric]:
        last = self.last
        if not last.get("enabled"):
            return []
        g = OVERSUBSCRIPTION_CPU.metric()
        g.add_metric([], last.get("cpu_millicores", 0) / 1000.0)
        m = OVERSUBSCRIPTION_MEMORY.metric()
        m.add_metric([], float(last.get("memory_bytes", 0)))
        out: list[Metric] = [g, m]
        for res in ("cpu", "memory"):
            d = last.get(res)
            if isinstance(d, dict):
                for field_name in CAPACITY_FIELDS:
                    fam = CAPACITY[res, field_name].metric()
                    fam.add_metric([], float(d[field_name]))
                    out.append(fam)
                fam = MARGIN[res].metric()
                fam.add_metric([], float(d["margin"]))
                out.append(fam)
        batch = last.get("batch")
        if isinstance(batch, dict):
            pods = BATCH_PODS.metric()
            pods.add_metric([], float(batch["pods"]))
            out.append(pods)
            for res, scale in (("cpu", 1000.0), ("memory", 1.0)):
                for what in BATCH_FIELDS:
                    fam = BATCH[res, what].metric()
                    fam.add_metric([], batch[res][what] / scale)
                    out.append(fam)
        status = self.node_status
        for res, scale in (("cpu", 1000.0), ("memory", 1.0)):
            if res in status:
                fam = NODE_STATUS[res].metric()
                fam.add_metric([], status[res] / scale)
                out.append(fam)
        return out
