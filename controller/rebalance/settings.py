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

    cpu: float = Field(ge=0, le=100)
    memory: float = Field(ge=0, le=100)


class RebalanceSettings(_Section):
    """Off by default; when switched on, a dry run until `dry_run: false` (README: Rebalancing)."""

    enabled: bool = False
    dry_run: bool = True
    window: str = "avg_5m"
    low_thresholds: Thresholds = Thresholds(cpu=45, memory=55)
    high_thresholds: Thresholds = Thresholds(cpu=75, memory=80)
    use_deviation_thresholds: bool = False
    consecutive_abnormalities: int = Field(default=5, ge=1, le=1000)
    number_of_nodes: int = Field(default=0, ge=0)
    max_evictions_per_node: int = Field(default=2, ge=1)
    max_evictions_per_namespace: int = Field(default=5, ge=1)
    max_evictions_per_cycle: int = Field(default=10, ge=1)
    priority_below: int = Field(default=CRITICAL_PRIORITY, le=CRITICAL_PRIORITY)
    excluded_namespaces: tuple[str, ...] = ("kube-system",)
    pod_selectors: tuple[LabelSelector, ...] = ()  # a pod is a candidate when it matches any
    evict_local_storage_pods: bool = False
    evict_bare_pods: bool = False
    pods_path: UrlPath = "/api/v1/pods"
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
