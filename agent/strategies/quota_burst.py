"""The `quota_burst` strategy (koordlet's cfsQuotaBurst): a throttled online container's CFS quota raised
step by step while the node is idle, given back at once when the node is busy, offline pods are being
suppressed or the node is evicting (the decisions are agent/qos/quota_burst.py; the facts come from the
pass's NodeState). What a container holds is what this strategy asked for last (its memo), its own quota is
what its current spec gives. A pod with a raise gets its pod and container quotas written together (the
executor orders them as v1 accepts); a pod with none left gets its recorded own quotas back (`Restore`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.actions import Action, Part, Plan, Recorded, Restore, SetCpuQuota
from agent.config import QuotaBurstConfig
from agent.node_state import NodeState
from agent.qos.quota_burst import ContainerCpu, NodeCpu, QuietSince, plan_quota_burst
from agent.strategies.online import PERIOD_US, OnlinePod, cores, online_pods

PARTS: frozenset[Part] = frozenset({"quota_burst"})


@dataclass(frozen=True, slots=True)
class QuotaMemo:
    quotas: dict[str, int] = field(default_factory=dict)  # container cgroup -> quota asked for last pass
    quiet: dict[str, QuietSince] = field(default_factory=dict)


def node_cpu(state: NodeState) -> NodeCpu:
    return NodeCpu(state.cpu.allocatable, state.cpu.node, state.offline_suppressed, state.evicting)


class QuotaBurst:
    name = "quota_burst"
    parts = PARTS

    def __init__(self, config: QuotaBurstConfig) -> None:
        self.config = config

    def _inputs(self, state: NodeState, memo: QuotaMemo) -> tuple[list[ContainerCpu], dict[str, OnlinePod]]:
        containers: list[ContainerCpu] = []
        pods: dict[str, OnlinePod] = {}
        for o in online_pods(state.online):
            samples = {c.cgroup: c for c in o.pod.containers}
            for c in o.containers:
                if c.quota_us is None:
                    continue
                s = samples[c.cgroup]
                held = memo.quotas.get(c.cgroup, c.quota_us)
                containers.append(ContainerCpu(c.cgroup, o.pod.cgroup, c.quota_us, held, PERIOD_US,
                                               s.cpu_throttled_ratio, s.cpu_cores))  # fmt: skip
                pods[o.pod.cgroup] = o
        return containers, pods

    def plan(self, state: NodeState, recorded: Recorded) -> Plan:
        memo = recorded.memo if isinstance(recorded.memo, QuotaMemo) else QuotaMemo()
        report: dict[str, Any] = {"enabled": self.config.enabled, "node_state": None, "headroom_cores": None,
                                  "pods": {}}  # fmt: skip
        if not self.config.enabled:
            restores = [Restore(uid, PARTS) for uid, e in recorded.entries.items() if e.quota_burst]
            return Plan(tuple(restores), QuotaMemo(), {"quota_burst": report})
        containers, pods = self._inputs(state, memo)
        own_pod = {cg: o.quota_us for cg, o in pods.items()}
        qp = plan_quota_burst(self.config, node_cpu(state), containers, memo.quiet, own_pod, recorded.now)
        report["node_state"], report["headroom_cores"] = qp.node, round(qp.headroom_cores, 3)
        actions: list[Action] = []
        ids = {x.cgroup: x.id for o in pods.values() for x in o.containers}
        raised = {c.pod for c in containers if qp.containers[c.cgroup].quota_us != c.own_quota_us}
        raised_uids = {pods[cg].pod.uid for cg in raised}
        # raised before, not any more, still online and limited: own quotas from the current spec (a resize since
        # the raise wins over what was recorded), and the Restore clears the record once they hold
        back = {cg for cg, o in pods.items() if cg not in raised and getattr(recorded.entries.get(o.pod.uid),
                                                                            "quota_burst", False)}  # fmt: skip
        for c in containers:
            d, uid = qp.containers[c.cgroup], pods[c.pod].pod.uid
            if c.pod in raised or c.pod in back:
                actions.append(SetCpuQuota(c.cgroup, d.quota_us, PERIOD_US, "quota_burst", uid))
            elif (c.throttled_ratio or 0.0) < self.config.throttled_ratio:
                continue  # reported: pods with a raise or a give-back, and throttled containers
            pod_report = report["pods"].setdefault(uid, {"quota_cores": cores(qp.pods.get(c.pod)), "containers": {}})
            pod_report["containers"][ids[c.cgroup]] = {
                "state": d.action,
                "reason": d.reason,
                "quota_cores": cores(d.quota_us),
                "own_quota_cores": cores(c.own_quota_us),
                "throttled_ratio": c.throttled_ratio,
            }
        for pod_cg in sorted(raised | back):  # after its containers: the executor orders the writes anyway
            quota = qp.pods.get(pod_cg)
            if quota is not None:
                actions.append(SetCpuQuota(pod_cg, quota, PERIOD_US, "quota_burst", pods[pod_cg].pod.uid))
        for uid, entry in recorded.entries.items():
            if entry.quota_burst and uid not in raised_uids:
                actions.append(Restore(uid, PARTS))  # quiet, reset, no longer online, limited or there
        quotas = {c.cgroup: qp.containers[c.cgroup].quota_us for c in containers
                  if qp.containers[c.cgroup].quota_us != c.own_quota_us}  # fmt: skip
        return Plan(tuple(actions), QuotaMemo(quotas, qp.quiet), {"quota_burst": report})
