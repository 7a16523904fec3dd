"""Burst allowance: the CFS burst (µs) an online pod and its containers get, Volcano agent's semantics.

Enabled for every online pod by `qos.cpu_burst.enabled`, or by the pod itself with the annotation
`volcano.sh/enable-quota-burst` (Go's strconv.ParseBool spellings, as Volcano parses it; false opts a pod
out of the node's setting). `volcano.sh/quota-burst-time` is the burst in µs per container (a positive
integer; anything else falls back to the percent). A burst never exceeds the quota (the kernel refuses it),
a container or pod without a quota gets none, and the pod gets the sum of its containers' bursts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from agent.config import CpuBurstConfig
from contract.annotations import ENABLE_QUOTA_BURST as ENABLE_ANNOTATION
from contract.annotations import QUOTA_BURST_TIME as BURST_TIME_ANNOTATION

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


@dataclass(frozen=True, slots=True)
class BurstInputs:
    """One pod as the allowance needs it: its own quotas (recorded before any write), not the current ones."""

    online: bool
    annotations: Mapping[str, str]
    pod_quota_us: int | None  # None: unlimited
    container_quotas_us: Mapping[str, int | None]  # container cgroup -> its own quota


@dataclass(frozen=True, slots=True)
class BurstPlan:
    """Bursts to hold; an empty plan means every cgroup keeps (or gets back) its own burst."""

    source: Literal["node", "annotation", "off"]
    pod_burst_us: int | None = None
    container_bursts_us: dict[str, int] = field(default_factory=dict)
    warning: str | None = None


def parse_bool(value: str) -> bool | None:
    """Go's strconv.ParseBool, the parser Volcano's agent uses; None for anything else."""
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    return None


def _burst_time(annotations: Mapping[str, str]) -> tuple[int | None, str | None]:
    raw = annotations.get(BURST_TIME_ANNOTATION)
    if raw is None:
        return None, None
    if raw.isascii() and raw.isdigit() and int(raw) > 0:
        return int(raw), None
    return None, f"{BURST_TIME_ANNOTATION}={raw!r} is not a positive integer of µs; the burst percent applies"


def plan_burst(cfg: CpuBurstConfig, pod: BurstInputs) -> BurstPlan:
    """The pod's and its containers' burst, or an empty plan when burst is off for it."""
    if not pod.online:
        return BurstPlan("off")
    raw = pod.annotations.get(ENABLE_ANNOTATION)
    asked = None if raw is None else parse_bool(raw)
    warning = None
    if raw is not None and asked is None:
        warning = f"{ENABLE_ANNOTATION}={raw!r} is not a boolean; the node's setting applies"
    if asked is False or (asked is None and not cfg.enabled):
        return BurstPlan("off", warning=warning)
    source: Literal["node", "annotation"] = "annotation" if asked else "node"
    fixed, time_warning = _burst_time(pod.annotations)
    bursts: dict[str, int] = {}
    for cgroup, quota in pod.container_quotas_us.items():
        if quota is None or quota <= 0:
            continue
        wanted = fixed if fixed is not None else quota * cfg.burst_percent // 100
        bursts[cgroup] = min(wanted, quota)
    pod_burst = None
    if pod.pod_quota_us is not None and pod.pod_quota_us > 0:
        pod_burst = min(sum(bursts.values()), pod.pod_quota_us)
    return BurstPlan(source, pod_burst, bursts, warning or time_warning)
