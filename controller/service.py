"""The running controller: informers, lease, polling loop, annotation writer and extender, wired together
(what one polling cycle does is controller/cycle.py).

Threads: one per informer (kube/), the lease campaign, the writer workers, and one asyncio loop that runs
polling cycles back to back (a cycle that overruns its interval is followed at once by the next, never
overlapped). Only the leader polls and writes; every replica keeps its ScoreBoard current from the node
informer, so every replica can answer the scheduler extender.

Memory: the informers keep slim objects only (controller.nodes.slim_node, BindingRecords.keep), so what a
replica holds grows with the number of nodes and of recent bindings, not with whole Node and Pod objects.
Liveness (`unhealthy`) covers what a restart can cure: a dead thread or a polling loop that stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from common.logs import Repeats, repeated
from controller import annotations as ann
from controller.annotator import Annotator
from controller.config import ControllerConfig
from controller.cycle import CycleReport, PollingCycle
from controller.extender import Extender
from controller.floor import BATCH_KEY, Floorer, batch_facts
from controller.hotvalue import BindingRecords
from controller.httpget import agent_fetch
from controller.latest import LatestNodes
from controller.metrics import ControllerMetrics
from controller.nodes import node_name, slim_node
from controller.policy import DynamicSchedulerPolicy
from controller.poller import AgentPoller
from controller.rebalance.actuator import Rebalancer
from controller.rebalance.traits import TRAITS
from controller.scoring import ScoreBoard, Scorer
from controller.writer import AnnotationWriter
from kube import Informer, Kube, LeaderElector

log = logging.getLogger(__name__)


def default_identity() -> str:
    """hostname (the pod name in a cluster) plus a random suffix, so two replicas never collide."""
    return f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"


class Controller:
    """Everything but the HTTP server; start() and stop() from any thread."""

    def __init__(
        self,
        kube: Kube,
        cfg: ControllerConfig,
        policy: DynamicSchedulerPolicy,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        """`clock`: wall time (annotation stamps, freshness); `monotonic`: the liveness bookkeeping."""
        self.kube = kube
        self.cfg = cfg
        self.policy = policy
        self.clock = clock
        self._monotonic = monotonic
        self.metrics = metrics or ControllerMetrics()
        self.scorer = Scorer(policy.spec)
        self.board = ScoreBoard(self.scorer, on_rejected=self._on_capacity_rejected)
        self.bindings = BindingRecords(policy.spec.hot_value, clock=clock)
        self.annotator = Annotator(
            self.scorer,
            interval=cfg.polling.interval,
            legacy_oversubscription=cfg.legacy_oversubscription_annotation,
            min_change=cfg.writer.min_change,
            min_interval=cfg.writer.min_interval,
        )
        if cfg.legacy_oversubscription_annotation:
            log.warning(
                "legacy_oversubscription_annotation is deprecated: %s copies the agent's %s and %s, which the "
                "extender reads itself; the copy will be removed in a later release",
                ann.OVERSUBSCRIPTION, ann.PUBLISHED_CPU, ann.PUBLISHED_MEMORY,
            )  # fmt: skip
        # Nodes as the informer shows them, or as our own last patch left them when the watch lags behind
        # it: planning from the informer alone would rewrite what we wrote a cycle ago.
        self.latest = LatestNodes(on_change=self.board.update_node)
        self.extender = Extender(self.board, cfg.classify, clock=clock, settings=cfg.extender, metrics=self.metrics)
        self._stop = threading.Event()
        self._started = False
        self._threads: list[threading.Thread] = []
        self._gauge_nodes: set[str] = set()
        self._loop_progress: float | None = None  # monotonic end of the polling loop's last complete pass
        self.last_report: CycleReport | None = None
        self._overrun_logs = Repeats(period=600.0)

        # One client for every agent request (node documents and, for rebalancing, pod lists): its kept-alive
        # connections serve both.
        self.agents = agent_fetch(cfg.agent, cfg.polling.max_idle_connections)
        self.rebalancer: Rebalancer | None = None
        if cfg.rebalance.enabled:
            self.rebalancer = Rebalancer(
                kube,
                cfg.rebalance,
                cfg.classify,
                registry=self.metrics.registry,
                lease_time_left=self.lease_time_left,
                poll_timeout=cfg.polling.timeout,
                poll_concurrency=cfg.polling.concurrency,
                request_timeout=cfg.kube_request_timeout,
                clock=clock,
                fetch=self.agents,
            )

        self.nodes = Informer(
            kube, "nodes", label_selector=cfg.node_selector or None, on_event=self._on_node, transform=self._slim
        )
        self.slices: Informer | None = None
        if cfg.agent.use_endpointslices:
            self.slices = Informer(
                kube,
                "endpointslices",
                namespace=cfg.agent.namespace,
                label_selector=cfg.agent.endpointslice_selector or None,
            )
        self.pods: Informer | None = None
        floor_after = cfg.polling.floor_silent_after
        if policy.spec.hot_value or self.rebalancer is not None or floor_after > 0:
            self.pods = Informer(
                kube, "pods", field_selector="spec.nodeName!=", on_event=self._on_pod, transform=self._keep_pod
            )

        le = cfg.leader_election
        self.elector: LeaderElector | None = None
        if le.enabled:
            self.elector = LeaderElector(
                kube,
                le.namespace,
                le.name,
                le.identity or default_identity(),
                lease_duration=le.lease_duration,
                renew_deadline=le.renew_deadline,
                retry_period=le.retry_period,
                on_change=self._on_leader_change,
            )
        self.writer = AnnotationWriter(
            kube.patch_node_annotations,
            qps=cfg.writer.qps,
            burst=cfg.writer.burst,
            workers=cfg.writer.workers,
            metrics=self.metrics,
            lease_time_left=self.lease_time_left,
            request_timeout=cfg.kube_request_timeout,
            on_written=self._on_written,
        )
        self.poller = AgentPoller(
            wanted=tuple(
                dict.fromkeys((*self.scorer.metric_names, *(self.rebalancer.windows if self.rebalancer else ())))
            ),
            concurrency=cfg.polling.concurrency,
            timeout=cfg.polling.timeout,
            max_response_bytes=cfg.polling.max_response_bytes,
            clock=clock,
            fetch=self.agents,
        )
        self.floorer: Floorer | None = None
        if floor_after > 0:
            self.floorer = Floorer(
                kube, floor_after, self.metrics, lease_time_left=self.lease_time_left,
                request_timeout=cfg.kube_request_timeout, on_written=lambda node: self.latest.wrote(self._slim(node)),
            )  # fmt: skip
        self.polling = PollingCycle(
            cfg, poller=self.poller, annotator=self.annotator, writer=self.writer, bindings=self.bindings,
            latest=self.latest, metrics=self.metrics, rebalancer=self.rebalancer, clock=clock, floorer=self.floorer,
        )  # fmt: skip

    # ---- state -----------------------------------------------------------------------------------

    def is_leader(self) -> bool:
        return self.elector.is_leader if self.elector is not None else True

    def lease_time_left(self) -> float:
        """How long a write started now may take and still land while we lead (inf without election)."""
        return self.elector.lease_time_left() if self.elector is not None else math.inf

    def informers(self) -> list[Informer]:
        return [i for i in (self.nodes, self.slices, self.pods) if i is not None]

    def ready(self) -> bool:
        """Ready to score once the node cache is filled (to write once every informer is); not ready
        once shutting down, so the Service stops sending the scheduler here."""
        return self.nodes.synced.is_set() and not self._stop.is_set()

    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers())

    def stall_limit(self) -> float:
        """The longest one pass of the polling loop may take: three intervals plus the slowest possible poll
        (every agent running into the timeout, `concurrency` at a time)."""
        polling = self.cfg.polling
        rounds = max(1, math.ceil(len(self.board) / polling.concurrency))
        return 3 * polling.interval + rounds * polling.timeout

    def unhealthy(self) -> str | None:
        """Why this replica needs a restart (liveness), or None: a thread that must run died, or the
        polling loop completed no pass (a cycle, or a follower's check) within `stall_limit()`."""
        if not self._started or self._stop.is_set():
            return None
        dead = [t.name for t in self._threads if not t.is_alive()]
        dead += [f"informer-{i.kind}" for i in self.informers() if not i.is_alive()]
        if not self.writer.alive():
            dead.append("colo-writer")
        if dead:
            return f"thread(s) died: {', '.join(dead)}"
        progress = self._loop_progress
        if progress is not None:
            idle = self._monotonic() - progress
            limit = self.stall_limit()
            if idle > limit:
                return f"polling loop completed no pass for {idle:.0f}s (limit {limit:.0f}s)"
        return None

    # ---- event handlers (informer / lease / writer threads) --------------------------------------

    def _slim(self, node: dict[str, Any]) -> dict[str, Any]:
        """The node informer's transform (and our PATCH responses'): only what the controller reads."""
        slim = slim_node(node, self.scorer.annotation_keys)
        if self.rebalancer is not None:
            slim[TRAITS] = self.rebalancer.node_traits(node)
        return slim

    def _keep_pod(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        """The pod informer's transform: the binding stub, plus what rebalancing reads when it is on and the
        batch requests a pod holds (the floor of silent agents' nodes) when that is on."""
        kept = self.bindings.keep(pod)
        traits = self.rebalancer.pod_traits(pod) if self.rebalancer is not None else None
        held = batch_facts(pod) if self.floorer is not None else None
        if traits is None and held is None:
            return kept
        if kept is None:  # bound too long ago to count for the hot value: the informer's keys and the traits
            meta = pod.get("metadata") or {}
            kept = {"metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion") if k in meta}}
        if traits is not None:
            kept[TRAITS] = traits
        if held is not None:
            kept[BATCH_KEY] = held
            kept.setdefault("spec", {"nodeName": (pod.get("spec") or {}).get("nodeName")})
        return kept

    def rebalance_document(self) -> dict[str, Any]:
        """`GET /api/v1/rebalance`: the last cycle's plan (rebalancing switched off: just that)."""
        if self.rebalancer is None:
            return {"enabled": False}
        return self.rebalancer.document(self.is_leader())

    def _on_node(self, etype: str, node: dict[str, Any]) -> None:
        if etype == "DELETED":
            name = node_name(node)
            if name is not None:
                self.latest.deleted(name)
                self.board.remove_node(name)
        else:
            self.latest.observed(node)  # updates the board unless our own patch is newer

    def _on_capacity_rejected(self, node: str, reason: str) -> None:
        self.metrics.capacity_rejected.labels(reason).inc()
        log.warning("node %s: ignoring the agent's published capacity (%s)", node, reason)

    def _on_pod(self, etype: str, pod: dict[str, Any]) -> None:
        if etype in ("ADDED", "MODIFIED"):
            self.bindings.observe(pod)

    def _on_leader_change(self, leading: bool) -> None:
        self.metrics.is_leader.set(1 if leading else 0)
        if not leading:
            self.writer.clear()
        if leading and self.rebalancer is not None:
            self.rebalancer.reset()  # what it counted when it last led is stale
        if self.floorer is not None:
            self.floorer.silent.reset()  # count silences afresh: another replica may have seen agents answer
        # Either way, trust the informer's objects again rather than our memory of past writes.
        self.latest.reset(self.nodes.items)

    def _on_written(self, node: str, patch: Mapping[str, str | None], updated: dict[str, Any]) -> None:
        self.latest.wrote(self._slim(updated))  # the PATCH response: the node as stored, with our annotations

    # ---- the cycle -------------------------------------------------------------------------------

    async def cycle(self) -> CycleReport:
        """Poll every agent once, then plan and queue each node's annotation patch (controller/cycle.py)."""
        return await self.polling.run(self.nodes, self.slices, self.pods, self.last_report)

    def refresh_gauges(self) -> None:
        """Publish every node's current score as gauges (both replicas)."""
        now = self.clock()
        names = set(self.board.names())
        for gone in self._gauge_nodes - names:
            for gauge in (self.metrics.node_score, self.metrics.node_overloaded):
                with contextlib.suppress(KeyError):
                    gauge.remove(gone)
        for name in names:
            v = self.board.verdict(name, now)
            if v is not None:
                self.metrics.node_score.labels(name).set(v.score)
                self.metrics.node_overloaded.labels(name).set(1 if v.overloaded else 0)
        self._gauge_nodes = names

    async def _loop(self) -> None:
        try:
            await self._cycles()
        finally:
            self.agents.close()  # the kept agent connections belong to this loop

    async def _cycles(self) -> None:
        interval = self.cfg.polling.interval
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                if self.is_leader() and self.synced():
                    report = await self.cycle()
                    self.last_report = report
                    self.metrics.cycles.inc()
                    self.metrics.cycle_duration.observe(report.seconds)
                    if report.seconds > interval:
                        self.metrics.cycle_overruns.inc()
                        if (held := self._overrun_logs.occurred("overrun")) is not None:
                            log.warning("cycle took %.1fs, longer than the %.1fs interval%s",
                                        report.seconds, interval, repeated(held))  # fmt: skip
                if self.ready():
                    self.refresh_gauges()
                self._loop_progress = self._monotonic()
            except Exception:
                log.exception("polling cycle failed")
            remaining = interval - (time.monotonic() - started)
            while remaining > 0 and not self._stop.is_set():
                await asyncio.sleep(min(remaining, 0.05))
                remaining = interval - (time.monotonic() - started)

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self, *, run_loop: bool = True) -> None:
        """Start informers, writer and lease campaign; `run_loop=False` leaves cycles to the caller (tests)."""
        self._started = True
        for informer in self.informers():
            informer.start()
        self.writer.start()
        if self.elector is not None:
            self._spawn("colo-lease", self.elector.run, self._stop)
        else:
            self.metrics.is_leader.set(1)
        if run_loop:
            self._loop_progress = self._monotonic()
            self._spawn("colo-poller", lambda: asyncio.run(self._loop()))

    def _spawn(self, name: str, target: Callable[..., object], *args: object) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def begin_stop(self) -> None:
        """Stop polling and writing now; the lease thread wakes and releases the Lease (signal-safe)."""
        self._stop.set()
        self.writer.clear()  # nothing more goes out once we are shutting down

    def stop(self, timeout: float = 5.0) -> None:
        """Stop polling and writing, release the lease, stop informers."""
        self.begin_stop()
        for t in self._threads:
            t.join(timeout)
        self.writer.stop(timeout)
        for informer in self.informers():
            informer.stop(timeout)
