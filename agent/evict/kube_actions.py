"""The acting side of eviction: one worker thread that carries out what the evictor decided (evictions through
the `policy/v1` Eviction subresource, so PodDisruptionBudgets hold; Events on pods and the node; the
optional evicting taint, removed when the worker stops), reporting each call's result to the shared
`ApiHealth`, and the kill fallback (through the pods' cgroups, at once, in the caller's thread: it is for
when the API server does not answer). Decisions are made in the sampling thread and only queued here, so an
API server that hangs never stalls a pass. A dry run swaps in `DryRunActuator`, which logs and counts what
it would do."""

from __future__ import annotations

import collections
import logging
import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.cluster.node_writer import ApiHealth
from agent.config_sections.enforcement import EvictionConfig
from agent.node_state import Resource
from agent.snapshot import PodSample
from cgroup import CgroupError, CgroupWriter
from common.logs import Repeats, repeated
from contract.annotations import OFFLINE_JOB_EVICTING
from kube import ApiError, FailureLog, Kube

log = logging.getLogger(__name__)

EVICTING_TAINT = OFFLINE_JOB_EVICTING
COMPONENT = "colo-agent"
RESULTS = ("evicted", "blocked", "gone", "error", "killed", "dry_run", "dry_run_kill")


@dataclass
class EvictionJob:
    resource: Resource
    candidates: list[PodSample]
    wanted: int
    usage_percent: float
    high: int
    allocatable: float
    events: list[tuple[str, str, str, str, str]] = field(default_factory=list)  # node events to send first


class KubeActuator:
    def __init__(
        self,
        kube: Kube,
        node_name: str,
        get_node: Callable[[], dict[str, Any] | None],
        writer: CgroupWriter,
        config: EvictionConfig,
        health: ApiHealth,
        is_evicting: Callable[[], bool],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube, self.node_name, self.get_node, self.writer = kube, node_name, get_node, writer
        self.config, self.health, self.is_evicting, self.clock = config, health, is_evicting, clock
        # every key present from the start: the HTTP thread copies it while the worker counts
        self.results: collections.Counter[str] = collections.Counter(dict.fromkeys(RESULTS, 0))
        # uid -> when its eviction was asked (self.clock); forgotten on failure and after a while, so a pod
        # whose eviction was lost or did not end it becomes a candidate again
        self._asked: dict[str, float] = {}
        self._asked_lock = threading.Lock()
        self._jobs: queue.Queue[EvictionJob | None] = queue.Queue()
        self._taint_state: bool | None = None
        self._event_failures = FailureLog(log, "recording an event")
        self._eviction_failures = FailureLog(log, "eviction")
        self._thread = threading.Thread(target=self._work, name="colo-evictor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._jobs.put(None)
        if self._thread.is_alive():
            self._thread.join(5.0)

    def submit(self, job: EvictionJob) -> None:
        self._jobs.put(job)

    def node_event(self, reason: str, message: str) -> None:
        """A Warning Event on this node (queued while the API server is away)."""
        self.submit(EvictionJob("cpu", [], 0, 0.0, 0, 0.0, [("Node", self.node_name, "", reason, message)]))

    def kill(self, pods: list[PodSample], why: str) -> list[PodSample]:
        """SIGKILL every process of each pod through its cgroup; the pods whose processes were killed."""
        killed = []
        for p in pods:
            name = f"{p.meta.namespace}/{p.meta.name}"
            try:
                n = self.writer.kill_all(p.cgroup, signal.SIGKILL)
            except CgroupError as exc:
                log.warning("cannot kill %s: %s", name, exc)
                continue
            log.warning("%s: killed %d processes of %s", why, n, name)
            self.results["killed"] += 1
            killed.append(p)
        return killed

    def asked(self) -> set[str]:
        with self._asked_lock:
            return set(self._asked)

    def prune_asked(self, live: set[str], ttl: float) -> None:
        """Forget asks for pods that are gone, and asks older than `ttl` (the pod stayed: ask again)."""
        now = self.clock()
        with self._asked_lock:
            self._asked = {u: t for u, t in self._asked.items() if u in live and now - t < ttl}

    def _event(self, kind: str, name: str, namespace: str, reason: str, message: str, uid: str | None = None) -> None:
        try:
            self.kube.create_event(
                kind=kind,
                name=name,
                namespace=namespace,
                uid=uid,
                reason=reason,
                message=message,
                event_type="Warning",
                component=COMPONENT,
            )
        except ApiError as exc:
            self.health.note(exc.status)
            self._event_failures.failed(exc.status, f"{reason} on {kind} {name}: {exc}")
            return
        self._event_failures.succeeded()
        self.health.note(None)

    def _run_job(self, job: EvictionJob) -> None:
        for kind, name, ns, reason, message in job.events:
            self._event(kind, name, ns, reason, message)
        evicted = 0
        for p in job.candidates:
            if evicted >= job.wanted:
                break
            why = (
                f"node {self.node_name} {job.resource} usage {job.usage_percent:.1f}% of allocatable is above the "
                f"high watermark {job.high}%"
            )
            outcome = self._evict(p, job.resource, why)
            if outcome == "stop":
                return  # the API server is away: the next round decides again
            evicted += outcome == "evicted"

    def _evict(self, p: PodSample, resource: Resource, why: str) -> str:
        """One eviction: "evicted", "next" (blocked, gone or refused: try the next victim) or "stop"."""
        ns, name = p.meta.namespace or "", p.meta.name or ""
        with self._asked_lock:
            self._asked[p.uid] = self.clock()
        try:
            result = self.kube.evict_pod(ns, name)
        except ApiError as exc:
            self.health.note(exc.status)
            self.results["error"] += 1
            with self._asked_lock:
                self._asked.pop(p.uid, None)  # not evicted: a later round may ask again
            self._eviction_failures.failed(exc.status, f"{ns}/{name}: {exc}")
            return "stop" if ApiHealth.unreachable(exc.status) else "next"
        self.health.note(None)
        self._eviction_failures.succeeded()
        self.results[result] += 1
        if result == "blocked":
            log.info("eviction of %s/%s blocked by a PodDisruptionBudget: next victim", ns, name)
            with self._asked_lock:
                self._asked.pop(p.uid, None)  # may be tried again in a later round
            return "next"
        if result != "evicted":
            return "next"
        used = f"{p.cpu_cores or 0.0:.3g} cores" if resource == "cpu" else f"{p.memory_working_set_bytes} bytes"
        self._event("Pod", name, ns, "EvictedByColo", f"{why}; this pod used {used}", uid=p.uid)
        self._event("Node", self.node_name, "", "OfflinePodEvicted", f"evicted {ns}/{name}: {why}")
        return "evicted"

    def _sync_taint(self) -> None:
        """The taint while evicting, if configured; with the taint or eviction switched off, one left by an
        earlier run is removed (the node object tells whether it is there)."""
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

    def _clear_taint(self) -> None:
        """At stop: the NoSchedule taint goes with the agent (no agent evicts, the node must take pods again).
        The write reads the node first and does nothing when the taint is not there."""
        if not (self.config.taint or self._taint_state):
            return  # never set by this agent; one left by an earlier run is removed by _sync_taint while running
        try:
            self.kube.set_node_taint(self.node_name, EVICTING_TAINT, "true", "NoSchedule", False)
            self._taint_state = False
        except ApiError as exc:
            self.health.note(exc.status)
            log.warning("cannot remove taint %s at shutdown: %s", EVICTING_TAINT, exc)

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
                    self._clear_taint()
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


class DryRunActuator(KubeActuator):
    """The same decisions, nothing done: evictions, kills and Events are logged (each intention at most every
    five minutes: a dry run repeats them every round) and counted; no taint."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._dry_run_logs = Repeats(period=300.0)

    def kill(self, pods: list[PodSample], why: str) -> list[PodSample]:
        for p in pods:
            if (held := self._dry_run_logs.occurred(("kill", p.uid))) is not None:
                log.warning("dry-run: would kill %s/%s (%s)%s", p.meta.namespace, p.meta.name, why, repeated(held))
            self.results["dry_run_kill"] += 1
        return []

    def _event(self, kind: str, name: str, namespace: str, reason: str, message: str, uid: str | None = None) -> None:
        if (held := self._dry_run_logs.occurred(("event", kind, name, reason))) is not None:
            log.info("dry-run: would record event %s on %s %s: %s%s", reason, kind, name, message, repeated(held))

    def _evict(self, p: PodSample, resource: Resource, why: str) -> str:
        if (held := self._dry_run_logs.occurred(("evict", p.uid))) is not None:
            ns, name = p.meta.namespace or "", p.meta.name or ""
            log.warning("dry-run: would evict %s/%s: %s%s", ns, name, why, repeated(held))
        self.results["dry_run"] += 1
        return "evicted"

    def _sync_taint(self) -> None:
        return None

    def _clear_taint(self) -> None:
        return None
