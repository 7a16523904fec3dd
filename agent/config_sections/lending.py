"""What decides lending: which pods are offline (`classify`), and how capacity is computed and published for
them (`oversubscription`, read by agent/capacity/)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from agent.config_sections.strict import Strict
from common.plugins import RegisteredName

PredictorName = Annotated[str, RegisteredName("predictor", "agent.capacity.predictors.registry")]


class ClassifyConfig(Strict):
    """Which pods are offline (see contract/classify.py)."""

    #: PriorityClasses whose pods are offline (koordinator's batch and free classes).
    offline_priority_classes: tuple[str, ...] = ("koord-batch", "koord-free")
    #: Pods with a spec.priority below this are offline (system-critical pods never are).
    offline_priority_below: int = 0


class OversubscriptionConfig(Strict):
    """How capacity is computed (agent/capacity/lendable.py) and published (capacity/owner.py, docs/publishing.md)."""

    #: Publish capacity on every node, not only on nodes labelled volcano.sh/oversubscription=true.
    enabled_on_all_nodes: bool = False
    predictor: PredictorName | None = None  # both resources' predictor (docs/simulation.md); unset: each its own
    #: CPU's predictor (chosen with colo-sim, docs/simulation.md); given, it wins over `predictor` for CPU.
    cpu_predictor: PredictorName = "week_peak"
    #: Memory's predictor (chosen under the memory watermark's bound); given, it wins over `predictor`.
    memory_predictor: PredictorName = "nsigma"
    #: Until its history is this long, the predictor is trusted in proportion to it (a cold start).
    trust_seconds: float = Field(default=3600.0, ge=0)
    #: The window peaks are taken over (max_avg_1d: a day's highest 5-minute average), or the 5-minute one if higher.
    peak_window: str = "max_avg_1d"
    #: An online pod seen for less than this adds part of its unused request; a predictor needs this much history.
    min_history_seconds: float = Field(default=3600.0, ge=0)
    #: Share of allocatable CPU online peak, system peak and batch may fill together (docs/simulation.md).
    cpu_reclaim_ratio: float = Field(default=0.98, gt=0, le=1)
    #: Share of allocatable memory they may fill, at most pressure_margin_percent below the memory watermark.
    memory_reclaim_ratio: float = Field(default=0.7, gt=0, le=1)
    update_fraction: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="hysteresis band, both directions: a published value moves only when the new one differs "
        "by more than this fraction of it",
    )
    update_interval_seconds: float = Field(
        default=60.0,
        gt=0,
        description="minimum seconds between two writes of the same set (annotations, or status) that are not "
        "for safety; a drop for safety and a rise to the floor are written at once",
    )
    publish_window_seconds: float = Field(
        default=60.0,
        gt=0,
        description="the number proposed for publishing is the mean of the capacities computed in this many "
        "seconds: one noisy sample of system usage moves it by 1/window",
    )
    pressure_margin_percent: float = Field(
        default=10.0,
        ge=0,
        le=100,
        description="a resource is under pressure when the node's smoothed usage of it (eviction's average, "
        "% of allocatable) is within this many points of its eviction high watermark; a drop of its capacity "
        "is then written at once",
    )
    #: After this many sampling intervals without a pass, sampling counts as stalled: the annotations go to 0
    #: and kubernetes.io/batch-* to what the node's batch pods request.
    stall_intervals: int = Field(default=5, ge=1)
    #: Publish kubernetes.io/batch-* in node status; false (or the label removed) holds them at what the
    #: node's batch pods request until none do, then removes them.
    extended_resources: bool = True
    #: The learned lending margin's least factor (agent/capacity/margin.py; 1: no learned margin).
    margin_floor: float = Field(default=0.2, gt=0, le=1)
