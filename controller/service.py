"""The running controller: the composition root that builds the parts and wires them together; each part
does one thing (see docs/controller-structure.md):

- `ClusterInformers` (controller/cluster_informers.py) keep slim Nodes, the agents' EndpointSlices and bound Pods,
  cut down by `CachedObjects` (controller/cached_objects.py);
- `LatestNodes` feeds the `ScoreBoard` the freshest version of each node (the informer's or our last
  patch's), which the `Extender` answers kube-scheduler from;
- `Leadership` (controller/leadership.py) runs the Lease campaign and tells the parts that react to a
  change of leader (writer, rebalancer, floorer, LatestNodes);
- `PollingLoop` (controller/loop.py) runs a `PollingCycle` (controller/cycle.py) back to back while we
  lead: poll the agents, plan patches for the `AnnotationWriter`, floor silent agents' nodes, rebalance;
- `ScoreGauges` publish every node's score; `Liveness` says what a restart would cure.

Threads: one per informer (kube/), the lease campaign, the writer workers, and the polling loop's. Only the
leader polls and writes; every replica keeps its ScoreBoard current from the node informer, so every
replica can answer the scheduler extender.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from controller import assembly as build
from controller.cached_objects import CachedObjects
from controller.cluster_informers import ClusterInformers
from controller.config import ControllerConfig
from controller.cycle import CycleReport, PollingCycle
from controller.extender import Extender
from controller.gauges import ScoreGauges
from controller.hotvalue import BindingRecords
from controller.httpget import agent_fetch
from controller.latest import LatestNodes
from controller.leadership import Leadership
from controller.liveness import Liveness
from controller.loop import PollingLoop
from controller.metrics import ControllerMetrics
from controller.policy import DynamicSchedulerPolicy
from controller.scoring import ScoreBoard, Scorer
from controller.threads import DaemonThreads
from kube import Informer, Kube


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
        self.kube, self.cfg, self.policy, self.clock = kube, cfg, policy, clock
        m = self.metrics = metrics or ControllerMetrics()
        self.scorer = Scorer(policy.spec)
        self.board = ScoreBoard(self.scorer, on_rejected=build.capacity_rejected(m))
        self.extender = Extender(self.board, cfg.classify, clock=clock, settings=cfg.extender, metrics=m)
        self.latest = LatestNodes(on_change=self.board.update_node, on_deleted=self.board.remove_node)
        self.bindings = BindingRecords(policy.spec.hot_value, clock=clock)
        self.annotator = build.annotator(cfg, self.scorer)
        self.leadership = lead = Leadership(kube, cfg.leader_election, m)
        # One client for every agent request (node documents and, for rebalancing, pod lists).
        self.agents = agent_fetch(cfg.agent, cfg.polling.max_idle_connections)
        self.rebalancer = build.rebalancer(kube, cfg, m, lead, clock=clock, fetch=self.agents)
        self.floorer = build.floorer(kube, cfg, m, lead, wrote=self._wrote)
        self.writer = build.writer(kube, cfg, m, lead, wrote=self._wrote)
        self.poller = build.poller(cfg, self.scorer, self.rebalancer, clock=clock, fetch=self.agents)
        self.cached = CachedObjects(
            self.scorer.annotation_keys, self.bindings, self.rebalancer, floor=self.floorer is not None
        )
        reads_pods = bool(policy.spec.hot_value) or self.rebalancer is not None or self.floorer is not None
        self.cluster = ClusterInformers(
            kube,
            cfg,
            on_node=self.latest.on_event,
            keep_node=self.cached.node,
            on_pod=self.bindings.on_event if reads_pods else None,
            keep_pod=self.cached.pod,
        )
        self.polling = PollingCycle(
            cfg,
            informers=self.cluster,
            poller=self.poller,
            annotator=self.annotator,
            writer=self.writer,
            bindings=self.bindings,
            latest=self.latest,
            metrics=m,
            rebalancer=self.rebalancer,
            clock=clock,
            floorer=self.floorer,
        )
        self._stop = threading.Event()
        self.threads = DaemonThreads()
        self.gauges = ScoreGauges(self.board, m, clock)
        self.loop = PollingLoop[CycleReport](
            self.polling.run,
            m,
            interval=cfg.polling.interval,
            ready=self.ready,
            leading=lambda: self.is_leader() and self.synced(),
            after_pass=self.gauges.refresh,
            close=self.agents.close,
            stop=self._stop,
            monotonic=monotonic,
        )
        self.liveness = Liveness(
            cfg.polling,
            watched=(self.threads, self.cluster, self.writer),
            last_pass=lambda: self.loop.progress,
            nodes_known=lambda: len(self.board),
            stopping=self._stop,
            monotonic=monotonic,
        )
        for part in (self.writer, self.rebalancer, self.floorer):  # in this order, then trust the informer again
            if part is not None:
                lead.on_change(part.leadership_changed)
        lead.on_change(lambda _leading: self.latest.reset(self.cluster.nodes.items))

    def _wrote(self, node: dict[str, Any]) -> None:
        """Our write landed (the API server's answer): plan from it until the informer catches up."""
        self.latest.wrote(self.cached.node(node))

    # ---- state -----------------------------------------------------------------------------------

    @property
    def nodes(self) -> Informer:
        return self.cluster.nodes

    @property
    def slices(self) -> Informer | None:
        return self.cluster.slices

    @property
    def pods(self) -> Informer | None:
        return self.cluster.pods

    @property
    def last_report(self) -> CycleReport | None:
        """What the polling loop's last cycle did."""
        return self.loop.last_report

    def is_leader(self) -> bool:
        return self.leadership.is_leader()

    def lease_time_left(self) -> float:
        return self.leadership.lease_time_left()

    def informers(self) -> list[Informer]:
        return self.cluster.all()

    def ready(self) -> bool:
        """Ready to score once the node cache is filled (to write once every informer is); not ready
        once shutting down, so the Service stops sending the scheduler here."""
        return self.cluster.nodes.synced.is_set() and not self._stop.is_set()

    def synced(self) -> bool:
        return self.cluster.synced()

    def stall_limit(self) -> float:
        return self.liveness.stall_limit()

    def unhealthy(self) -> str | None:
        """Why this replica needs a restart (liveness), or None."""
        return self.liveness.unhealthy()

    def rebalance_document(self) -> dict[str, Any]:
        """`GET /api/v1/rebalance`: the last cycle's plan (rebalancing switched off: just that)."""
        if self.rebalancer is None:
            return {"enabled": False}
        return self.rebalancer.document(self.is_leader())

    async def cycle(self) -> CycleReport:
        """One polling cycle now (tests and benchmarks; the loop runs them on its own)."""
        return await self.loop.cycle()

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self, *, run_loop: bool = True) -> None:
        """Start informers, writer and lease campaign; `run_loop=False` leaves cycles to the caller (tests)."""
        self.liveness.arm()
        self.cluster.start()
        self.writer.start()
        self.leadership.campaign(self.threads, self._stop)
        if run_loop:
            self.loop.start(self.threads)

    def begin_stop(self) -> None:
        """Stop polling and writing now; the lease thread wakes and releases the Lease (signal-safe)."""
        self._stop.set()
        self.writer.clear()  # nothing more goes out once we are shutting down

    def stop(self, timeout: float = 5.0) -> None:
        """Stop polling and writing, release the lease, stop informers."""
        self.begin_stop()
        self.threads.join(timeout)
        self.writer.stop(timeout)
        self.cluster.stop(timeout)
