"""What a strategy asks for: cgroup actions as plain values, applied by the one executor (agent/executor.py).

A strategy is `plan(state, recorded) -> Plan`: a pure function of the pass's NodeState and of what the ledger
recorded (the originals, and what the strategy itself remembered from its previous pass). It reads no file
and writes none; the executor compares each desired value with what the cgroup holds, skips what already
holds, records originals before the first write of a part, refuses every write when the record cannot be
saved, and applies limit changes in the order cgroup v1 accepts. Dry run swaps the executor, never a plan.

`part` names what the ledger must remember so the value can be put back (shutdown, switch-off, crash):
a part in `OWN_LIMITS` is the pod's own limit (batch resources) and is never restored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.ledger import Touched

#: What a write belongs to, for the ledger and for restore.
Part = Literal[
    "baseline",  # offline pods: minimum weight, SCHED_IDLE, oom_score_adj
    "quota",  # offline pods: CFS quota suppression (and the best-effort tier cap)
    "cpuset",  # offline pods: cpuset confinement
    "memory_high",  # offline pods, v2: memory.high
    "batch",  # batch pods: kubelet-equivalent limits from kubernetes.io/batch-* (never restored)
    "burst",  # online pods: cpu.cfs_burst_us / cpu.max.burst
    "quota_burst",  # online pods: CFS quota raised above the pod's own limit while throttled
    "memory_qos",  # online pods, v2: memory.min / memory.low / memory.high
]
#: The `uid` of actions on cgroups no pod owns (QoS tiers, kubepods): a Restore of it puts back those cgroups.
SHARED = ""
#: Parts that are the pod's own limits: written until they hold, left in place when Colo stops.
OWN_LIMITS: frozenset[Part] = frozenset({"batch"})


@dataclass(frozen=True, slots=True)
class SetCpuQuota:
    """CFS quota (None: unlimited) at a period; `tolerance` skips a change smaller than that share of the
    current quota. `containers` (cgroup -> (quota, period)) change with it, in the same safe-order batch,
    and are skipped with it. `period_us` 0 with `quota_us` None: unlimited at whatever period the cgroup
    has. With `uid` "" the cgroup is a QoS tier: its period is recorded (`Recorded.tiers`) before a cap,
    dropped once it is uncapped."""

    cgroup: str
    quota_us: int | None
    period_us: int
    part: Part
    uid: str = ""  # the pod the cgroup belongs to ("" for a QoS tier)
    tolerance: float = 0.0
    containers: Mapping[str, tuple[int | None, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SetCpuShares:
    """v1 cpu.shares; on v2 the executor writes the weight (`weight` when given, else converted)."""

    cgroup: str
    shares: int
    part: Part
    uid: str = ""
    weight: int | None = None


@dataclass(frozen=True, slots=True)
class SetCpuIdle:
    cgroup: str
    idle: bool
    part: Part
    uid: str = ""


@dataclass(frozen=True, slots=True)
class SetOomScoreAdj:
    """oom_score_adj of every process in the cgroup (and its children)."""

    cgroup: str
    score: int
    part: Part
    uid: str = ""


@dataclass(frozen=True, slots=True)
class SetCpuset:
    """The pod's cpuset and its containers' (moved through the union, as v1 demands)."""

    cgroup: str
    cpus: frozenset[int]
    part: Part
    uid: str = ""
    containers: Mapping[str, frozenset[int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SetMemoryHigh:
    """v2 memory.high (None: max)."""

    cgroup: str
    limit: int | None
    part: Part
    uid: str = ""


@dataclass(frozen=True, slots=True)
class SetMemoryLimit:
    """memory.limit_in_bytes (v1) / memory.max (v2); None: unlimited."""

    cgroup: str
    limit: int | None
    part: Part
    uid: str = ""


@dataclass(frozen=True, slots=True)
class SetMemoryProtection:
    """v2 memory.min or memory.low (bytes; 0 clears it)."""

    cgroup: str
    kind: Literal["min", "low"]
    value: int
    part: Part
    uid: str = ""


@dataclass(frozen=True, slots=True)
class SetCpuBurst:
    """cpu.cfs_burst_us (v1) / cpu.max.burst (v2), in microseconds; never above the quota."""

    cgroup: str
    burst_us: int
    part: Part
    uid: str = ""


@dataclass(frozen=True, slots=True)
class Restore:
    """Put back what the ledger recorded for these parts of one pod."""

    uid: str
    parts: frozenset[Part]


Action = (
    SetCpuQuota
    | SetCpuShares
    | SetCpuIdle
    | SetOomScoreAdj
    | SetCpuset
    | SetMemoryHigh
    | SetMemoryLimit
    | SetMemoryProtection
    | SetCpuBurst
    | Restore
)


def cpus(quota_us: int | None, period_us: int) -> float:
    """CPUs a CFS quota allows (v1 compares parent and child by this ratio, not by the raw quota)."""
    return float("inf") if quota_us is None or period_us <= 0 else quota_us / period_us


def tightest_quotas(actions: Sequence[Action]) -> list[Action]:
    """The actions with one SetCpuQuota per cgroup, the tightest (the first on a tie): a pod's own limit
    (batch) and suppression may both ask for one in a pass, and suppression works on top of the pod's own
    limit, never looser; two writes pulling one file two ways in a pass would be a fight."""
    best: dict[str, SetCpuQuota] = {}
    for a in actions:
        if not isinstance(a, SetCpuQuota):
            continue
        held = best.get(a.cgroup)
        if held is None or cpus(a.quota_us, a.period_us) < cpus(held.quota_us, held.period_us):
            best[a.cgroup] = a
    return [a for a in actions if not isinstance(a, SetCpuQuota) or best[a.cgroup] is a]


@dataclass(frozen=True, slots=True)
class Recorded:
    """What a plan may know beyond the pass's state: the ledger's originals (read-only), the QoS tiers Colo
    capped, what this strategy remembered from its previous pass (`memo`), and the monotonic time."""

    entries: Mapping[str, Touched]
    tiers: Mapping[str, int]
    memo: Any = None
    now: float = 0.0


@dataclass(frozen=True, slots=True)
class Plan:
    """A strategy's answer: the actions, what to remember for its next pass, and what it reports (the
    /api/v1/node section and metrics read `report`, never the strategy's internals)."""

    actions: tuple[Action, ...] = ()
    memo: Any = None
    report: Mapping[str, Any] = field(default_factory=dict)
