"""Dynamic quota burst (koordlet's cfsQuotaBurst): raise a throttled online container's CFS quota while the
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
from typing import Literal

from agent.config import QuotaBurstConfig

MIN_QUOTA_US = 1000
COOLING_FRACTION = 0.9  # of the safe level: above it quota stops growing (koordlet's cooling band)
FITS_OWN_QUOTA = 0.9  # usage under this share of its own quota: the container no longer needs more

NodeBurstState = Literal["idle", "cooling", "busy", "blocked"]
Action = Literal["raise", "hold", "restore", "reset"]


@dataclass(frozen=True, slots=True)
class NodeCpu:
    """The node's CPU as the state record holds it for this pass."""

    cpus: float  # CPUs the node can give (allocatable)
    busy_cores: float | None  # node CPU busy now, every pod and the system; None: no rate yet (not idle)
    offline_suppressed: bool  # enforcement is holding offline pods below what they want
    evicting: bool


@dataclass(frozen=True, slots=True)
class ContainerCpu:
    """One online container with a CPU limit."""

    cgroup: str
    pod: str  # its pod's cgroup
    own_quota_us: int  # recorded before any write: the quota its limit gives it
    quota_us: int  # what it holds now
    period_us: int
    throttled_ratio: float | None  # throttled periods / periods over the last interval; None: no rate yet
    usage_cores: float | None


@dataclass(frozen=True, slots=True)
class QuietSince:
    """Carried between passes per container: when it last became quiet (None: not quiet)."""

    at: float | None = None


@dataclass(slots=True)
class QuotaDecision:
    """Not frozen: a pass builds one per online container, and frozen ones cost three times as much to build.
    Nothing changes one after it is made."""

    quota_us: int
    action: Action
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

#: ContainerCpu's fields in its order, as a plain tuple: what a caller planning hundreds of containers a
#: second passes (`plan_quota_burst_rows`), without building an object per container and pass.
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
    containers: Sequence[ContainerCpu],
    quiet: Mapping[str, QuietSince],
    pod_own_quotas_us: Mapping[str, int | None],
    now: float,
) -> QuotaBurstPlan:
    """Every container's quota for this pass, and its pod's (own quota plus its containers' raises).

    The most throttled containers are served first when the headroom does not reach everyone."""
    rows = [(c.cgroup, c.pod, c.own_quota_us, c.quota_us, c.period_us, c.throttled_ratio, c.usage_cores)
            for c in containers]  # fmt: skip
    return plan_quota_burst_rows(cfg, node, rows, quiet, pod_own_quotas_us, now)


def plan_quota_burst_rows(
    cfg: QuotaBurstConfig,
    node: NodeCpu,
    rows: Sequence[CpuRow],
    quiet: Mapping[str, QuietSince],
    pod_own_quotas_us: Mapping[str, int | None],
    now: float,
) -> QuotaBurstPlan:
    """`plan_quota_burst` over rows. Only a raise takes headroom, and only a container throttled at or above
    the threshold on an idle node can be raised: those alone are decided in order of throttling (most
    first); every other decision does not depend on the order. A container's quiet record is carried over
    as the same object while it holds."""
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
