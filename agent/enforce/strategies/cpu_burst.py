"""The `cpu_burst` strategy: CFS burst for online pods with a CPU limit, per container and pod (the
allowance is `plan_burst` below: node setting, Volcano's annotations, percent of the quota).

The burst is planned each pass from the quota the pod's *current* spec gives it: after a kubelet in-place
resize below a burst, the lower burst is planned at once (the executor writes a lowering burst before any
quota change of the pass; the kernel refuses a quota below the burst). What holds is re-checked every
`RECHECK_SECONDS`; in between only changed targets are asked for, so a pass reads no burst file it need not.
A pod that stops being online, opts out, loses its limit or goes away, and every pod when the feature is
off, gets its recorded bursts back (a `Restore` of the part).

A pod's bursts, their actions and its report entry depend on its spec alone: kept between passes and
computed again when the pod's PodMeta object or its containers change (SpecCache in online.py).

Burst allowance: the CFS burst (µs) an online pod and its containers get, Volcano agent's semantics.

Enabled for every online pod by `qos.cpu_burst.enabled`, or by the pod itself with the annotation
`volcano.sh/enable-quota-burst` (Go's strconv.ParseBool spellings, as Volcano parses it; false opts a pod
out of the node's setting). `volcano.sh/quota-burst-time` is the burst in µs per container (a positive
integer; anything else falls back to the percent). A burst never exceeds the quota (the kernel refuses it),
a container or pod without a quota gets none, and the pod gets the sum of its containers' bursts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.config import AgentConfig
from agent.config_sections.pod_qos import CpuBurstConfig
from agent.enforce.actions import Action, Part, Plan, Recorded, Report, Restore, SetCpuBurst
from agent.enforce.parts.burst import NAME as BURST
from agent.enforce.strategies.online import SpecCache, online_pod
from agent.enforce.strategies.registry import Facts, register
from agent.node_state import NodeState
from agent.snapshot import PodSample
from contract.annotations import ENABLE_QUOTA_BURST
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


RECHECK_SECONDS = 30.0
PARTS: frozenset[Part] = frozenset({"burst"})


@dataclass(frozen=True, slots=True)
class CpuBurstReport(Report):
    enabled: bool  # on for every online pod (else: for those that opt in)
    supported: bool  # the kernel has CFS burst
    burst_percent: float
    pods: Mapping[str, Any]  # uid -> {burst_us, containers: {container id -> burst_us}}
    warnings: Sequence[str]  # pods' malformed annotations

    def fields(self) -> dict[str, Any]:
        section = {"enabled": self.enabled, "supported": self.supported, "burst_percent": self.burst_percent}
        return {"cpu_burst": {**section, "pods": self.pods, "warnings": self.warnings}}

    def to_log(self) -> Sequence[str]:
        return self.warnings


@dataclass(frozen=True, slots=True)
class BurstMemo:
    targets: dict[str, int] = field(default_factory=dict)  # cgroup -> burst asked for
    checked_at: float | None = None  # when every target was last asked for


@dataclass(frozen=True, slots=True)
class PodBurst:
    """One online pod's bursts as its spec gives them (cached per pod: agent/enforce/strategies/online.py SpecCache).
    `targets` None: burst is off for the pod. The report entry is shared between passes: read-only."""

    warning: str | None
    targets: dict[str, int] | None = None  # cgroup -> burst, its containers' then its own
    actions: tuple[SetCpuBurst, ...] = ()  # one per target, in that order
    report: dict[str, Any] | None = None


class CpuBurst:
    name = "cpu_burst"
    parts = PARTS

    def __init__(self, config: CpuBurstConfig, supported: bool) -> None:
        self.config, self.supported = config, supported
        self._specs: SpecCache[PodBurst | None] = SpecCache(self._pod)

    def _pod(self, p: PodSample) -> PodBurst | None:
        """What the pod's spec asks for (None: not online); nothing here depends on the pass's samples."""
        o = online_pod(p)
        if o is None:
            return None
        inputs = BurstInputs(True, p.meta.annotations, o.quota_us, {c.cgroup: c.quota_us for c in o.containers})
        bp = plan_burst(self.config, inputs)
        warning = f"pod {p.meta.namespace}/{p.meta.name}: {bp.warning}" if bp.warning else None
        if bp.source == "off" or not bp.container_bursts_us:
            return PodBurst(warning)
        targets = dict(bp.container_bursts_us)
        if bp.pod_burst_us is not None:
            targets[p.cgroup] = bp.pod_burst_us
        ids = {c.cgroup: c.id for c in o.containers}
        report = {
            "source": bp.source,
            "burst_us": bp.pod_burst_us,
            "containers": {ids[cg]: b for cg, b in bp.container_bursts_us.items()},
        }
        actions = tuple(SetCpuBurst(cg, burst, "burst", p.uid) for cg, burst in targets.items())
        return PodBurst(warning, targets, actions, report)

    def plan(self, state: NodeState, recorded: Recorded) -> Plan:
        memo = recorded.memo if isinstance(recorded.memo, BurstMemo) else BurstMemo()
        full = memo.checked_at is None or recorded.now - memo.checked_at >= RECHECK_SECONDS
        warnings: list[str] = []
        report_pods: dict[str, Any] = {}
        report = CpuBurstReport(self.config.enabled, self.supported, self.config.burst_percent, report_pods, warnings)
        actions: list[Action] = []
        targets: dict[str, int] = {}
        planned: set[str] = set()
        # off on the node: only pods that carry the annotation can ask (most carry none: not looked at further)
        pods: Sequence[PodSample] = state.online if self.supported else ()
        if not self.config.enabled:
            pods = [p for p in pods if ENABLE_QUOTA_BURST in p.meta.annotations]
        held = memo.targets
        for p, b in self._specs.each(pods):
            if b is None:
                continue
            if b.warning:
                warnings.append(b.warning)
            if b.targets is None:
                continue
            uid = p.uid
            planned.add(uid)
            targets.update(b.targets)
            if full:
                actions += b.actions
            else:
                actions += [a for a in b.actions if held.get(a.cgroup) != a.burst_us]
            report_pods[uid] = b.report
        for uid, entry in recorded.entries.items():
            if BURST in entry.parts and uid not in planned:
                actions.append(Restore(uid, PARTS))
        checked = recorded.now if full else memo.checked_at
        return Plan(tuple(actions), BurstMemo(targets, checked), report)


def _build(config: AgentConfig, facts: Facts) -> CpuBurst:
    """Always active: it plans its restores when off, and a pod may opt in to the burst alone."""
    return CpuBurst(config.qos.cpu_burst, facts.burst_supported)


register(CpuBurst.name, _build, order=60, report_defaults={"cpu_burst": {}})
