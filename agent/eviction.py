"""Eviction by watermarks, with Volcano's keys and defaults.

The node's real usage (all pods plus system) as a percentage of allocatable, averaged over a short window
so one spike does not evict, is compared with the watermarks from the node annotations
`volcano.sh/evicting-{cpu,memory}-{high,low}-watermark` (defaults CPU 80/30, memory 60/30):

- above a high watermark the node enters the evicting state: `volcano.sh/offline-job-evicting=true`,
  oversubscription published as 0, optionally a NoSchedule taint; offline pods are evicted (lowest priority,
  then highest usage of the resource under pressure, then youngest) until the projected usage falls below
  the high watermark, at most `max_per_round` per round and one round per cooldown;
- below the low watermark of that resource the state clears (hysteresis).

Decisions are made in the sampling thread; API calls happen in this module's worker thread, through the
`policy/v1` Eviction subresource so PodDisruptionBudgets hold (a 429 moves on to the next victim). If the
API server stays unreachable while memory is above its high watermark, offline pods' processes are killed
through their cgroups (memory only by default), and reported when the API returns.

Whether the API server is reachable is the shared `ApiHealth`: this module's own calls report to it too.
"""

from __future__ import annotations

import collections
import logging
import queue
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from agent.config import EvictionConfig
from agent.oversubscription import oversubscription_enabled
from agent.publisher import ApiHealth, Changes
from agent.resources import node_allocatable
from agent.snapshot import PodSample, Snapshot
from cgroup import CgroupError, CgroupWriter
from common.logs import Repeats, repeated
from contract.annotations import OFFLINE_JOB_EVICTING, evicting_watermark
from kube import ApiError, Kube

log = logging.getLogger(__name__)

Resource = Literal["cpu", "memory"]
RESOURCES: tuple[Resource, ...] = ("cpu", "memory")
EVICTING_ANNOTATION = OFFLINE_JOB_EVICTING
EVICTING_TAINT = OFFLINE_JOB_EVICTING
COMPONENT = "colo-agent"
RESULTS = ("evicted", "blocked", "gone", "error", "killed", "dry_run", "dry_run_kill")
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


class Smoother:
    """Mean of the samples of the last `seconds` (monotonic time)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._samples: collections.deque[tuple[float, float]] = collections.deque()

    def add(self, t: float, value: float) -> float:
        self._samples.append((t, value))
        while self._samples and self._samples[0][0] <= t - self.seconds:
            self._samples.popleft()
        return sum(v for _, v in self._samples) / len(self._samples)


def victim_order(pods: Iterable[PodSample], resource: Resource) -> list[PodSample]:
    """Lowest priority first, then highest usage of the resource under pressure, then youngest."""

    def usage(p: PodSample) -> float:
        return (p.cpu_cores or 0.0) if resource == "cpu" else float(p.memory_working_set_bytes)

    return sorted(pods, key=lambda p: (p.meta.priority or 0, -usage(p), -(p.meta.creation_timestamp or 0.0)))


@dataclass
class EvictionJob:
    resource: Resource
    candidates: list[PodSample]
    wanted: int
    usage_percent: float
    high: int
    allocatable: float
    events: list[tuple[str, str, str, str, str]] = field(default_factory=list)  # node events to send first


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
        self._dry_run_logs = Repeats(period=300.0)  # a dry run repeats its intentions every round
        self.api_healthy = api_healthy if api_healthy is not None else self.health.reachable
        # the overcommit rule applies where capacity is published: one definition, shared with the publisher
        self.oversubscribed = oversubscribed or partial(oversubscription_enabled, enabled_on_all_nodes=False)
        self.config, self.on_state_change = config, on_state_change
        self.dry_run, self.clock = dry_run, clock
        self.evicting: dict[str, bool] = {r: False for r in RESOURCES}
        self.usage: dict[str, float | None] = {r: None for r in RESOURCES}
        self.watermarks, _ = parse_watermarks({}, config)
        # every key present from the start: the HTTP thread copies it while the worker counts
        self.results: collections.Counter[str] = collections.Counter(dict.fromkeys(RESULTS, 0))
        self.last_round: float | None = None
        self.last_decision: str = "no snapshot yet"
        self._smoothers = {r: Smoother(config.smoothing_seconds) for r in RESOURCES}
        self._warned: set[str] = set()
        # uid -> when its eviction was asked (self.clock); forgotten on failure and after asked_ttl, so a pod
        # whose eviction was lost or did not end it becomes a candidate again
        self._asked: dict[str, float] = {}
        self._asked_lock = threading.Lock()
        self.asked_ttl = max(60.0, 3 * config.cooldown_seconds)
        self._api_down_since: float | None = None
        self._above_since: dict[str, float | None] = {r: None for r in RESOURCES}
        self._killed_during_outage: list[str] = []
        self._killed_uids: set[str] = set()
        self._jobs: queue.Queue[EvictionJob | None] = queue.Queue()
        self._taint_state: bool | None = None
        self._thread = threading.Thread(target=self._work, name="colo-evictor", daemon=True)

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._jobs.put(None)
        if self._thread.is_alive():
            self._thread.join(5.0)

    def is_evicting(self) -> bool:
        return any(self.evicting.values())

    # -- deciding (sampling thread) ------------------------------------------------------------------
    def on_snapshot(self, snap: Snapshot) -> None:
        if not self.config.enabled:
            return
        node = self.get_node() or {}
        meta = node.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        self.watermarks, problems = parse_watermarks(annotations, self.config)
        events: list[tuple[str, str, str, str, str]] = []
        for problem in problems:
            if problem not in self._warned:
                self._warned.add(problem)
                log.warning("node %s: %s; using the defaults", self.node_name, problem)
                events.append(("Node", self.node_name, "", "InvalidEvictionWatermark", problem + "; defaults apply"))
        alloc_cpu, alloc_mem = node_allocatable(node)
        alloc = {
            "cpu": alloc_cpu or snap.node.cpu_capacity_cores,
            "memory": float(alloc_mem or snap.node.memory_total_bytes),
        }
        now = snap.mono
        raw = {"cpu": 100.0 * (snap.node.cpu_cores or 0.0) / alloc["cpu"],
               "memory": 100.0 * snap.node.memory_used_bytes / alloc["memory"]}  # fmt: skip
        changed = False
        for res in RESOURCES:
            if res == "cpu" and snap.node.cpu_cores is None:
                continue
            usage = self.usage[res] = self._smoothers[res].add(now, raw[res])
            if usage <= self.watermarks.high[res]:
                self._above_since[res] = None
            elif self._above_since[res] is None:
                self._above_since[res] = now
            if usage > self.watermarks.high[res] and not self.evicting[res]:
                self.evicting[res], changed = True, True
                log.warning("node %s: %s usage %.1f%% above high watermark %d%%: evicting offline pods",
                            self.node_name, res, usage, self.watermarks.high[res])  # fmt: skip
            elif usage < self.watermarks.low[res] and self.evicting[res]:
                self.evicting[res], changed = False, True
                log.info("node %s: %s usage %.1f%% below low watermark %d%%: evicting state cleared",
                         self.node_name, res, usage, self.watermarks.low[res])  # fmt: skip
        if changed:
            self.on_state_change()
        live, asked_now = set(snap.pods), self.clock()
        with self._asked_lock:
            self._asked = {u: t for u, t in self._asked.items() if u in live and asked_now - t < self.asked_ttl}
        self._track_api(now)
        job = self._decide(snap, node, alloc, now)
        if job is not None:
            job.events[:0] = events
            self._jobs.put(job)
        elif events:
            self._jobs.put(EvictionJob("cpu", [], 0, 0.0, 0, 0.0, events))

    def _decide(self, snap: Snapshot, node: dict[str, Any], alloc: dict[str, float], now: float) -> EvictionJob | None:
        if self.last_round is not None and now - self.last_round < self.config.cooldown_seconds:
            return None
        for res in RESOURCES:
            usage = self.usage[res]
            if not self.evicting[res] or usage is None or usage <= self.watermarks.high[res]:
                continue
            if self.config.require_overcommit_when_oversubscribed and self.oversubscribed(node):
                requested = sum(
                    p.meta.cpu_request_cores if res == "cpu" else p.meta.memory_request_bytes
                    for p in snap.pods.values()
                )
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
            with self._asked_lock:
                asked = set(self._asked)
            offline = [p for p in alive if p.uid not in asked]
            if not offline:
                self.last_decision = f"{res} above high watermark but no offline pod left to evict"
                continue
            victims, order, projected = self._victims(offline, res, usage, alloc[res])
            self.last_decision = (f"{res} at {usage:.1f}% > {self.watermarks.high[res]}%: evicting {len(victims)} "
                                  f"offline pod(s), projected {projected:.1f}%")  # fmt: skip
            self.last_round = now
            # also while the API server seems away: the eviction is the way to find out that it is back
            return EvictionJob(res, order, len(victims), usage, self.watermarks.high[res], alloc[res])
        return None

    def _victims(
        self, pods: list[PodSample], res: Resource, usage: float, alloc: float
    ) -> tuple[list[PodSample], list[PodSample], float]:
        """The pods to evict this round (in order, until the projected usage is under the high watermark, at
        most max_per_round), all candidates in order, and the projected usage."""
        order = victim_order(pods, res)
        projected, wanted = usage, 0
        for p in order:
            if projected < self.watermarks.high[res] or wanted >= self.config.max_per_round:
                break
            use = (p.cpu_cores or 0.0) if res == "cpu" else float(p.memory_working_set_bytes)
            projected -= 100.0 * use / alloc
            wanted += 1
        return order[:wanted], order, projected

    def _track_api(self, now: float) -> None:
        if self.api_healthy():
            if self._api_down_since is not None and self._killed_during_outage:
                killed, self._killed_during_outage = self._killed_during_outage, []
                msg = f"killed offline pods' processes while the API server was unreachable: {', '.join(killed)}"
                self._jobs.put(
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
        for p in victims:
            name = f"{p.meta.namespace}/{p.meta.name}"
            if self.dry_run:
                if (held := self._dry_run_logs.occurred(("kill", p.uid))) is not None:
                    log.warning("dry-run: would kill %s (API server unreachable, %s above high watermark)%s",
                                name, res, repeated(held))  # fmt: skip
                self.results["dry_run_kill"] += 1
                continue
            try:
                n = self.writer.kill_all(p.cgroup, signal.SIGKILL)
            except CgroupError as exc:
                log.warning("cannot kill %s: %s", name, exc)
                continue
            log.warning("API server unreachable and %s above high watermark for %.0fs: killed %d processes of %s",
                        res, now - since, n, name)  # fmt: skip
            self.results["killed"] += 1
            self._killed_during_outage.append(name)
            self._killed_uids.add(p.uid)
        return True

    # -- acting (worker thread) ----------------------------------------------------------------------
    def _event(self, kind: str, name: str, namespace: str, reason: str, message: str, uid: str | None = None) -> None:
        if self.dry_run:
            if (held := self._dry_run_logs.occurred(("event", kind, name, reason))) is not None:
                log.info("dry-run: would record event %s on %s %s: %s%s", reason, kind, name, message, repeated(held))
            return
        try:
            self.kube.create_event(kind=kind, name=name, namespace=namespace, uid=uid, reason=reason, message=message,
                                   event_type="Warning", component=COMPONENT)  # fmt: skip
        except ApiError as exc:
            self.health.note(exc.status)
            log.warning("cannot record event %s on %s %s: %s", reason, kind, name, exc)
            return
        self.health.note(None)

    def _run_job(self, job: EvictionJob) -> None:
        for kind, name, ns, reason, message in job.events:
            self._event(kind, name, ns, reason, message)
        evicted = 0
        for p in job.candidates:
            if evicted >= job.wanted:
                break
            ns, name = p.meta.namespace or "", p.meta.name or ""
            why = (f"node {self.node_name} {job.resource} usage {job.usage_percent:.1f}% of allocatable is above the "
                   f"high watermark {job.high}%")  # fmt: skip
            if self.dry_run:
                if (held := self._dry_run_logs.occurred(("evict", p.uid))) is not None:
                    log.warning("dry-run: would evict %s/%s: %s%s", ns, name, why, repeated(held))
                self.results["dry_run"] += 1
                evicted += 1
                continue
            with self._asked_lock:
                self._asked[p.uid] = self.clock()
            try:
                result = self.kube.evict_pod(ns, name)
            except ApiError as exc:
                self.health.note(exc.status)
                self.results["error"] += 1
                with self._asked_lock:
                    self._asked.pop(p.uid, None)  # not evicted: a later round may ask again
                log.warning("eviction of %s/%s failed: %s", ns, name, exc)
                if ApiHealth.unreachable(exc.status):
                    return  # the API server is away: the next round decides again
                continue
            self.health.note(None)
            self.results[result] += 1
            if result == "blocked":
                log.info("eviction of %s/%s blocked by a PodDisruptionBudget: next victim", ns, name)
                with self._asked_lock:
                    self._asked.pop(p.uid, None)  # may be tried again in a later round
                continue
            if result == "evicted":
                evicted += 1
                if job.resource == "cpu":
                    used = f"{p.cpu_cores or 0.0:.3g} cores"
                else:
                    used = f"{p.memory_working_set_bytes} bytes"
                self._event("Pod", name, ns, "EvictedByColo", f"{why}; this pod used {used}", uid=p.uid)
                self._event("Node", self.node_name, "", "OfflinePodEvicted", f"evicted {ns}/{name}: {why}")

    def _sync_taint(self) -> None:
        """The taint while evicting, if configured; with the taint or eviction switched off, one left by an
        earlier run is removed (the node object tells whether it is there)."""
        if self.dry_run:
            return
        want = self.config.enabled and self.config.taint and self.is_evicting()
        if self._taint_state is None:
            node = self.get_node()
            if node is None:
                return
            taints = (node.get("spec") or {}).get("taints") or []
            self._taint_state = any(t.get("key") == EVICTING_TAINT for t in taints if isinstance(t, dict))
        if want == self._taint_state:
            return
        try:
            self.kube.set_node_taint(self.node_name, EVICTING_TAINT, "true", "NoSchedule", want)
            self._taint_state = want
        except ApiError as exc:
            self.health.note(exc.status)
            log.warning("cannot %s taint %s: %s", "set" if want else "remove", EVICTING_TAINT, exc)
            return
        self.health.note(None)

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=1.0)
            except queue.Empty:
                try:
                    self._sync_taint()
                except Exception:
                    log.exception("taint update failed")
                continue
            try:
                if job is None:
                    return
                self._run_job(job)
                self._sync_taint()
            except Exception:
                log.exception("eviction job failed")
            finally:
                self._jobs.task_done()

    def drain(self, timeout: float = 5.0) -> bool:
        """Wait until every queued job has finished (not merely left the queue); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._jobs.all_tasks_done:
            while self._jobs.unfinished_tasks:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._jobs.all_tasks_done.wait(remaining)
        return True

    # -- the evicting annotation, written by the node publisher ---------------------------------------
    def changes(self, node: dict[str, Any], now: float) -> Changes:
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        want = "true" if self.is_evicting() else None
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
        st = GaugeMetricFamily("colo_node_evicting", "1 while evicting for this resource", labels=["resource"])
        usage = GaugeMetricFamily(
            "colo_node_eviction_usage_ratio",
            "Smoothed usage of allocatable compared with the watermarks",
            labels=["resource"],
        )
        wm = GaugeMetricFamily(
            "colo_node_eviction_watermark_ratio", "Eviction watermarks in force", labels=["resource", "level"]
        )
        for res in RESOURCES:
            st.add_metric([res], 1.0 if self.evicting[res] else 0.0)
            u = self.usage[res]
            if u is not None:
                usage.add_metric([res], u / 100.0)
            wm.add_metric([res, "high"], self.watermarks.high[res] / 100.0)
            wm.add_metric([res, "low"], self.watermarks.low[res] / 100.0)
        ev = CounterMetricFamily("colo_evictions", "Offline pod evictions by result", labels=["result"])
        for result in RESULTS:
            ev.add_metric([result], float(self.results[result]))
        return [st, usage, wm, ev]
