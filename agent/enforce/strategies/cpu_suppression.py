"""CPU suppression of offline pods, whole: the budget of a pass, its split among offline pods, the release
of a quiet node, and the two CPU policies that hold offline pods to the budget (`CfsQuota`: CFS quotas of
pods and containers and the best-effort tier's cap; `Cpuset`: a cpuset of ceil(budget) CPUs). Pure
functions and strategies: no I/O.

The budget:

    budget = allocatable × cpu_suppress_threshold − online usage − system usage

floored at `cpu_min_offline_cores` so offline work never stalls completely, and raised by at most
`cpu_growth_per_interval` of the node per pass so quotas do not oscillate (a fall is applied at once). A
strategy earlier in the pass may set a lower ceiling (`NodeState.offline_cpu_cap`: the run-queue protection,
run_queue_guard.py); while it does, offline pods are not released. A CPU
rate not known yet gives no budget: the cgroups keep what they hold. The split is in proportion to the
offline pods' CPU requests; best-effort offline pods (no request) share `besteffort_share` of it equally. A
pod never gets more than its own limit. Leftover from capped pods is not redistributed: the budget is an
upper bound, not a promise.

Release: while online + system CPU is below `cpu_release_below` of allocatable, offline pods run at their
own limits (a quiet node is not throttled for nothing); above it plus the hysteresis they are suppressed
again. The state switches only when the last `cpu_release_confirm_passes` passes all agree (issue 22): a
one-second spike neither cuts released pods to their quota nor releases suppressed ones, and a real rise is
answered on the second pass (within 2 s at the default 1-second interval). An unknown load (no rate yet)
never releases: the caller does not ask.

The cpuset policy confines offline pods to ceil(budget) CPUs of their parent's, highest numbers first and
away from the CPUs kubelet's CPU manager gave containers exclusively (both read into the NodeState before
the pass plans); the cfsQuota policy's quotas are written pod first, then containers, and released pods
get their own quotas back (`Restore`) in the same safe-order batch as the tier's uncap.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.config import AgentConfig
from agent.config_sections.enforcement import EnforcementConfig
from agent.enforce.actions import Action, Part, Plan, Recorded, Report, Restore, SetCpuQuota, SetCpuset, cpus
from agent.enforce.ledger import Touched
from agent.enforce.strategies.reconcile import uncap
from agent.enforce.strategies.registry import Facts, register
from agent.node_state import NodeState
from agent.snapshot import PodMeta, PodSample
from cgroup import CpuSettings, parent_cgroup
from cgroup.files import format_cpuset


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


@dataclass(frozen=True, slots=True)
class SplitShape:
    """The offline pods' demands as the split sorts them: what does not change while the offline pods (and
    their requests and limits) do not, so a pass with the same pods only multiplies its budget out."""

    requesting: tuple[tuple[str, float], ...]  # (uid, request cores), in the pods' order
    besteffort: tuple[str, ...]
    total_request: float
    limits: tuple[tuple[str, float], ...]  # (uid, limit cores) of the pods that have one, in the pods' order


def split_shape(pods: Sequence[OfflineCpu]) -> SplitShape:
    requesting = tuple((p.uid, p.request_cores) for p in pods if p.request_cores > 0)
    return SplitShape(
        requesting,
        tuple(p.uid for p in pods if p.request_cores <= 0),
        sum(request for _, request in requesting),
        tuple((p.uid, p.limit_cores) for p in pods if p.limit_cores is not None),
    )


def split_budget(budget: float, pods: Sequence[OfflineCpu], besteffort_share: float) -> tuple[dict[str, float], float]:
    """Per-pod cores and the best-effort pods' combined slice."""
    return split_shaped(budget, split_shape(pods), besteffort_share)


def split_shaped(budget: float, shape: SplitShape, besteffort_share: float) -> tuple[dict[str, float], float]:
    """`split_budget` of pods sorted once (`split_shape`)."""
    besteffort, requesting = shape.besteffort, shape.requesting
    if besteffort and requesting:
        be_total = budget * besteffort_share
    elif besteffort:
        be_total = budget
    else:
        be_total = 0.0
    rest, total_request = budget - be_total, shape.total_request
    quotas = {uid: rest * request / total_request for uid, request in requesting}
    if besteffort:
        each = be_total / len(besteffort)
        for uid in besteffort:
            quotas[uid] = each
    for uid, limit in shape.limits:
        quotas[uid] = min(quotas[uid], limit)
    return quotas, be_total


def pick_cpuset(budget: float, available: Iterable[int], exclusive: frozenset[int]) -> frozenset[int]:
    """ceil(budget) CPUs (at least one) from the shareable ones, highest numbers first: kubelet's static
    policy hands out exclusive CPUs from the lowest numbers, so offline work keeps away from them."""
    shareable = sorted(set(available) - exclusive, reverse=True) or sorted(set(available), reverse=True)
    n = max(1, min(len(shareable), math.ceil(budget - 1e-9)))
    return frozenset(shareable[:n])


RELEASE_HYSTERESIS = 0.1  # released pods are suppressed again above cpu_release_below + this


def release(recent: Sequence[float], released: bool, below: float, confirm: int = 1) -> bool:
    """Whether offline pods are released after this pass, from the loads of the latest passes (newest
    last); `below` <= 0 disables release. Fewer than `confirm` loads keep the state as it is."""
    if below <= 0:
        return False
    last = recent[-confirm:]
    if len(last) < confirm:
        return released
    if not released and all(load < below for load in last):
        return True
    if released and all(load > below + RELEASE_HYSTERESIS for load in last):
        return False
    return released


log = logging.getLogger(__name__)

MIN_QUOTA_US = 1000  # the kernel's smallest CFS quota


@dataclass(frozen=True, slots=True)
class CpuReport(Report):
    """A CPU policy's pass: the budget (cores), whether offline pods are released, and what holds them:
    the cfsQuota policy's per-pod quotas (cores), best-effort slice and tier cap, or the cpuset policy's
    CPUs. `policy` None: no pass had a budget yet (nothing reported)."""

    policy: Literal["cfsQuota", "cpuset"] | None = None
    budget_cores: float | None = None
    released: bool = False
    quota_cores: Mapping[str, float] = field(default_factory=dict)
    besteffort_cores: float = 0.0
    tier_cap_cores: float | None = None
    cpuset: str | None = None

    def fields(self) -> dict[str, Any]:
        head = {"offline_cpu_budget_cores": self.budget_cores, "offline_cpu_released": self.released}
        if self.policy == "cpuset":
            return {**head, "offline_cpuset": self.cpuset}
        if self.policy == "cfsQuota":
            return {
                **head,
                "offline_cpu_quota_cores": self.quota_cores,
                "besteffort_cpu_cores": self.besteffort_cores,
                "besteffort_tier_cap_cores": self.tier_cap_cores,
            }
        return {}


@dataclass(frozen=True, slots=True)
class CpuMemo:
    """What a CPU policy (cfsQuota, cpuset) remembers between passes: the budget (its growth is capped from
    it), whether offline pods are released, and the report of the last pass that had a budget."""

    budget: float | None = None
    released: bool = False
    report: CpuReport = field(default_factory=lambda: CpuReport())
    loads: tuple[float, ...] = ()  # online + system CPU / allocatable of the latest passes, newest last


def budget_and_release(
    state: NodeState, memo: CpuMemo, config: EnforcementConfig
) -> tuple[float, bool, tuple[float, ...]] | None:
    """This pass's budget, whether offline pods are released (decided on the last
    `cpu_release_confirm_passes` loads, see `release`) and the loads to remember; None
    while the CPU rate is unknown (the first pass after a start: unknown is not idle, so nothing is
    released or re-budgeted)."""
    total = budget(state, memo.budget, config)
    if total is None:
        return None
    load = state.cpu.online_and_system_ratio()
    load = 1.0 if load is None else load  # no allocatable: never quiet
    loads = (*memo.loads, load)[-config.cpu_release_confirm_passes :]
    released = release(loads, memo.released, config.cpu_release_below, config.cpu_release_confirm_passes)
    if state.offline_cpu_cap is not None:
        released = False  # a strategy holds batch below the budget: a quiet node's release would undo it
    if released != memo.released and config.cpu_release_below > 0:
        what = "released" if released else "suppressed again"
        log.info("online and system CPU at %.0f%% of allocatable: offline pods %s", 100 * load, what)
    return total, released, loads


def budget(state: NodeState, previous: float | None, config: EnforcementConfig) -> float | None:
    """Cores the offline pods may use together this pass; None while the node's CPU rate is unknown."""
    cpu = state.cpu
    if cpu.system is None:
        return None
    total = offline_budget(
        cpu.allocatable,
        config.cpu_suppress_threshold,
        cpu.online,
        cpu.system,
        config.cpu_min_offline_cores,
        previous,
        config.cpu_growth_per_interval * cpu.allocatable,
    )
    cap = state.offline_cpu_cap
    return total if cap is None else max(config.cpu_min_offline_cores, min(total, cap))


def cpu_demand(pod: PodSample) -> OfflineCpu:
    """The pod's CPU request and limit (cores) for the split: its batch-cpu values when it has any
    (kubelet's cpu values are then 0 and none: it would count as best-effort and be held to no limit),
    else its cpu values."""
    batch, meta = pod.meta.batch, pod.meta
    if batch is None or not batch.has_cpu:
        return OfflineCpu(pod.uid, meta.cpu_request_cores, meta.cpu_limit_cores)
    limit = batch.cpu_limit_milli  # kubelet adds the overhead to the pod cgroup: to its request as well
    request = batch.cpu_request_milli + batch.overhead_milli_cpu
    return OfflineCpu(pod.uid, request / 1000, None if limit is None else limit / 1000)


class Demands:
    """`cpu_demand` and `split_shape` of the offline pods, kept between passes: a pod's demand is computed
    again only when its PodMeta is another object (the pod source keeps one per resourceVersion), the shape
    only when the offline pods or one of their metas changed. Every pass still splits its own budget."""

    __slots__ = ("_demand", "_metas", "_shape")

    def __init__(self) -> None:
        self._demand: dict[str, tuple[PodMeta, OfflineCpu]] = {}
        self._metas: tuple[PodMeta, ...] = ()
        self._shape = split_shape(())

    def of(self, pod: PodSample) -> OfflineCpu:
        meta = pod.meta
        held = self._demand.get(meta.uid)
        if held is not None and held[0] is meta:
            return held[1]
        demand = cpu_demand(pod)
        self._demand[meta.uid] = (meta, demand)
        return demand

    def split(
        self, total: float, offline: Sequence[PodSample], besteffort_share: float
    ) -> tuple[dict[str, float], float]:
        """Cores per offline pod (by CPU request, never above its limit) and the best-effort pods' slice."""
        return split_shaped(total, self.shape(offline), besteffort_share)

    def shape(self, offline: Sequence[PodSample]) -> SplitShape:
        """The split's shape of these pods (in this order)."""
        metas = tuple([p.meta for p in offline])
        if len(metas) != len(self._metas) or not all(map(operator.is_, metas, self._metas)):
            self._shape, self._metas = split_shape([self.of(p) for p in offline]), metas
            if len(self._demand) > 2 * len(metas) + 64:  # pods that left: forgotten, a bound rather than a sweep
                kept = {m.uid for m in metas}
                self._demand = {uid: d for uid, d in self._demand.items() if uid in kept}
        return self._shape


def pod_targets(
    cores: float, entry: Touched, config: EnforcementConfig
) -> tuple[int, int, dict[str, tuple[int | None, int]]]:
    """The pod's (quota, period) and each recorded container's: v1 refuses a parent quota below a child's, so
    a container keeps its own quota when that is tighter, else takes the pod's."""
    period = config.cpu_period_us
    new = max(MIN_QUOTA_US, int(cores * period))
    allowed, periods, default = cpus(new, period), entry.container_periods, entry.period_us
    below: dict[str, tuple[int | None, int]] = {}
    pod = (new, period)
    for path, own in entry.containers.items():
        if own is None:  # unlimited is never tighter (the common container: kubelet sets the pod's limit)
            below[path] = pod
            continue
        own_period = periods.get(path, default)
        # `cpus` inline (a pass does this for every container of every offline pod)
        below[path] = (own, own_period) if own_period > 0 and own / own_period <= allowed else pod
    return new, period, below


def tier_cap(
    state: NodeState,
    besteffort_cores: float | None,
    config: EnforcementConfig,
    quotas: Mapping[str, float] | None = None,
    demand: Callable[[PodSample], OfflineCpu] = cpu_demand,
) -> int | None:
    """The best-effort tier's quota (at `cpu_period_us`) while only offline pods live there; None (no quota,
    as kubelet leaves a tier) when an online pod is in it, no pod is, or there is no best-effort slice.

    The cap is the best-effort slice plus the cores of every pod in the tier that requests CPU: batch pods
    live in the best-effort tier (kubelet sees no cpu request) but get their share by batch-cpu request, so
    a cap of the best-effort slice alone would squeeze them below what the budget gives them. `demand`: the
    pods' CPU demands (`cpu_demand`, or the strategy's kept ones)."""
    in_tier = [p for p in state.snapshot.pods.values() if p.qos == "besteffort"]
    if besteffort_cores is None or not in_tier or any(p.meta.pod_class != "offline" for p in in_tier):
        return None
    quotas = quotas or {}
    requesting = sum(quotas.get(p.uid, 0.0) for p in in_tier if demand(p).request_cores > 0)
    cores = max(config.cpu_min_offline_cores, besteffort_cores) + requesting
    return max(MIN_QUOTA_US, int(cores * config.cpu_period_us))


def never_lower(a: SetCpuQuota, cur: CpuSettings) -> SetCpuQuota:
    """A raise that asks for less than the cgroup holds keeps what it holds (unlimited stays unlimited)."""
    if a.quota_us is None or cpus(a.quota_us, a.period_us) >= cpus(cur.quota_us, cur.period_us):
        return a
    return dataclasses.replace(a, quota_us=cur.quota_us, period_us=cur.period_us if cur.quota_us is not None else 0)


def tier_actions(tier: str, cap: int | None, recorded: Recorded, period: int) -> list[Action]:
    """Cap the tier at `cap`; or (None) lift a cap, at the period the tier had before (0: as it is)."""
    if cap is not None:
        return [SetCpuQuota(tier, cap, period, "quota")]
    return uncap({tier: recorded.tiers.get(tier, 0)})


class CfsQuota:
    name = "cfs_quota"
    parts: frozenset[Part] = frozenset({"quota"})

    def __init__(self, config: EnforcementConfig, besteffort_tier: str) -> None:
        self.config, self.tier = config, besteffort_tier
        self.demands = Demands()  # what the split needs of the pods, kept while they do not change

    def plan(self, state: NodeState, recorded: Recorded) -> Plan:
        c = self.config
        memo: CpuMemo = recorded.memo or CpuMemo()
        step = budget_and_release(state, memo, c)
        if step is None:  # the quotas the cgroups hold (a previous run's, or none) stay one more interval
            return Plan((), memo, memo.report)
        budget, released, loads = step
        offline = [p for p in state.offline if p.uid in recorded.entries]
        actions: list[Action] = []
        if released:
            actions += [
                Restore(p.uid, frozenset({"quota"})) for p in offline if "quota" in recorded.entries[p.uid].parts
            ]
            actions += tier_actions(self.tier, None, recorded, c.cpu_period_us)
            report = CpuReport("cfsQuota", budget, True, {}, 0.0, None)
            return Plan(tuple(actions), CpuMemo(budget, True, report, loads), report)
        quotas, besteffort = self.demands.split(budget, offline, c.besteffort_share)
        entries, tolerance = recorded.entries, c.cpu_change_threshold
        for p in offline:
            uid = p.meta.uid
            entry = entries[uid]
            quota, period, below = pod_targets(quotas[uid], entry, c)
            # within the tolerance neither the pod's nor its containers' quota is written
            actions.append(SetCpuQuota(entry.cgroup, quota, period, "quota", uid, tolerance, below))
        cap = tier_cap(state, besteffort, c, quotas, self.demands.of)
        actions += tier_actions(self.tier, cap, recorded, c.cpu_period_us)
        report = CpuReport(
            "cfsQuota", budget, False, quotas, besteffort, None if cap is None else cap / c.cpu_period_us
        )
        return Plan(tuple(actions), CpuMemo(budget, False, report, loads), report)


class Cpuset:
    name = "cpuset"
    parts: frozenset[Part] = frozenset({"cpuset"})

    def __init__(self, config: EnforcementConfig) -> None:
        self.config = config

    def plan(self, state: NodeState, recorded: Recorded) -> Plan:
        memo: CpuMemo = recorded.memo or CpuMemo()
        step = budget_and_release(state, memo, self.config)
        if step is None:
            return Plan((), memo, memo.report)
        budget, released, loads = step
        offline = [p for p in state.offline if p.uid in recorded.entries]
        actions: list[Action] = []
        chosen: frozenset[int] | None = None
        if released:
            actions += [
                Restore(p.uid, frozenset({"cpuset"})) for p in offline if "cpuset" in recorded.entries[p.uid].parts
            ]
        else:
            for p in offline:
                # the parent's effective CPUs: on v2 its cpuset.cpus is usually empty (inherit)
                available = state.parent_cpus.get(parent_cgroup(p.cgroup))
                if not available:
                    continue
                cpus = chosen = pick_cpuset(budget, available, state.exclusive_cpus)
                containers = dict.fromkeys(recorded.entries[p.uid].containers, cpus)
                actions.append(SetCpuset(p.cgroup, cpus, "cpuset", p.uid, containers))
        report = CpuReport("cpuset", budget, released, cpuset=None if chosen is None else format_cpuset(chosen))
        return Plan(tuple(actions), CpuMemo(budget, released, report, loads), report)


def _cfs_quota(config: AgentConfig, facts: Facts) -> CfsQuota | None:
    e = config.enforcement
    return CfsQuota(e, facts.besteffort_tier) if e.cpu_policy == "cfsQuota" else None


def _cpuset(config: AgentConfig, facts: Facts) -> Cpuset | None:
    return Cpuset(config.enforcement) if config.enforcement.cpu_policy == "cpuset" else None


#: what either CPU policy reports while neither is active
_BUDGET_DEFAULTS = {"offline_cpu_budget_cores": None, "offline_cpu_released": False}
_QUOTA_DEFAULTS = {"offline_cpu_quota_cores": {}, "besteffort_cpu_cores": 0.0, "besteffort_tier_cap_cores": None}
register(CfsQuota.name, _cfs_quota, order=20, report_defaults={**_BUDGET_DEFAULTS, **_QUOTA_DEFAULTS})
register(Cpuset.name, _cpuset, order=30, report_defaults={**_BUDGET_DEFAULTS, "offline_cpuset": None})
