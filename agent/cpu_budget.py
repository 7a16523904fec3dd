"""How much CPU offline pods may use, and how it is split among them (pure functions, no I/O).

    budget = allocatable × threshold − online usage − system usage, floored at `min_cores`

so offline work never stalls completely, and raised by at most `growth_cores` per interval so quotas do
not oscillate (a fall is applied at once). The `cfsQuota` policy splits the budget in proportion to the
offline pods' CPU requests; best-effort offline pods (no request) share `besteffort_share` of it equally.
A pod never gets more than its own limit. Leftover from capped pods is not redistributed: the budget is an
upper bound, not a promise.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cgroup.files import parse_cpuset


@dataclass(frozen=True, slots=True)
class OfflineCpu:
    uid: str
    request_cores: float
    limit_cores: float | None


def offline_budget(
    allocatable_cores: float,
    threshold: float,
    online_cores: float,
    system_cores: float,
    min_cores: float,
    previous: float | None = None,
    growth_cores: float | None = None,
) -> float:
    budget = max(min_cores, allocatable_cores * threshold - online_cores - system_cores)
    if previous is not None and growth_cores is not None:
        budget = min(budget, previous + growth_cores)
    return max(min_cores, budget)


def split_budget(budget: float, pods: Sequence[OfflineCpu], besteffort_share: float) -> tuple[dict[str, float], float]:
    """Per-pod cores and the best-effort pods' combined slice."""
    besteffort = [p for p in pods if p.request_cores <= 0]
    requesting = [p for p in pods if p.request_cores > 0]
    if besteffort and requesting:
        be_total = budget * besteffort_share
    elif besteffort:
        be_total = budget
    else:
        be_total = 0.0
    rest = budget - be_total
    total_request = sum(p.request_cores for p in requesting)
    quotas: dict[str, float] = {}
    for p in requesting:
        quotas[p.uid] = rest * p.request_cores / total_request
    for p in besteffort:
        quotas[p.uid] = be_total / len(besteffort)
    for p in pods:
        if p.limit_cores is not None:
            quotas[p.uid] = min(quotas[p.uid], p.limit_cores)
    return quotas, be_total


def exclusive_cpus(state_json: str) -> frozenset[int]:
    """CPUs kubelet's static CPU manager gave exclusively to guaranteed containers (its state file)."""
    try:
        doc = json.loads(state_json)
    except ValueError:
        return frozenset()
    cpus: set[int] = set()
    entries = doc.get("entries") if isinstance(doc, dict) else None
    for containers in (entries or {}).values():
        if isinstance(containers, dict):
            for value in containers.values():
                if isinstance(value, str):
                    try:
                        cpus |= parse_cpuset("cpu_manager_state", value.encode())
                    except ValueError:
                        continue
    return frozenset(cpus)


def pick_cpuset(budget: float, available: Iterable[int], exclusive: frozenset[int]) -> frozenset[int]:
    """ceil(budget) CPUs (at least one) from the shareable ones, highest numbers first: kubelet's static
    policy hands out exclusive CPUs from the lowest numbers, so offline work keeps away from them."""
    shareable = sorted(set(available) - exclusive, reverse=True) or sorted(set(available), reverse=True)
    n = max(1, min(len(shareable), math.ceil(budget - 1e-9)))
    return frozenset(shareable[:n])
