"""The controller's own Prometheus metrics, on a private registry (several controllers per test process)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric

from common.buildinfo import build_info

_CYCLE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300)
_EXTENDER_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)


class ControllerMetrics:
    """Cycle duration, nodes polled/failed, annotations written, extender latency, scores."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.cycle_duration = Histogram(
            "colo_controller_cycle_duration_seconds",
            "Wall time of one polling cycle (poll all agents and plan annotation writes).",
            registry=r,
            buckets=_CYCLE_BUCKETS,
        )
        self.cycle_overruns = Counter(
            "colo_controller_cycle_overruns_total",
            "Cycles that took longer than the polling interval (the next one started at once).",
            registry=r,
        )
        self.cycles = Counter("colo_controller_cycles_total", "Polling cycles completed.", registry=r)
        self.nodes_polled = Counter(
            "colo_controller_nodes_polled_total", "Agent polls that returned a usable sample.", registry=r
        )
        self.nodes_failed = Counter(
            "colo_controller_nodes_poll_failed_total",
            "Agent polls that failed, by reason.",
            ["reason"],
            registry=r,
        )
        self.samples_rejected = Counter(
            "colo_controller_agent_samples_rejected_total",
            "Agent documents rejected and not written (a missing field, a wrong type, NaN, a value out of range, "
            "another node's name), by reason; each is also a failed poll with reason bad_payload.",
            ["reason"],
            registry=r,
        )
        self.capacity_rejected = Counter(
            "colo_controller_node_capacity_rejected_total",
            "Changes of a node's volcano.sh/oversubscription-{cpu,memory} the extender ignores (malformed, or "
            "above the node's allocatable), by reason.",
            ["reason"],
            registry=r,
        )
        self.last_cycle_nodes = Gauge(
            "colo_controller_last_cycle_nodes", "Nodes in the last cycle by result.", ["result"], registry=r
        )
        self.annotations_written = Counter(
            "colo_controller_annotations_written_total",
            "Node annotations written, by annotation key.",
            ["annotation"],
            registry=r,
        )
        self.patches = Counter(
            "colo_controller_node_patches_total", "Node annotation patches sent, by result.", ["result"], registry=r
        )
        self.write_queue = Gauge(
            "colo_controller_write_queue_nodes", "Nodes with an annotation patch waiting to be sent.", registry=r
        )
        self.extender_latency = Histogram(
            "colo_controller_extender_request_duration_seconds",
            "Time to answer a scheduler extender call.",
            ["verb"],
            registry=r,
            buckets=_EXTENDER_BUCKETS,
        )
        self.extender_fail_open = Counter(
            "colo_controller_extender_fail_open_total",
            "Filter calls in which the load predicates would have filtered every candidate node and, with "
            "extender.fail_open, filtered none.",
            registry=r,
        )
        self.node_score = Gauge(
            "colo_controller_node_load_score",
            "crane Dynamic score of the node (0..100) from its annotations.",
            ["node"],
            registry=r,
        )
        self.node_overloaded = Gauge(
            "colo_controller_node_overloaded",
            "1 when a fresh load annotation exceeds a predicate limit.",
            ["node"],
            registry=r,
        )
        self.nodes_floored = Gauge(
            "colo_controller_nodes_floored",
            "Nodes whose agent stopped answering and whose kubernetes.io/batch-* allocatable the controller holds "
            "at the allocated amount (volcano.sh/oversubscription-* at 0) until it answers again.",
            registry=r,
        )
        self.nodes_unreachable_publishing = Gauge(
            "colo_controller_nodes_unreachable_publishing",
            "Nodes whose agent publishes batch capacity but does not answer the controller (a NetworkPolicy, a "
            "certificate): the controller leaves their capacity to the agent instead of flooring it.",
            registry=r,
        )
        self.floor_writes = Counter(
            "colo_controller_floor_writes_total",
            "Node writes (status or annotations) made to floor the batch capacity of nodes with a silent agent, "
            "by result.",
            ["result"],
            registry=r,
        )
        self.is_leader = Gauge("colo_controller_is_leader", "1 while this replica holds the lease.", registry=r)
        ProcessCollector(registry=r)  # process_*: the controller's own CPU, memory and open files
        r.register(_BuildInfo())

    def count_polls(self, failed: Mapping[str, str], rejected: Mapping[str, str], polled: int) -> None:
        """One polling cycle's outcome (the in-cluster and the standalone controller count alike): failures
        by reason, rejected documents by why, usable samples, and the last cycle's split."""
        for reason in failed.values():
            self.nodes_failed.labels(reason).inc()
        for rejection in rejected.values():
            self.samples_rejected.labels(rejection).inc()
        self.nodes_polled.inc(polled)
        self.last_cycle_nodes.labels("ok").set(polled)
        self.last_cycle_nodes.labels("failed").set(len(failed))

    def render(self) -> bytes:
        """Text exposition format."""
        return generate_latest(self.registry)


class _BuildInfo:
    """`colo_build_info{program="colo-controller"}`."""

    def collect(self) -> Iterable[Metric]:
        return [build_info("colo-controller")]
