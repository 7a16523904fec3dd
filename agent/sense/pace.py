"""What the decisions need read each pass, declared by the strategies that need it (at their registration), so
the sampler's pace follows the active strategies and the entry point names no feature."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agent.sense.collectors.containers import CONTAINER_EVERY
from agent.sense.collectors.pods import ONLINE_POD_EVERY


@dataclass(frozen=True, slots=True)
class PassNeeds:
    """What one decision reads each second beyond the defaults (offline pods and the kubepods root each pass)."""

    online_pods: bool = False  # every online pod one by one, every pass (not only their sum through the root)
    containers: bool = False  # every container every pass (not every CONTAINER_EVERY passes)
    pod_memory_limits: bool = False  # pods' memory limits in the sample

    def __or__(self, other: PassNeeds) -> PassNeeds:
        return PassNeeds(
            self.online_pods or other.online_pods,
            self.containers or other.containers,
            self.pod_memory_limits or other.pod_memory_limits,
        )


NOTHING_MORE = PassNeeds()


def union(needs: Iterable[PassNeeds]) -> PassNeeds:
    out = NOTHING_MORE
    for n in needs:
        out = out | n
    return out


@dataclass(frozen=True, slots=True)
class Pace:
    """How often the sampler reads containers and online pods, in passes."""

    container_every: int
    online_every: int


def pace(needs: PassNeeds, max_gap_seconds: float, interval: float) -> Pace:
    """Online pods on their turn, no further apart than the windows' max gap (no hole in their windows), unless
    a decision reads them one by one each pass; containers likewise."""
    online = 1 if needs.online_pods else max(1, min(ONLINE_POD_EVERY, int(max_gap_seconds / interval)))
    return Pace(1 if needs.containers else CONTAINER_EVERY, online)
