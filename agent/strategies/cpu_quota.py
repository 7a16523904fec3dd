"""The cfsQuota policy's decisions: the offline CPU budget of the pass, its split among offline pods, the
quota each pod's cgroups get (from what the ledger recorded of them), and the best-effort tier's cap.

    budget = allocatable × cpu_suppress_threshold − online usage − system usage

floored at `cpu_min_offline_cores`, raised by at most `cpu_growth_per_interval` of the node per pass (see
agent/cpu_budget.py). A CPU rate not known yet gives no budget: the caller keeps what the cgroups hold.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.actions import SetCpuQuota, cpus
from agent.config import EnforcementConfig
from agent.cpu_budget import OfflineCpu, offline_budget, split_budget
from agent.ledger import Touched
from agent.node_state import NodeState
from agent.snapshot import PodSample
from agent.strategies import release
from cgroup import CpuSettings

log = logging.getLogger("agent.enforcer")

MIN_QUOTA_US = 1000  # the kernel's smallest CFS quota


@dataclass(frozen=True, slots=True)
class CpuMemo:
    """What a CPU policy (cfsQuota, cpuset) remembers between passes: the budget (its growth is capped from
    it), whether offline pods are released, and the report of the last pass that had a budget."""

    budget: float | None = None
    released: bool = False
    report: Mapping[str, Any] = field(default_factory=dict)
    loads: tuple[float, ...] = ()  # online + system CPU / allocatable of the latest passes, newest last


def budget_and_release(
    state: NodeState, memo: CpuMemo, config: EnforcementConfig
) -> tuple[float, bool, tuple[float, ...]] | None:
    """This pass's budget, whether offline pods are released (decided on the last
    `cpu_release_confirm_passes` loads, see agent/strategies/release.py) and the loads to remember; None
    while the CPU rate is unknown (the first pass after a start: unknown is not idle, so nothing is
    released or re-budgeted)."""
    total = budget(state, memo.budget, config)
    if total is None:
        return None
    load = state.cpu.online_and_system_ratio()
    load = 1.0 if load is None else load  # no allocatable: never quiet
    loads = (*memo.loads, load)[-config.cpu_release_confirm_passes :]
    released = release.plan(loads, memo.released, config.cpu_release_below, config.cpu_release_confirm_passes)
    if released != memo.released and config.cpu_release_below > 0:
        what = "released" if released else "suppressed again"
        log.info("online and system CPU at %.0f%% of allocatable: offline pods %s", 100 * load, what)
    return total, released, loads


def budget(state: NodeState, previous: float | None, config: EnforcementConfig) -> float | None:
    """Cores the offline pods may use together this pass; None while the node's CPU rate is unknown."""
    cpu = state.cpu
    if cpu.system is None:
        return None
    return offline_budget(
        cpu.allocatable, config.cpu_suppress_threshold, cpu.online, cpu.system, config.cpu_min_offline_cores,
        previous, config.cpu_growth_per_interval * cpu.allocatable,
    )  # fmt: skip


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


def split(total: float, offline: Sequence[PodSample], config: EnforcementConfig) -> tuple[dict[str, float], float]:
    """Cores per offline pod (by CPU request, never above its limit) and the best-effort pods' slice."""
    return split_budget(total, [cpu_demand(p) for p in offline], config.besteffort_share)


def pod_targets(cores: float, entry: Touched, config: EnforcementConfig) -> list[tuple[str, int | None, int]]:
    """(cgroup, quota, period) for the pod first, then each recorded container: v1 refuses a parent quota
    below a child's, so a container keeps its own quota when that is tighter, else takes the pod's."""
    period = config.cpu_period_us
    new = max(MIN_QUOTA_US, int(cores * period))
    targets: list[tuple[str, int | None, int]] = [(entry.cgroup, new, period)]
    for path, own in entry.containers.items():
        own_period = entry.container_periods.get(path, entry.period_us)
        targets.append((path, own, own_period) if cpus(own, own_period) <= cpus(new, period) else (path, new, period))
    return targets


def tier_cap(
    state: NodeState,
    besteffort_cores: float | None,
    config: EnforcementConfig,
    quotas: Mapping[str, float] | None = None,
) -> int | None:
    """The best-effort tier's quota (at `cpu_period_us`) while only offline pods live there; None (no quota,
    as kubelet leaves a tier) when an online pod is in it, no pod is, or there is no best-effort slice.

    The cap is the best-effort slice plus the cores of every pod in the tier that requests CPU: batch pods
    live in the best-effort tier (kubelet sees no cpu request) but get their share by batch-cpu request, so
    a cap of the best-effort slice alone would squeeze them below what the budget gives them."""
    in_tier = [p for p in state.snapshot.pods.values() if p.qos == "besteffort"]
    if besteffort_cores is None or not in_tier or any(p.meta.pod_class != "offline" for p in in_tier):
        return None
    quotas = quotas or {}
    requesting = sum(quotas.get(p.uid, 0.0) for p in in_tier if cpu_demand(p).request_cores > 0)
    cores = max(config.cpu_min_offline_cores, besteffort_cores) + requesting
    return max(MIN_QUOTA_US, int(cores * config.cpu_period_us))


def never_lower(a: SetCpuQuota, cur: CpuSettings) -> SetCpuQuota:
    """A raise that asks for less than the cgroup holds keeps what it holds (unlimited stays unlimited)."""
    if a.quota_us is None or cpus(a.quota_us, a.period_us) >= cpus(cur.quota_us, cur.period_us):
        return a
    return dataclasses.replace(a, quota_us=cur.quota_us, period_us=cur.period_us if cur.quota_us is not None else 0)
