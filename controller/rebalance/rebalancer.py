"""The rebalancer inside colo-controller's cycle: state across cycles, pod polls, Evictions and Events.

The leader runs `run()` after each node poll (followers never do). It assesses every node (steps 1-4),
polls the pods of confirmed sources only when something may move, plans (5-7) and, unless in a dry run,
evicts through `kube` (policy/v1 Eviction, so PodDisruptionBudgets hold). Each eviction first asks how
long the lease is still ours and is sent with a deadline inside that time, like the annotation writer:
it lands while we lead or not at all, and a lost lease stops the cycle's remaining evictions.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry

from common.logs import Repeats
from contract.classify import KOORD_QOS_LABEL, Classifier
from controller.config import ClassifySettings
from controller.httpget import http_get
from controller.poller import AgentSample
from controller.rebalance import anomaly
from controller.rebalance.agentpods import Fetch, fetch_pod_usages
from controller.rebalance.assess import assess
from controller.rebalance.candidates import Candidate
from controller.rebalance.fit import Destination
from controller.rebalance.metrics import RebalanceMetrics
from controller.rebalance.moves import CycleOutcome, Lookup, select_and_plan
from controller.rebalance.plan import NodeSkip, Source
from controller.rebalance.report import document, summary
from controller.rebalance.settings import RebalanceSettings
from controller.rebalance.traits import TRAITS, NodeTraits, PodTraits, node_traits, pod_traits
from controller.rebalance.usage import node_window_names, percent
from kube import ApiError, Kube

log = logging.getLogger(__name__)

COMPONENT = "colo-controller"
#: Below this much lease time an eviction is not attempted (it could not land while we lead).
MIN_EVICTION_SECONDS = 0.05
LEASE_SHARE = 0.8


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.2f} GiB"


class Rebalancer:
    """One per controller; `run` is called from the polling loop only, the rest from any thread."""

    def __init__(
        self,
        kube: Kube,
        cfg: RebalanceSettings,
        classify: ClassifySettings,
        *,
        registry: CollectorRegistry,
        lease_time_left: Callable[[], float] = lambda: math.inf,
        poll_timeout: float = 2.0,
        poll_concurrency: int = 128,
        request_timeout: float = 10.0,
        clock: Callable[[], float] = time.time,
        fetch: Fetch = http_get,
    ) -> None:
        self.kube = kube
        self.cfg = cfg
        self.metrics = RebalanceMetrics(registry)
        # an API server that is away fails every eviction and event of a cycle alike: one line per kind of
        # failure per minute, saying how many were held back
        self._failures = Repeats(60.0)
        self.lease_time_left = lease_time_left
        self.poll_timeout = poll_timeout
        self.poll_concurrency = poll_concurrency
        self.request_timeout = request_timeout
        self.clock = clock
        self.fetch = fetch
        self.windows = node_window_names(cfg.window)
        self._classifier = Classifier(classify.offline_priority_classes, classify.offline_priority_below)
        self._label_keys = cfg.selector_label_keys() | {KOORD_QOS_LABEL}
        self._counts: dict[str, int] = {}
        self._acted_at: dict[str, float] = {}  # node -> when it last lost pods (clock)
        self._settle = anomaly.settle_seconds(cfg.window)
        self._events: dict[str, str] = {}  # node -> last skip reason announced by an Event
        self._last_summary = ""
        self._last: CycleOutcome | None = None
        self._last_at: float | None = None
        self._lock = threading.Lock()

    # ---- informer transforms -------------------------------------------------------------------

    @staticmethod
    def node_traits(node: Mapping[str, Any]) -> NodeTraits:
        return node_traits(node)

    def pod_traits(self, pod: Mapping[str, Any]) -> PodTraits | None:
        return pod_traits(pod, self._classifier, self._label_keys)

    # ---- the cycle -----------------------------------------------------------------------------

    async def run(
        self,
        samples: Mapping[str, AgentSample],
        targets: Mapping[str, str],
        nodes: Iterable[Mapping[str, Any]],
        lookup: Lookup,
        all_pods: Callable[[], list[dict[str, Any]]],
    ) -> CycleOutcome:
        """One rebalancing cycle over the node objects (slim, with traits) and this cycle's samples."""
        started = time.perf_counter()
        traits: dict[str, NodeTraits | None] = {}
        for node in nodes:
            meta = node.get("metadata")
            name = meta.get("name") if isinstance(meta, Mapping) else None
            if isinstance(name, str):
                f = node.get(TRAITS)
                traits[name] = f if isinstance(f, NodeTraits) else None
        cpu_w, mem_w = self.windows
        ratios = {n: (s.windows.get(cpu_w), s.windows.get(mem_w)) for n, s in samples.items()}
        now = self.clock()
        settling = anomaly.settling(self._acted_at, now, self._settle)
        self._acted_at = {n: t for n, t in self._acted_at.items() if n in settling}
        a = assess(traits, ratios, self._counts, self.cfg, settling)
        assess_seconds = time.perf_counter() - started
        usages: dict[str, Any] = {}
        failed: dict[str, str] = {}
        if a.gate is None:
            usages, failed, rejected = await fetch_pod_usages(
                targets,
                [s.name for s in a.sources],
                path=self.cfg.pods_path,
                window=self.cfg.window,
                timeout=self.poll_timeout,
                limit=self.cfg.max_pods_response_bytes,
                concurrency=self.poll_concurrency,
                fetch=self.fetch,
            )
            self.metrics.pod_polls.labels("ok").inc(len(usages))
            for reason in failed.values():
                self.metrics.pod_polls.labels(reason).inc()
            for reason in rejected.values():
                self.metrics.pod_lists_rejected.labels(reason).inc()
        attempt = self._dry_run if self.cfg.dry_run else self._evict
        started = time.perf_counter()
        if self.cfg.dry_run:
            out = select_and_plan(a, usages, failed, lookup, all_pods, self.cfg, attempt)
        else:  # evictions block on the API server: off the event loop
            out = await asyncio.to_thread(select_and_plan, a, usages, failed, lookup, all_pods, self.cfg, attempt)
        self.metrics.plan_duration.observe(assess_seconds + time.perf_counter() - started)
        self._counts = anomaly.after_evictions(a.counts, out.plan.acted_on)
        self._acted_at.update(dict.fromkeys(out.plan.acted_on, now))
        self._record(out)
        return out

    def _dry_run(self, c: Candidate, src: Source, dest: Destination, reason: str) -> str:
        self.metrics.evictions.labels(reason, "dry_run").inc()
        return "dry_run"

    def _evict(self, c: Candidate, src: Source, dest: Destination, reason: str) -> str:
        left = self.lease_time_left()
        timeout: float | None = None
        if math.isfinite(left):
            timeout = min(self.request_timeout, LEASE_SHARE * left)
            if timeout < MIN_EVICTION_SECONDS:
                self.metrics.evictions.labels(reason, "not_leader").inc()
                return "not_leader"
        try:
            result: str = self.kube.evict_pod(c.traits.namespace, c.traits.name, timeout=timeout)
        except ApiError as err:
            result = "unavailable" if err.status == 0 or err.status >= 500 else "error"
            self._warn(("evict", err.status), f"evicting {c.key} from {src.name} failed: {err}")
        self.metrics.evictions.labels(reason, result).inc()
        if result == "evicted":
            pct = percent(src.usage, src.allocatable)
            high = percent(src.high, src.allocatable)
            over = ", ".join(f"{r} {pct.get(r):.1f}% > {high.get(r):.0f}%" for r in src.over)
            self._event(
                "Pod",
                c.traits.name,
                c.traits.namespace,
                c.traits.uid,
                "ColoRebalanced",
                f"Evicted from node {src.name} to rebalance load ({over} of allocatable, {self.cfg.window}, "
                f"less this cycle's earlier evictions); "
                f"the pod uses {c.usage.cpu:.2f} cores and {_gib(c.usage.memory)}; low node {dest.name} has room",
            )
        elif result == "blocked":
            log.info("rebalance: eviction of %s refused by a PodDisruptionBudget; next candidate", c.key)
        return result

    def _event(self, kind: str, name: str, namespace: str, uid: str | None, reason: str, message: str) -> None:
        try:
            self.kube.create_event(
                kind=kind,
                name=name,
                namespace=namespace,
                uid=uid,
                reason=reason,
                message=message,
                event_type="Normal",
                component=COMPONENT,
            )
        except (ApiError, ValueError) as err:
            status = err.status if isinstance(err, ApiError) else -1
            self._warn(("event", status), f"event {reason} on {kind} {name} failed: {err}")

    def _warn(self, subject: tuple[str, int], message: str) -> None:
        held = self._failures.occurred(subject)
        if held is not None:
            log.warning("rebalance: %s%s", message, f" ({held} more like it held back)" if held else "")

    def _record(self, out: CycleOutcome) -> None:
        a = out.assessment
        views = a.views.values()
        for cls in ("low", "normal", "high"):
            self.metrics.nodes.labels(cls).set(sum(1 for v in views if v.cls == cls))
        self.metrics.nodes.labels("source").set(len(a.sources))
        self.metrics.nodes.labels("unknown").set(len(a.unknown))
        self.metrics.budget.labels("cpu").set(a.budget.cpu)
        self.metrics.budget.labels("memory").set(a.budget.memory)
        skips = {s.node: s for s in out.plan.skips}
        if a.gate is not None:
            skips = {}
            for s in a.sources:
                skips[s.name] = NodeSkip(s.name, a.gate)
        for skip in skips.values():
            self.metrics.skipped.labels(skip.reason).inc()
        if not self.cfg.dry_run:
            self._announce_skips(skips, out)
        line = summary(out)
        if line != self._last_summary:
            log.info("rebalance%s: %s", " (dry run)" if self.cfg.dry_run else "", line)
            self._last_summary = line
        with self._lock:
            self._last = out
            self._last_at = self.clock()

    def _announce_skips(self, skips: Mapping[str, Any], out: CycleOutcome) -> None:
        """An Event on each skipped high node, once per reason (not again every cycle)."""
        views = out.assessment.views
        limits = out.assessment.limits
        for name in list(self._events):
            if name not in skips:
                del self._events[name]
        for name, skip in skips.items():
            if self._events.get(name) == skip.reason or name not in views:
                continue
            self._events[name] = skip.reason
            v = views[name]
            details = ", ".join(f"{k}: {n}" for k, n in sorted(skip.details.items()))
            self._event(
                "Node",
                name,
                "",
                None,
                "ColoRebalanceSkipped",
                f"Node is over its high threshold (cpu {v.pct.cpu:.1f}% / {limits.high.cpu:.0f}%, memory "
                f"{v.pct.memory:.1f}% / {limits.high.memory:.0f}% of allocatable, {self.cfg.window}) but "
                f"nothing was evicted: {skip.reason}" + (f" ({details})" if details else ""),
            )

    def reset(self) -> None:
        """Forget the counts and settling nodes (on gaining the lease: what we saw when we last led is stale)."""
        self._counts = {}
        self._acted_at = {}

    def leadership_changed(self, leading: bool) -> None:
        if leading:
            self.reset()  # what it counted when it last led is stale

    # ---- serving -------------------------------------------------------------------------------

    def document(self, leader: bool) -> dict[str, Any]:
        with self._lock:
            out, at = self._last, self._last_at
        return document(out, self.cfg, at=at, leader=leader)
