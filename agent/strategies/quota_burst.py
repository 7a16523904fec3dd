"""The `quota_burst` strategy (koordlet's cfsQuotaBurst): a throttled online container's CFS quota raised
step by step while the node is idle, given back at once when the node is busy, offline pods are being
suppressed or the node is evicting (the decisions are agent/qos/quota_burst.py; the facts come from the
pass's NodeState). What a container holds is what this strategy asked for last (its memo), its own quota is
what its current spec gives. A pod with a raise gets its pod and container quotas written together (the
executor orders them as v1 accepts); a pod with none left gets its recorded own quotas back (`Restore`).

Per pass the cost is the decisions: the own quotas a pod's spec gives are kept between passes (SpecCache in
agent/strategies/online.py), the containers go to the planner as rows, and a container's action is last
pass's object while it asks for the same quota (a raised pod is asked for every pass).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.actions import Action, Part, Plan, Recorded, Restore, SetCpuQuota
from agent.config import QuotaBurstConfig
from agent.ledger import Touched
from agent.node_state import NodeState
from agent.qos.quota_burst import CpuRow, NodeCpu, QuietSince, plan_quota_burst_rows
from agent.snapshot import PodSample
from agent.strategies.online import PERIOD_US, SpecCache, cores, online_pod

PARTS: frozenset[Part] = frozenset({"quota_burst"})


@dataclass(frozen=True, slots=True)
class QuotaMemo:
    quotas: dict[str, int] = field(default_factory=dict)  # container cgroup -> quota asked for last pass
    quiet: dict[str, QuietSince] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PodQuotas:
    """One online pod's own quotas as its spec gives them (cached per pod: agent/strategies/online.py
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
    limited = tuple((i, c.cgroup, c.id, c.quota_us, c.quota_us / PERIOD_US)
                    for i, c in enumerate(o.containers) if c.quota_us is not None)  # fmt: skip
    return PodQuotas(o.quota_us, limited) if limited else None


def _pod_base(entry: Touched | None, q: PodQuotas) -> int | None:
    """The pod quota raises add to. Never the spec's alone: kubelet's pod quota also holds the pod overhead
    and restartable sidecars, which the spec's sum of containers misses. After the first raise it is the
    pod quota recorded then, moved by as much as an in-place resize since moved its limited containers'
    own quotas; before it, the spec's, and the executor never lets that first raise lower the pod's quota
    (the recorder reads the real one for the passes after)."""
    if entry is None or not entry.quota_burst:
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
        report: dict[str, Any] = {"enabled": self.config.enabled, "node_state": None, "headroom_cores": None,
                                  "pods": report_pods}  # fmt: skip
        if not self.config.enabled:
            restores = [Restore(uid, PARTS) for uid, e in recorded.entries.items() if e.quota_burst]
            return Plan(tuple(restores), QuotaMemo(), {"quota_burst": report})
        rows, pods = self._inputs(state, memo)
        entries = recorded.entries
        own_pod = {cg: _pod_base(entries.get(p.uid), q) for cg, (p, q) in pods.items()}
        qp = plan_quota_burst_rows(self.config, node_cpu(state), rows, memo.quiet, own_pod, recorded.now)
        report["node_state"], report["headroom_cores"] = qp.node, round(qp.headroom_cores, 3)
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
            write = raised or getattr(entries.get(uid), "quota_burst", False)
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
            if entry.quota_burst and uid not in raised_uids:
                actions.append(Restore(uid, PARTS))  # quiet, reset, no longer online, limited or there
        self._asked = asked
        return Plan(tuple(actions), QuotaMemo(quotas, qp.quiet), {"quota_burst": report})
