"""Eviction by watermarks, with Volcano's keys and defaults.

The node's real usage (all pods plus system) as a percentage of allocatable, averaged over a short window
so one spike does not evict, is compared with the watermarks from the node annotations
`volcano.sh/evicting-{cpu,memory}-{high,low}-watermark` (defaults CPU 80/30, memory 80/30, Volcano's memory
high is 60); batch pods' CPU within their kubernetes.io/batch-cpu requests is not counted, what the node
lent them and takes back by throttling (agent/node_state.py `watermark_usage`; docs/online-qos.md, lending and
the watermarks):

- above a high watermark the node enters the evicting state: `volcano.sh/offline-job-evicting=true`,
  oversubscription published as 0, optionally a NoSchedule taint; offline pods are evicted (lowest priority,
  then highest usage of the resource under pressure, then youngest) until the projected usage falls below
  the high watermark, at most `max_per_round` per round and one round per cooldown;
- below the low watermark of that resource the state clears (hysteresis);
- at shutdown the annotation and the taint are removed: no agent evicts once this one has stopped.

Decisions are made in the sampling thread; API calls happen in this module's worker thread, through the
`policy/v1` Eviction subresource so PodDisruptionBudgets hold (a 429 moves on to the next victim). If the
API server stays unreachable while memory is above its high watermark, offline pods' processes are killed
through their cgroups (memory only by default), and reported when the API returns.

Whether the API server is reachable is the shared `ApiHealth`: this module's own calls report to it too.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from prometheus_client.metrics_core import Metric

from agent.capacity.owner import oversubscription_enabled
from agent.cluster.node_writer import ApiHealth, Changes
from agent.config_sections.enforcement import EvictionConfig
from agent.evict import choice
from agent.evict.kube_actions import RESULTS, DryRunActuator, EvictionJob, KubeActuator
from agent.node_state import NodeState, Resource, StateBuilder, batch_request, pod_request
from agent.snapshot import PodSample, Snapshot
from cgroup import CgroupWriter
from common.families import Family
from contract.annotations import OFFLINE_JOB_EVICTING, evicting_watermark
from kube import Kube
from kube.resources import node_allocatable

log = logging.getLogger(__name__)

RESOURCES: tuple[Resource, ...] = ("cpu", "memory")

EVICTING = Family("colo_node_evicting", "1 while evicting for this resource", ("resource",))
EVICTION_USAGE = Family(
    "colo_node_eviction_usage_ratio", "Smoothed usage of allocatable compared with the watermarks", ("resource",)
)
EVICTION_WATERMARK = Family("colo_node_eviction_watermark_ratio", "Eviction watermarks in force", ("resource", "level"))
EVICTIONS = Family("colo_evictions", "Offline pod evictions by result", ("result",), "counter")
EVICTING_ANNOTATION = OFFLINE_JOB_EVICTING
_PERCENT = re.compile(r"[0-9]{1,3}")  # ASCII digits only: str.isdigit() also takes '²' and '٥'


def watermark_key(resource: str, level: str) -> str:
    return evicting_watermark(resource, level)


@dataclass(frozen=True, slots=True)
class Watermarks:
    high: dict[str, int]
    low: dict[str, int]


def parse_watermarks(annotations: Mapping[str, str], defaults: EvictionConfig) -> tuple[Watermarks, list[str]]:
    """Watermarks from node annotations; a malformed pair (not an integer 0-100, or high <= low) is rejected
    with a reason and that resource keeps its defaults."""
    high: dict[str, int] = {}
    low: dict[str, int] = {}
    problems: list[str] = []
    for res in RESOURCES:
        dh, dl = getattr(defaults, f"{res}_high_watermark"), getattr(defaults, f"{res}_low_watermark")
        values: dict[str, int] = {"high": dh, "low": dl}
        bad = False
        for level in ("high", "low"):
            raw = annotations.get(watermark_key(res, level))
            if raw is None:
                continue
            text = str(raw).strip()
            if not _PERCENT.fullmatch(text) or not 0 <= int(text) <= 100:
                problems.append(f"{watermark_key(res, level)}={raw!r} is not an integer percent in 0-100")
                bad = True
            else:
                values[level] = int(text)
        if not bad and values["high"] <= values["low"]:
            problems.append(f"{res} high watermark {values['high']} is not above low watermark {values['low']}")
            bad = True
        high[res], low[res] = (dh, dl) if bad else (values["high"], values["low"])
    return Watermarks(high, low), problems


class Evictor:
    name = "eviction"

    def __init__(
        self,
        kube: Kube,
        node_name: str,
        get_node: Callable[[], dict[str, Any] | None],
        writer: CgroupWriter,
        config: EvictionConfig,
        *,
        api_healthy: Callable[[], bool] | None = None,
        health: ApiHealth | None = None,
        oversubscribed: Callable[[dict[str, Any]], bool] | None = None,
        on_state_change: Callable[[], None] = lambda: None,
        dry_run: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube, self.node_name, self.get_node, self.writer = kube, node_name, get_node, writer
        self.health = health if health is not None else ApiHealth()
        self.api_healthy = api_healthy if api_healthy is not None else self.health.reachable
        # the overcommit rule applies where capacity is published: one definition, shared with the publisher
        self.oversubscribed = oversubscribed or partial(oversubscription_enabled, enabled_on_all_nodes=False)
        self.config, self.on_state_change = config, on_state_change
        self.dry_run, self.clock = dry_run, clock
        self.evicting: dict[str, bool] = {r: False for r in RESOURCES}
        self.usage: dict[str, float | None] = {r: None for r in RESOURCES}
        self.watermarks, _ = parse_watermarks({}, config)
        # every key present from the start: the HTTP thread copies it while the worker counts
        self.last_round: float | None = None
        self.last_decision: str = "no snapshot yet"
        self._states = StateBuilder(config.smoothing_seconds)  # for on_snapshot only: the stage brings its own
        self._warned: set[str] = set()
        # uid -> when its eviction was asked (self.clock); forgotten on failure and after asked_ttl, so a pod
        # whose eviction was lost or did not end it becomes a candidate again
        self.asked_ttl = max(60.0, 3 * config.cooldown_seconds)
        self._api_down_since: float | None = None
        self._above_since: dict[str, float | None] = {r: None for r in RESOURCES}
        self._killed_during_outage: list[str] = []
        self._killed_uids: set[str] = set()
        self._withdrawn = False  # shutting down: the evicting annotation is removed
        # dry run swaps the actuator, not the decisions
        self.actuator = (DryRunActuator if dry_run else KubeActuator)(
            kube, node_name, get_node, writer, config, self.health, self.is_evicting, clock=clock
        )
        self.results = self.actuator.results

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        self.actuator.start()

    def stop(self) -> None:
        self.actuator.stop()

    def drain(self, timeout: float = 5.0) -> bool:
        """Wait until every queued API job has finished; False on timeout."""
        return self.actuator.drain(timeout)

    def node_event(self, reason: str, message: str) -> None:
        self.actuator.node_event(reason, message)

    def is_evicting(self) -> bool:
        return any(self.evicting.values())

    def withdraw(self) -> None:
        """Shutting down: the evicting mark goes (no agent evicts once this one has stopped); the worker
        removes the taint as it stops."""
        self._withdrawn = True

    # -- deciding (sampling thread) ------------------------------------------------------------------
    def on_snapshot(self, snap: Snapshot) -> None:
        """A pass on its own (tests): the state from the snapshot and the Node's allocatable."""
        if self.config.enabled:
            self.on_state(self._states.build(snap, node_allocatable(self.get_node() or {})))

    def on_state(self, state: NodeState) -> None:
        if not self.config.enabled:
            return
        snap = state.snapshot
        node = self.get_node() or {}
        meta = node.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        self.watermarks, problems = parse_watermarks(annotations, self.config)
        events: list[tuple[str, str, str, str, str]] = []
        self._warned &= set(problems)  # a value fixed and broken again is news again
        for problem in problems:
            if problem not in self._warned:
                self._warned.add(problem)
                log.warning("node %s: %s; using the defaults", self.node_name, problem)
                events.append(("Node", self.node_name, "", "InvalidEvictionWatermark", problem + "; defaults apply"))
        alloc = {"cpu": state.cpu.allocatable, "memory": state.memory.allocatable}
        now = snap.mono
        changed = False
        for res in RESOURCES:
            smoothed = state.smoothed_percent.get(res)
            if smoothed is None:  # CPU on the first pass: not known yet
                continue
            usage = self.usage[res] = smoothed
            if usage <= self.watermarks.high[res]:
                self._above_since[res] = None
            elif self._above_since[res] is None:
                self._above_since[res] = now
            if usage > self.watermarks.high[res] and not self.evicting[res]:
                self.evicting[res], changed = True, True
                log.warning(
                    "node %s: %s usage %.1f%% above high watermark %d%%: evicting offline pods",
                    self.node_name,
                    res,
                    usage,
                    self.watermarks.high[res],
                )
            elif usage < self.watermarks.low[res] and self.evicting[res]:
                self.evicting[res], changed = False, True
                log.info(
                    "node %s: %s usage %.1f%% below low watermark %d%%: evicting state cleared",
                    self.node_name,
                    res,
                    usage,
                    self.watermarks.low[res],
                )
        if changed:
            self.on_state_change()
        self.actuator.prune_asked(set(snap.pods), self.asked_ttl)
        self._track_api(now)
        job = self._decide(snap, node, alloc, now)
        if job is not None:
            job.events[:0] = events
            self.actuator.submit(job)
        elif events:
            self.actuator.submit(EvictionJob("cpu", [], 0, 0.0, 0, 0.0, events))

    def _decide(self, snap: Snapshot, node: dict[str, Any], alloc: dict[str, float], now: float) -> EvictionJob | None:
        if self.last_round is not None and now - self.last_round < self.config.cooldown_seconds:
            return None
        for res in RESOURCES:
            usage = self.usage[res]
            if not self.evicting[res] or usage is None or usage <= self.watermarks.high[res]:
                continue
            if self.config.require_overcommit_when_oversubscribed and self.oversubscribed(node):
                # batch pods request kubernetes.io/batch-*: they overcommit the node as much as cpu/memory do
                requested = sum(pod_request(p, res) + batch_request(p, res) for p in snap.pods.values())
                if requested <= alloc[res]:
                    self.last_decision = (
                        f"{res} above high watermark but pods request {requested:.3g} <= allocatable "
                        f"{alloc[res]:.3g}: not evicting (oversubscription rule)"
                    )
                    continue
            alive = [p for p in snap.pods.values() if p.meta.pod_class == "offline" and p.uid not in self._killed_uids]
            if self._api_down_since is not None:
                # an eviction still in flight to an unreachable server frees nothing: asked pods may be killed
                victims, _, _ = self._victims(alive, res, usage, alloc[res])
                if victims and self._kill_if_due(res, victims, now):
                    self.last_round = now
                    self.last_decision = f"{res} at {usage:.1f}% with the API server unreachable: killed offline pods"
                    return None
            asked = self.actuator.asked()
            offline = [p for p in alive if p.uid not in asked]
            if not offline:
                self.last_decision = f"{res} above high watermark but no offline pod left to evict"
                continue
            victims, order, projected = self._victims(offline, res, usage, alloc[res])
            self.last_decision = (
                f"{res} at {usage:.1f}% > {self.watermarks.high[res]}%: evicting {len(victims)} "
                f"offline pod(s), projected {projected:.1f}%"
            )
            self.last_round = now
            # also while the API server seems away: the eviction is the way to find out that it is back
            return EvictionJob(res, order, len(victims), usage, self.watermarks.high[res], alloc[res])
        return None

    def _victims(
        self, pods: list[PodSample], res: Resource, usage: float, alloc: float
    ) -> tuple[list[PodSample], list[PodSample], float]:
        """The pods to evict this round, all candidates in order, and the projected usage."""
        return choice.plan(pods, res, usage, alloc, self.watermarks.high[res], self.config.max_per_round)

    def _track_api(self, now: float) -> None:
        if self.api_healthy():
            if self._api_down_since is not None and self._killed_during_outage:
                killed, self._killed_during_outage = self._killed_during_outage, []
                msg = f"killed offline pods' processes while the API server was unreachable: {', '.join(killed)}"
                self.actuator.submit(
                    EvictionJob("memory", [], 0, 0.0, 0, 0.0, [("Node", self.node_name, "", "OfflinePodsKilled", msg)])
                )
            self._api_down_since = None
            self._killed_uids.clear()
        elif self._api_down_since is None:
            self._api_down_since = now

    def _kill_if_due(self, res: Resource, victims: list[PodSample], now: float) -> bool:
        """Kill once usage has been above the high watermark for kill_after_seconds while the API server
        was unreachable: the later of the two start times counts, not the start of the outage."""
        allowed = self.config.kill_when_api_down_memory if res == "memory" else self.config.kill_when_api_down_cpu
        assert self._api_down_since is not None
        since = max(self._api_down_since, self._above_since[res] or now)
        if not allowed or now - since < self.config.kill_after_seconds:
            return False
        why = f"API server unreachable and {res} above high watermark for {now - since:.0f}s"
        for p in self.actuator.kill(victims, why):
            self._killed_during_outage.append(f"{p.meta.namespace}/{p.meta.name}")
            self._killed_uids.add(p.uid)
        return True

    # -- the evicting annotation, written by the node publisher ---------------------------------------
    def changes(self, node: dict[str, Any], now: float) -> Changes:
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        want = "true" if self.is_evicting() and not self._withdrawn else None
        current = annotations.get(EVICTING_ANNOTATION)
        if current == want or (want is None and current is None):
            return Changes()
        return Changes(annotations={EVICTING_ANNOTATION: want})

    def committed(self, changes: Changes, now: float) -> None:
        return None

    # -- reporting -----------------------------------------------------------------------------------
    def section(self) -> dict[str, Any]:
        return {
            "evicting": dict(self.evicting),
            "usage_percent": dict(self.usage),
            "watermarks": {"high": self.watermarks.high, "low": self.watermarks.low},
            "decision": self.last_decision,
            "evictions": dict(self.results),
            "api_reachable": self.api_healthy(),
        }

    def metrics(self) -> Iterable[Metric]:
        st = EVICTING.metric()
        usage = EVICTION_USAGE.metric()
        wm = EVICTION_WATERMARK.metric()
        for res in RESOURCES:
            st.add_metric([res], 1.0 if self.evicting[res] else 0.0)
            u = self.usage[res]
            if u is not None:
                usage.add_metric([res], u / 100.0)
            wm.add_metric([res, "high"], self.watermarks.high[res] / 100.0)
            wm.add_metric([res, "low"], self.watermarks.low[res] / 100.0)
        ev = EVICTIONS.metric()
        for result in RESULTS:
            ev.add_metric([result], float(self.results[result]))
        return [st, usage, wm, ev]
