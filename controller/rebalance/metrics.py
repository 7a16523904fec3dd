"""Rebalancing's Prometheus metrics, on the controller's registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class RebalanceMetrics:
    """Evictions by reason and result, node classes, skips, budget, planning time."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.evictions = Counter(
            "colo_controller_rebalance_evictions_total",
            "Rebalancing evictions by reason (resources over their high threshold on the source) and result "
            "(evicted, dry_run, blocked by a PodDisruptionBudget, gone, error, unavailable, not_leader).",
            ["reason", "result"],
            registry=r,
        )
        self.nodes = Gauge(
            "colo_controller_rebalance_nodes",
            "Nodes by rebalancing class in the last cycle (low, normal, high, source, unknown).",
            ["class"],
            registry=r,
        )
        self.skipped = Counter(
            "colo_controller_rebalance_skipped_nodes_total",
            "Confirmed high nodes nothing was evicted from, by reason.",
            ["reason"],
            registry=r,
        )
        self.budget = Gauge(
            "colo_controller_rebalance_budget",
            "Room of the low nodes up to their high thresholds at the start of the last cycle "
            "(cpu in cores, memory in bytes).",
            ["resource"],
            registry=r,
        )
        self.pod_polls = Counter(
            "colo_controller_rebalance_pod_polls_total",
            "Polls of agents' pod lists (sources only), by result.",
            ["result"],
            registry=r,
        )
        self.plan_duration = Histogram(
            "colo_controller_rebalance_plan_duration_seconds",
            "Wall time of planning one rebalancing cycle (pod polls excluded; evictions included outside a dry run).",
            registry=r,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5),
        )
