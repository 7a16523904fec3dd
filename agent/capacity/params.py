"""What the capacity stage is given: its parameters (from the agent's `oversubscription` section) and one online
pod's figures; below both `lendable` and the predictors, which read them."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.capacity.margin import MarginParams


@dataclass(frozen=True, slots=True)
class CapacityParams:
    peak_window: str = "max_avg_1d"
    min_history_seconds: float = 3600.0
    cpu_reclaim_ratio: float = 0.98
    memory_reclaim_ratio: float = 0.7
    predictor: str | None = None  # both resources' (wins over the two below); None: each resource's own
    cpu_predictor: str = "week_peak"
    memory_predictor: str = "nsigma"
    nsigma: float = 5.0
    profile_days: int = 7
    profile_margin: float = 0.1
    trust_seconds: float = 3600.0
    cold_reclaim_ratio: float = 0.6
    margin: MarginParams | None = field(default_factory=MarginParams)  # None: no learned margin
    memory_fill_limit: float = 1.0  # the memory ratio's bound from eviction's watermark (`lendable.memory_fill_limit`)

    def ratio(self, resource: str) -> float:
        return self.cpu_reclaim_ratio if resource == "cpu" else min(self.memory_reclaim_ratio, self.memory_fill_limit)

    def predictor_for(self, resource: str) -> str:
        if self.predictor is not None:
            return self.predictor
        return self.cpu_predictor if resource == "cpu" else self.memory_predictor


@dataclass(slots=True)
class OnlinePod:
    """One online pod's figures for one resource in one pass. Not frozen: two are made for every online pod at
    every pass (and at every step of colo-sim's replay), and a frozen dataclass's `__init__` costs three times a
    plain one's (`object.__setattr__` per field); nothing keeps one beyond its pass."""

    uid: str
    request: float
    usage: float
