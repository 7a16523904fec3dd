"""The `quota_burst` strategy (koordlet's cfsQuotaBurst): a throttled online container's CFS quota raised
step by step while the node is idle, given back at once when the node is busy, offline pods are being
suppressed or the node is evicting (the decisions are below in this module; the facts come from the
pass's NodeState). What a container holds is what this strategy asked for last (its memo), its own quota is
what its current spec gives. A pod with a raise gets its pod and container quotas written together (the
executor orders them as v1 accepts); a pod with none left gets its recorded own quotas back (`Restore`).

Per pass the cost is the decisions: the own quotas a pod's spec gives are kept between passes (SpecCache in
agent/enforce/strategies/online.py), the containers go to the planner as rows, and a container's action is last
pass's object while it asks for the same quota (a raised pod is asked for every pass).

Dynamic quota burst (koordlet's cfsQuotaBurst): raise a throttled online container's CFS quota while the
node has idle CPU, give it back at once when the node needs it.

A small state machine, a pure function of its inputs: the node's state decides whether quota may grow
(idle), must stay (cooling: within 10% of the safe level) or must go back to every container's own quota at
once (busy, offline pods being suppressed, or the node evicting). A container whose throttled ratio is at
or above the threshold gets `step_percent` of its own quota more per pass, up to `max_quota_burst_percent`
of it, and never more in total than the node's headroom under its safe level. Its own quota comes back
when it has been quiet (not throttled, using under 90% of its own quota) for `restore_after_seconds`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.config import AgentConfig
from agent.config_sections.pod_qos import QuotaBurstConfig
from agent.enforce.actions import Action, Part, Plan, Recorded, Report, Restore, SetCpuQuota
from agent.enforce.ledger import Touched
from agent.enforce.parts.quota import QUOTA_BURST
from agent.enforce.strategies.online import PERIOD_US, SpecCache, cores, online_pod
from agent.enforce.strategies.registry import Facts, register
from agent.node_state import NodeState
from agent.sense.pace import NOTHING_MORE, PassNeeds
from agent.snapshot import PodSample

MIN_QUOTA_US = 1000
COOLING_FRACTION = 0.9  # of the safe level: above it quota stops growing (koordlet's cooling band)
FITS_OWN_QUOTA = 0.9  # usage under this share of its own quota: the container no longer needs more

NodeBurstState = Literal["idle", "cooling", "busy", "blocked"]
QuotaAction = Literal["raise", "hold", "restore", "reset"]


@dataclass(frozen=True, slots=True)
class NodeCpu:
    """The node's CPU as the state record holds it for this pass."""

    cpus: float  # CPUs the node can give (allocatable)
    busy_cores: float | None  # node CPU busy now, every pod and the system; None: no rate yet (not idle)
    offline_suppressed: bool  # enforcement is holding offline pods below what they want
    evicting: bool


@dataclass(frozen=True, slots=True)
class QuietSince:
    """Carried between passes per container: when it last became quiet (None: not quiet)."""

    at: float | None = None


@dataclass(slots=True)
class QuotaDecision:
    """Not frozen: a pass builds one per online container, and frozen ones cost three times as much to build.
    Nothing changes one after it is made."""

    quota_us: int
    action: QuotaAction
    reason: str


@dataclass(frozen=True, slots=True)
class QuotaBurstPlan:
    node: NodeBurstState
    headroom_cores: float  # what the node could give before this pass's raises
    containers: dict[str, QuotaDecision] = field(default_factory=dict)
    pods: dict[str, int] = field(default_factory=dict)  # pod cgroup -> quota (its own + its containers' raise)
    quiet: dict[str, QuietSince] = field(default_factory=dict)


def node_state(cfg: QuotaBurstConfig, node: NodeCpu) -> NodeBurstState:
    if node.evicting or node.offline_suppressed:
        return "blocked"
    if node.cpus <= 0 or node.busy_cores is None:
        return "busy"  # unknown is never read as idle
    usage = node.busy_cores / node.cpus
    if usage >= cfg.node_safe_usage:
        return "busy"
    if usage >= cfg.node_safe_usage * COOLING_FRACTION:
        return "cooling"
    return "idle"


NOT_QUIET = QuietSince()

#: One online container with a CPU limit, as a plain tuple (a pass plans hundreds a second without building an
#: object per container): (cgroup, its pod's cgroup, its own quota recorded before any write, the quota it
#: holds now, its period, throttled periods / periods over the last interval, usage in cores; the last two
#: None while there is no rate yet).
CpuRow = tuple[str, str, int, int, int, float | None, float | None]


def _decide(
    cfg: QuotaBurstConfig,
    state: NodeBurstState,
    c: CpuRow,
    quiet_at: float | None,
    now: float,
    room: float,
) -> tuple[QuotaDecision, float | None, float]:
    """(decision, quiet since, cores of headroom it took)."""
    _, _, own_quota_us, quota_us, period_us, throttled_ratio, usage_cores = c
    own = max(own_quota_us, MIN_QUOTA_US)
    if state in ("busy", "blocked"):
        cause = "node CPU at or above its safe level" if state == "busy" else "offline pods suppressed or evicting"
        return QuotaDecision(own, "reset" if quota_us != own else "hold", cause), None, 0.0
    if throttled_ratio is None or usage_cores is None:
        return QuotaDecision(max(quota_us, own), "hold", "no rate yet"), None, 0.0
    throttled = throttled_ratio >= cfg.throttled_ratio
    fits = throttled_ratio == 0 and usage_cores * period_us <= own * FITS_OWN_QUOTA
    if fits:
        since = quiet_at if quiet_at is not None else now
        if quota_us != own and now - since >= cfg.restore_after_seconds:
            return QuotaDecision(own, "restore", "quiet within its own quota"), since, 0.0
        return QuotaDecision(max(quota_us, own), "hold", "quiet"), since, 0.0
    if not throttled or state == "cooling":
        why = "throttled below the threshold" if not throttled else "node CPU near its safe level"
        return QuotaDecision(max(quota_us, own), "hold", why), None, 0.0
    ceiling = own * cfg.max_quota_burst_percent // 100
    current = max(quota_us, own)
    target = min(ceiling, current + own * cfg.step_percent // 100)
    target = min(target, current + int(room * period_us))
    if target <= current:
        why = "at max_quota_burst_percent" if current >= ceiling else "no CPU left under the node's safe level"
        return QuotaDecision(current, "hold", why), None, 0.0
    return QuotaDecision(target, "raise", "throttled on an idle node"), None, (target - current) / period_us


def _quiet(was: QuietSince | None, since: float | None) -> QuietSince:
    """The record to carry: the one carried in when it still holds (most containers, most passes)."""
    if since is None:
        return NOT_QUIET
    return was if was is not None and was.at == since else QuietSince(since)


def plan_quota_burst(
    cfg: QuotaBurstConfig,
    node: NodeCpu,
    rows: Sequence[CpuRow],
    quiet: Mapping[str, QuietSince],
    pod_own_quotas_us: Mapping[str, int | None],
    now: float,
) -> QuotaBurstPlan:
    """Every container's quota for this pass, and its pod's (own quota plus its containers' raises). Only a
    raise takes headroom, and only a container throttled at or above the threshold on an idle node can be
    raised: those alone are decided in order of throttling (most first, as far as the headroom reaches);
    every other decision does not depend on the order. A container's quiet record is carried over as the
    same object while it holds."""
    state = node_state(cfg, node)
    headroom = 0.0 if node.busy_cores is None else max(0.0, node.cpus * cfg.node_safe_usage - node.busy_cores)
    plan = QuotaBurstPlan(state, headroom)
    decisions, quiet_out = plan.containers, plan.quiet
    threshold, idle = cfg.throttled_ratio, state == "idle"
    extra: dict[str, int] = {}
    hot: list[CpuRow] = []
    for c in rows:
        cgroup, pod, own = c[0], c[1], c[2]
        extra[pod] = extra.get(pod, 0) - (own if own > MIN_QUOTA_US else MIN_QUOTA_US)
        if idle and c[5] is not None and c[5] >= threshold:
            hot.append(c)  # may take headroom: decided below, in order
            continue
        was = quiet.get(cgroup)
        at = None if was is None else was.at
        decision, since, _ = _decide(cfg, state, c, at, now, headroom)
        decisions[cgroup] = decision
        quiet_out[cgroup] = _quiet(was, since)
    room = headroom
    for c in sorted(hot, key=lambda c: (-(c[5] or 0.0), c[0])):
        was = quiet.get(c[0])
        decision, since, took = _decide(cfg, state, c, None if was is None else was.at, now, room)
        room -= took
        decisions[c[0]] = decision
        quiet_out[c[0]] = _quiet(was, since)
    for c in rows:
        extra[c[1]] += decisions[c[0]].quota_us
    for pod, raise_us in extra.items():
        own_pod = pod_own_quotas_us.get(pod)
        if own_pod is not None:  # an unlimited pod stays unlimited
            plan.pods[pod] = own_pod + raise_us
    return plan


PARTS: frozenset[Part] = frozenset({"quota_burst"})


@dataclass(frozen=True, slots=True)
class QuotaBurstReport(Report):
    enabled: bool
    node_state: NodeBurstState | None  # None: off
    headroom_cores: float | None  # what the node could give before this pass's raises
    pods: Mapping[str, Any]  # uid -> {quota_cores, containers: {container id -> state, reason, cores, ...}}

    def fields(self) -> dict[str, Any]:
        return {
            "quota_burst": {
                "enabled": self.enabled,
                "node_state": self.node_state,
                "headroom_cores": self.headroom_cores,
                "pods": self.pods,
            }
        }


@dataclass(frozen=True, slots=True)
class QuotaMemo:
    quotas: dict[str, int] = field(default_factory=dict)  # container cgroup -> quota asked for last pass
    quiet: dict[str, QuietSince] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PodQuotas:
    """One online pod's own quotas as its spec gives them (cached per pod: agent/enforce/strategies/online.py
    SpecCache): the pod's, and each limited container's with its index among the pod's containers."""

    own_us: int | None
    containers: tuple[tuple[int, str, str, int, float], ...]  # (index, cgroup, id, own quota, in cores)


def node_cpu(state: NodeState) -> NodeCpu:
    return NodeCpu(state.cpu.allocatable, state.cpu.node, state.offline_suppressed, state.evicting)


def _pod_quotas(p: PodSample) -> PodQuotas | None:
    """None: not online, or no container with a CPU limit (nothing to raise)."""
    o = online_pod(p)
    if o is None:
        return None
    limited = tuple(
        (i, c.cgroup, c.id, c.quota_us, c.quota_us / PERIOD_US)
        for i, c in enumerate(o.containers)
        if c.quota_us is not None
    )
    return PodQuotas(o.quota_us, limited) if limited else None


def _pod_base(entry: Touched | None, q: PodQuotas) -> int | None:
    """The pod quota raises add to. Never the spec's alone: kubelet's pod quota also holds the pod overhead
    and restartable sidecars, which the spec's sum of containers misses. After the first raise it is the
    pod quota recorded then, moved by as much as an in-place resize since moved its limited containers'
    own quotas; before it, the spec's, and the executor never lets that first raise lower the pod's quota
    (the recorder reads the real one for the passes after)."""
    if entry is None or QUOTA_BURST not in entry.parts:
        return q.own_us
    if entry.quota_us is None or not entry.period_us:
        return None  # an unlimited pod stays unlimited
    base = entry.quota_us * PERIOD_US // entry.period_us
    for _, cg, _, own, _ in q.containers:
        was = entry.containers.get(cg)
        if was is not None:
            base += own - was * PERIOD_US // entry.container_periods.get(cg, entry.period_us)
    return base


class QuotaBurst:
    name = "quota_burst"
    parts = PARTS

    def __init__(self, config: QuotaBurstConfig) -> None:
        self.config = config
        # on, it decides on each online container's throttling each second
        self.reads = PassNeeds(online_pods=True, containers=True) if config.enabled else NOTHING_MORE
        self._specs: SpecCache[PodQuotas | None] = SpecCache(_pod_quotas)
        self._asked: dict[str, SetCpuQuota] = {}  # cgroup -> last pass's action, reused while it asks the same

    def _inputs(self, state: NodeState, memo: QuotaMemo) -> tuple[list[CpuRow], dict[str, tuple[PodSample, PodQuotas]]]:
        rows: list[CpuRow] = []
        pods: dict[str, tuple[PodSample, PodQuotas]] = {}
        held = memo.quotas
        for p, q in self._specs.each(state.online):
            if q is None:
                continue
            samples, pod_cg = p.containers, p.cgroup
            for i, cg, _, own, _ in q.containers:
                s = samples[i]
                rows.append((cg, pod_cg, own, held.get(cg, own), PERIOD_US, s.cpu_throttled_ratio, s.cpu_cores))
            pods[pod_cg] = (p, q)
        return rows, pods

    def _quota(self, asked: dict[str, SetCpuQuota], cgroup: str, quota: int, uid: str) -> SetCpuQuota:
        a = self._asked.get(cgroup)
        if a is None or a.quota_us != quota or a.uid != uid:
            a = SetCpuQuota(cgroup, quota, PERIOD_US, "quota_burst", uid)
        asked[cgroup] = a
        return a

    def plan(self, state: NodeState, recorded: Recorded) -> Plan:
        memo = recorded.memo if isinstance(recorded.memo, QuotaMemo) else QuotaMemo()
        report_pods: dict[str, Any] = {}
        if not self.config.enabled:
            restores = [Restore(uid, PARTS) for uid, e in recorded.entries.items() if QUOTA_BURST in e.parts]
            return Plan(tuple(restores), QuotaMemo(), QuotaBurstReport(False, None, None, report_pods))
        rows, pods = self._inputs(state, memo)
        entries = recorded.entries
        own_pod = {cg: _pod_base(entries.get(p.uid), q) for cg, (p, q) in pods.items()}
        qp = plan_quota_burst(self.config, node_cpu(state), rows, memo.quiet, own_pod, recorded.now)
        decided, threshold = qp.containers, self.config.throttled_ratio
        actions: list[Action] = []
        asked: dict[str, SetCpuQuota] = {}
        quotas: dict[str, int] = {}
        raised_uids: set[str] = set()
        written: list[tuple[str, str]] = []  # pods whose quotas are asked for: raised, or given back
        for pod_cg, (p, q) in pods.items():
            uid = p.uid
            raised = False
            for _, cg, _, own, _ in q.containers:
                quota = decided[cg].quota_us
                if quota != own:
                    raised = True
                    quotas[cg] = quota
            if raised:
                raised_uids.add(uid)
            # raised before, not any more, still online and limited: the containers' own quotas from the current
            # spec (a resize since the raise wins over what was recorded), the pod's from its record
            # (`_pod_base`), and the Restore clears the record once they hold
            held = entries.get(uid)
            write = raised or (held is not None and QUOTA_BURST in held.parts)
            if write:
                written.append((pod_cg, uid))
            pod_report: dict[str, Any] | None = None
            samples = p.containers
            for i, cg, cid, _, own_cores in q.containers:
                d = decided[cg]
                ratio = samples[i].cpu_throttled_ratio
                if write:
                    actions.append(self._quota(asked, cg, d.quota_us, uid))
                elif (ratio or 0.0) < threshold:
                    continue  # reported: pods with a raise or a give-back, and throttled containers
                if pod_report is None:
                    pod_report = {"quota_cores": cores(qp.pods.get(pod_cg)), "containers": {}}
                    report_pods[uid] = pod_report
                pod_report["containers"][cid] = {
                    "state": d.action,
                    "reason": d.reason,
                    "quota_cores": d.quota_us / PERIOD_US,
                    "own_quota_cores": own_cores,
                    "throttled_ratio": ratio,
                }
        for pod_cg, uid in sorted(written):  # after its containers: the executor orders the writes anyway
            pod_quota = qp.pods.get(pod_cg)
            if pod_quota is not None:
                actions.append(self._quota(asked, pod_cg, pod_quota, uid))
        for uid, entry in entries.items():
            if QUOTA_BURST in entry.parts and uid not in raised_uids:
                actions.append(Restore(uid, PARTS))  # quiet, reset, no longer online, limited or there
        self._asked = asked
        report = QuotaBurstReport(self.config.enabled, qp.node, round(qp.headroom_cores, 3), report_pods)
        return Plan(tuple(actions), QuotaMemo(quotas, qp.quiet), report)


def _build(config: AgentConfig, facts: Facts) -> QuotaBurst:
    """Always active: it plans its restores when off."""
    return QuotaBurst(config.qos.quota_burst)


register(QuotaBurst.name, _build, order=70, report_defaults={"quota_burst": {}})
