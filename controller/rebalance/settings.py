"""The `rebalance` section of the controller's config: defaults and strict validation."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from common.config import UrlPath
from common.label_selector import LabelSelector
from contract.classify import CRITICAL_PRIORITY
from contract.windows import WINDOW_NAMES


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Thresholds(_Section):
    """Percent of allocatable per resource (deviation mode: percentage points around the cluster average)."""

    #: CPU usage, percent of allocatable.
    cpu: float = Field(ge=0, le=100)
    #: Memory usage, percent of allocatable.
    memory: float = Field(ge=0, le=100)


class RebalanceSettings(_Section):
    """Off by default; when switched on, a dry run until `dry_run: false` (docs/scheduling.md, Rebalancing)."""

    #: Move pods off hot nodes (evictions are disruptive: opt in).
    enabled: bool = False
    #: Compute, log, export and serve the plan (/api/v1/rebalance); evict nothing.
    dry_run: bool = True
    #: The agents' node window usage is taken over (long enough to ignore spikes).
    window: str = "avg_5m"
    #: A node under every one is low: it may receive pods.
    low_thresholds: Thresholds = Thresholds(cpu=45, memory=55)
    #: A node over any one is high: above these online latency suffers (CPU) or the kernel reclaims (memory).
    high_thresholds: Thresholds = Thresholds(cpu=75, memory=80)
    #: Thresholds are percentage points below and above the average usage of the nodes with a fresh sample.
    use_deviation_thresholds: bool = False
    #: Cycles in a row a node must be high before anything moves.
    consecutive_abnormalities: int = Field(default=5, ge=1, le=1000)
    #: Low nodes needed before anything moves (0: any).
    number_of_nodes: int = Field(default=0, ge=0)
    #: Per source per cycle: a node sheds load in small steps, re-confirmed in between.
    max_evictions_per_node: int = Field(default=2, ge=1)
    #: Per namespace per cycle: one team's workloads are not all restarted at once.
    max_evictions_per_namespace: int = Field(default=5, ge=1)
    #: Per cycle, cluster-wide.
    max_evictions_per_cycle: int = Field(default=10, ge=1)
    #: Pods with this priority or more are never candidates (system-critical pods never are).
    priority_below: int = Field(default=CRITICAL_PRIORITY, le=CRITICAL_PRIORITY)
    #: Namespaces whose pods are never evicted.
    excluded_namespaces: tuple[str, ...] = ("kube-system",)
    #: Only pods matching one of these label selectors are candidates (none: all).
    pod_selectors: tuple[LabelSelector, ...] = ()
    #: Also evict pods with emptyDir/hostPath volumes (their data is lost).
    evict_local_storage_pods: bool = False
    #: Also evict pods without an owner (they do not come back).
    evict_bare_pods: bool = False
    #: Where the agents serve their pod list.
    pods_path: UrlPath = "/api/v1/pods"
    #: Largest pod list read from an agent.
    max_pods_response_bytes: int = Field(default=16 << 20, ge=1024)

    @field_validator("window")
    @classmethod
    def _window(cls, v: str) -> str:
        if v not in WINDOW_NAMES:
            raise ValueError(f"must be one of the agent's windows: {', '.join(WINDOW_NAMES)}")
        return v

    @model_validator(mode="after")
    def _ordered(self) -> RebalanceSettings:
        if not self.use_deviation_thresholds:
            for res in ("cpu", "memory"):
                if getattr(self.low_thresholds, res) > getattr(self.high_thresholds, res):
                    raise ValueError(f"low_thresholds.{res} must not be above high_thresholds.{res}")
        return self

    def selector_label_keys(self) -> frozenset[str]:
        """The pod label keys the selectors read (the pod cache keeps only these)."""
        keys: set[str] = set()
        for s in self.pod_selectors:
            keys |= s.label_keys()
        return frozenset(keys)
