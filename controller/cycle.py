"""One polling cycle of the leader: poll every agent in scope once, plan and queue each node's annotation
patch from the samples, then let rebalancing act on the same samples. The running controller
(controller/service.py) builds one `PollingCycle`; the polling loop (controller/loop.py) runs it back to back."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from common.logs import OnChange
from controller.agent_endpoints import discover
from controller.annotator import Annotator, write_margin
from controller.cluster_informers import ClusterInformers
from controller.config import ControllerConfig
from controller.floor import Floorer
from controller.hotvalue import BindingRecords
from controller.latest import LatestNodes
from controller.metrics import ControllerMetrics
from controller.nodes import node_annotations, node_name
from controller.patch_writer import AnnotationWriter
from controller.poller import AgentPoller
from controller.rebalance.rebalancer import Rebalancer

log = logging.getLogger("controller.service")  # the name these lines have always had (log filters rely on it)


@dataclass(frozen=True, slots=True)
class CycleReport:
    """What one cycle did (for logs, tests and the benchmark)."""

    targets: int
    polled: int
    failed: dict[str, str]
    patches: int
    poll_seconds: float
    seconds: float


class PollingCycle:
    """The parts one cycle uses, given by the controller that owns them; `run` is called by one loop only."""

    def __init__(
        self,
        cfg: ControllerConfig,
        *,
        informers: ClusterInformers,
        poller: AgentPoller,
        annotator: Annotator,
        writer: AnnotationWriter,
        bindings: BindingRecords,
        latest: LatestNodes,
        metrics: ControllerMetrics,
        rebalancer: Rebalancer | None,
        clock: Callable[[], float],
        floorer: Floorer | None = None,
    ) -> None:
        self.cfg = cfg
        self.informers = informers
        self.poller, self.annotator, self.writer = poller, annotator, writer
        self.bindings, self.latest, self.metrics, self.rebalancer = bindings, latest, metrics, rebalancer
        self.clock = clock
        self.floorer = floorer
        self._failed_logs = OnChange()

    async def run(self, previous: CycleReport | None) -> CycleReport:
        """Poll every agent once, then plan and queue each node's annotation patch (`previous`: the cycle
        before, whose length tells how long until each node is planned again)."""
        started = time.monotonic()
        slices, pods = self.informers.slices, self.informers.pods
        nodes = self.informers.nodes.items()
        endpoint_slices = slices.items() if slices is not None else []
        # Scope: the selected nodes; without a selector, those where an agent endpoint says one runs.
        targets = discover(nodes, endpoint_slices, self.cfg.agent, internal_ip_fallback=bool(self.cfg.node_selector))
        result = await self.poller.poll_all(targets)
        poll_seconds = time.monotonic() - started
        now = self.clock()
        self.bindings.gc()
        hot = self.bindings.hot_values(now)
        # Until each node is planned again: at least an interval, longer while cycles overrun.
        gap = max(poll_seconds, previous.seconds if previous is not None else 0.0)
        margin = write_margin(self.cfg.polling.timeout, len(targets), self.cfg.writer.qps)
        patches = 0
        for node in nodes:
            name = node_name(node)
            if name is None or name not in targets:
                continue  # out of scope: neither polled nor annotated
            anns = node_annotations(self.latest.get(node))
            patch = self.annotator.plan(
                name, anns, result.samples.get(name), hot.get(name, 0), now, gap=gap, margin=margin
            )
            if patch:
                self.writer.submit(name, patch)
                patches += 1
        self.metrics.count_polls(result.failed, result.rejected, len(result.samples))
        for name, reason in result.failed.items():
            log.debug("polling agent of node %s failed: %s", name, result.errors.get(name, reason))
        if self._failed_logs.changed("failed", frozenset(result.failed)):  # the same outage every cycle is no news
            if result.failed:
                sample = sorted(result.failed)[:5]
                log.info("%d of %d agents failing since this cycle (e.g. %s)", len(result.failed), len(targets), sample)
            else:
                log.info("every agent answered (%d)", len(targets))
        if self.floorer is not None:
            try:  # the nodes as we last wrote them: a floor already written is not written again
                current = [self.latest.get(node) for node in nodes]
                bound = pods.items() if pods is not None else []
                await asyncio.to_thread(self.floorer.run, current, result.samples.keys(), bound, targets.keys())
            except Exception:
                log.exception("flooring the batch capacity of silent agents' nodes failed")
        if self.rebalancer is not None and pods is not None:
            try:
                await self.rebalancer.run(result.samples, targets, nodes, pods.get, pods.items)
            except Exception:
                log.exception("rebalancing cycle failed")
        seconds = time.monotonic() - started
        return CycleReport(len(targets), len(result.samples), dict(result.failed), patches, poll_seconds, seconds)
