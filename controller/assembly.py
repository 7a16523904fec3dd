"""Each part of the running controller built from its settings: one function per part, so the composition
root (controller/service.py) reads as who talks to whom, and the parts themselves take plain values, not
the whole config."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from controller import load_annotations as ann
from controller.annotator import Annotator
from controller.config import ControllerConfig
from controller.floor import Floorer
from controller.httpget import AgentClient
from controller.leadership import Leadership
from controller.metrics import ControllerMetrics
from controller.patch_writer import AnnotationWriter
from controller.poller import AgentPoller
from controller.rebalance.rebalancer import Rebalancer
from controller.scoring import Scorer
from kube import Kube

log = logging.getLogger("controller.service")  # the name these lines have always had (log filters rely on it)

#: Our own write landed: the node as the API server stored it.
Wrote = Callable[[dict[str, Any]], None]


def capacity_rejected(metrics: ControllerMetrics) -> Callable[[str, str], None]:
    """The ScoreBoard's `on_rejected`: count it and say so."""

    def rejected(node: str, reason: str) -> None:
        metrics.capacity_rejected.labels(reason).inc()
        log.warning("node %s: ignoring the agent's published capacity (%s)", node, reason)

    return rejected


def annotator(cfg: ControllerConfig, scorer: Scorer) -> Annotator:
    if cfg.legacy_oversubscription_annotation:
        log.warning(
            "legacy_oversubscription_annotation is deprecated: %s copies the agent's %s and %s, which the "
            "extender reads itself; the copy will be removed in a later release",
            ann.OVERSUBSCRIPTION,
            ann.PUBLISHED_CPU,
            ann.PUBLISHED_MEMORY,
        )
    return Annotator(
        scorer,
        interval=cfg.polling.interval,
        legacy_oversubscription=cfg.legacy_oversubscription_annotation,
        min_change=cfg.writer.min_change,
        min_interval=cfg.writer.min_interval,
    )


def rebalancer(
    kube: Kube,
    cfg: ControllerConfig,
    metrics: ControllerMetrics,
    leadership: Leadership,
    *,
    clock: Callable[[], float],
    fetch: AgentClient,
) -> Rebalancer | None:
    """None unless `rebalance.enabled`."""
    if not cfg.rebalance.enabled:
        return None
    return Rebalancer(
        kube,
        cfg.rebalance,
        cfg.classify,
        registry=metrics.registry,
        lease_time_left=leadership.lease_time_left,
        poll_timeout=cfg.polling.timeout,
        poll_concurrency=cfg.polling.concurrency,
        request_timeout=cfg.kube_request_timeout,
        clock=clock,
        fetch=fetch,
    )


def floorer(
    kube: Kube, cfg: ControllerConfig, metrics: ControllerMetrics, leadership: Leadership, *, wrote: Wrote
) -> Floorer | None:
    """None when `polling.floor_silent_after` is 0."""
    after = cfg.polling.floor_silent_after
    if after <= 0:
        return None
    return Floorer(
        kube,
        after,
        metrics,
        lease_time_left=leadership.lease_time_left,
        request_timeout=cfg.kube_request_timeout,
        on_written=wrote,
    )


def writer(
    kube: Kube, cfg: ControllerConfig, metrics: ControllerMetrics, leadership: Leadership, *, wrote: Wrote
) -> AnnotationWriter:
    return AnnotationWriter(
        kube.patch_node_annotations,
        qps=cfg.writer.qps,
        burst=cfg.writer.burst,
        workers=cfg.writer.workers,
        metrics=metrics,
        lease_time_left=leadership.lease_time_left,
        request_timeout=cfg.kube_request_timeout,
        on_written=lambda _node, _patch, updated: wrote(updated),  # the PATCH response: the node as stored
    )


def poller(
    cfg: ControllerConfig,
    scorer: Scorer,
    rebalancer: Rebalancer | None,
    *,
    clock: Callable[[], float],
    fetch: AgentClient,
) -> AgentPoller:
    """Asks each agent for the windows the policy scores and, with rebalancing, the ones it reads."""
    wanted = (*scorer.metric_names, *(rebalancer.windows if rebalancer is not None else ()))
    return AgentPoller(
        wanted=tuple(dict.fromkeys(wanted)),
        concurrency=cfg.polling.concurrency,
        timeout=cfg.polling.timeout,
        max_response_bytes=cfg.polling.max_response_bytes,
        clock=clock,
        fetch=fetch,
    )
