"""The cpuset CPU policy as a strategy: offline pods confined to ceil(budget) CPUs of their parent's,
highest numbers first and away from the CPUs kubelet's CPU manager gave containers exclusively (both read
into the NodeState before the pass plans); released to their own cpusets on a quiet node. The budget and
the release are the cfsQuota policy's (agent/strategies/cpu_quota.py)."""

from __future__ import annotations

from agent.actions import Action, Part, Plan, Recorded, Restore, SetCpuset
from agent.config import EnforcementConfig
from agent.cpu_budget import pick_cpuset
from agent.node_state import NodeState
from agent.strategies import cpu_quota
from agent.strategies.cpu_quota import CpuMemo
from cgroup import parent_cgroup
from cgroup.files import format_cpuset


class Cpuset:
    name = "cpuset"
    parts: frozenset[Part] = frozenset({"cpuset"})

    def __init__(self, config: EnforcementConfig) -> None:
        self.config = config

    def plan(self, state: NodeState, recorded: Recorded) -> Plan:
        memo: CpuMemo = recorded.memo or CpuMemo()
        step = cpu_quota.budget_and_release(state, memo, self.config)
        if step is None:
            return Plan((), memo, memo.report)
        budget, released, loads = step
        offline = [p for p in state.offline if p.uid in recorded.entries]
        actions: list[Action] = []
        chosen: frozenset[int] | None = None
        if released:
            actions += [Restore(p.uid, frozenset({"cpuset"})) for p in offline
                        if "cpuset" in recorded.entries[p.uid].parts]  # fmt: skip
        else:
            for p in offline:
                # the parent's effective CPUs: on v2 its cpuset.cpus is usually empty (inherit)
                available = state.parent_cpus.get(parent_cgroup(p.cgroup))
                if not available:
                    continue
                cpus = chosen = pick_cpuset(budget, available, state.exclusive_cpus)
                containers = dict.fromkeys(recorded.entries[p.uid].containers, cpus)
                actions.append(SetCpuset(p.cgroup, cpus, "cpuset", p.uid, containers))
        report = {"offline_cpu_budget_cores": budget, "offline_cpu_released": released,
                  "offline_cpuset": None if chosen is None else format_cpuset(chosen)}  # fmt: skip
        return Plan(tuple(actions), CpuMemo(budget, released, report, loads), report)
