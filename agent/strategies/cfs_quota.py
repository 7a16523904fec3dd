"""The cfsQuota CPU policy as a strategy: this pass's offline budget (its growth capped from the memo), the
release of a quiet node (hysteresis in the memo), each offline pod's and container's CFS quota, and the
best-effort tier's cap. Released pods get their own quotas back (`Restore`), in the same safe-order batch
as the tier's uncap."""

from __future__ import annotations

from agent.actions import Action, Part, Plan, Recorded, Restore, SetCpuQuota
from agent.config import EnforcementConfig
from agent.node_state import NodeState
from agent.strategies import cpu_quota, reconcile
from agent.strategies.cpu_quota import CpuMemo


def tier_actions(tier: str, cap: int | None, recorded: Recorded, period: int) -> list[Action]:
    """Cap the tier at `cap`; or (None) lift a cap, at the period the tier had before (0: as it is)."""
    if cap is not None:
        return [SetCpuQuota(tier, cap, period, "quota")]
    return reconcile.uncap({tier: recorded.tiers.get(tier, 0)})


class CfsQuota:
    name = "cfs_quota"
    parts: frozenset[Part] = frozenset({"quota"})

    def __init__(self, config: EnforcementConfig, besteffort_tier: str) -> None:
        self.config, self.tier = config, besteffort_tier

    def plan(self, state: NodeState, recorded: Recorded) -> Plan:
        c = self.config
        memo: CpuMemo = recorded.memo or CpuMemo()
        step = cpu_quota.budget_and_release(state, memo, c)
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
            report = _report(budget, True, {}, 0.0, None)
            return Plan(tuple(actions), CpuMemo(budget, True, report, loads), report)
        quotas, besteffort = cpu_quota.split(budget, offline, c)
        for p in offline:
            (pod, quota, period), *containers = cpu_quota.pod_targets(quotas[p.uid], recorded.entries[p.uid], c)
            below = {path: (q, per) for path, q, per in containers}  # within the tolerance neither is written
            actions.append(SetCpuQuota(pod, quota, period, "quota", p.uid, c.cpu_change_threshold, below))
        cap = cpu_quota.tier_cap(state, besteffort, c, quotas)
        actions += tier_actions(self.tier, cap, recorded, c.cpu_period_us)
        report = _report(budget, False, quotas, besteffort, None if cap is None else cap / c.cpu_period_us)
        return Plan(tuple(actions), CpuMemo(budget, False, report, loads), report)


def _report(budget: float, released: bool, quotas: dict[str, float], besteffort: float,
            tier_cap: float | None) -> dict[str, object]:  # fmt: skip
    return {
        "offline_cpu_budget_cores": budget,
        "offline_cpu_released": released,
        "offline_cpu_quota_cores": quotas,
        "besteffort_cpu_cores": besteffort,
        "besteffort_tier_cap_cores": tier_cap,
    }
