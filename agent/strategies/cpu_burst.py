"""The `cpu_burst` strategy: CFS burst for online pods with a CPU limit, per container and pod (the
allowance is agent/qos/burst.py: node setting, Volcano's annotations, percent of the quota).

The burst is planned each pass from the quota the pod's *current* spec gives it: after a kubelet in-place
resize below a burst, the lower burst is planned at once (the executor writes a lowering burst before any
quota change of the pass; the kernel refuses a quota below the burst). What holds is re-checked every
`RECHECK_SECONDS`; in between only changed targets are asked for, so a pass reads no burst file it need not.
A pod that stops being online, opts out, loses its limit or goes away, and every pod when the feature is
off, gets its recorded bursts back (a `Restore` of the part).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.actions import Action, Part, Plan, Recorded, Restore, SetCpuBurst
from agent.config import CpuBurstConfig
from agent.node_state import NodeState
from agent.qos.burst import BurstInputs, plan_burst
from agent.snapshot import PodSample
from agent.strategies.online import online_pods
from contract.annotations import ENABLE_QUOTA_BURST

RECHECK_SECONDS = 30.0
PARTS: frozenset[Part] = frozenset({"burst"})


@dataclass(frozen=True, slots=True)
class BurstMemo:
    targets: dict[str, int] = field(default_factory=dict)  # cgroup -> burst asked for
    checked_at: float | None = None  # when every target was last asked for


class CpuBurst:
    name = "cpu_burst"
    parts = PARTS

    def __init__(self, config: CpuBurstConfig, supported: bool) -> None:
        self.config, self.supported = config, supported

    def plan(self, state: NodeState, recorded: Recorded) -> Plan:
        memo = recorded.memo if isinstance(recorded.memo, BurstMemo) else BurstMemo()
        full = memo.checked_at is None or recorded.now - memo.checked_at >= RECHECK_SECONDS
        report: dict[str, Any] = {"enabled": self.config.enabled, "supported": self.supported,
                                  "burst_percent": self.config.burst_percent, "pods": {}, "warnings": []}  # fmt: skip
        actions: list[Action] = []
        targets: dict[str, int] = {}
        planned: set[str] = set()
        # off on the node: only pods that carry the annotation can ask (most carry none: not looked at further)
        pods: Sequence[PodSample] = state.online
        if not self.config.enabled:
            pods = [p for p in pods if ENABLE_QUOTA_BURST in p.meta.annotations]
        for o in online_pods(pods) if self.supported else ():
            p = o.pod
            inputs = BurstInputs(True, p.meta.annotations, o.quota_us, {c.cgroup: c.quota_us for c in o.containers})
            bp = plan_burst(self.config, inputs)
            if bp.warning:
                report["warnings"].append(f"pod {p.meta.namespace}/{p.meta.name}: {bp.warning}")
            if bp.source == "off" or not bp.container_bursts_us:
                continue
            planned.add(p.uid)
            pod_targets = dict(bp.container_bursts_us)
            if bp.pod_burst_us is not None:
                pod_targets[p.cgroup] = bp.pod_burst_us
            for cg, burst in pod_targets.items():
                targets[cg] = burst
                if full or memo.targets.get(cg) != burst:
                    actions.append(SetCpuBurst(cg, burst, "burst", p.uid))
            ids = {c.cgroup: c.id for c in o.containers}
            report["pods"][p.uid] = {
                "source": bp.source,
                "burst_us": bp.pod_burst_us,
                "containers": {ids[cg]: b for cg, b in bp.container_bursts_us.items()},
            }
        for uid, entry in recorded.entries.items():
            if entry.burst and uid not in planned:
                actions.append(Restore(uid, PARTS))
        checked = recorded.now if full else memo.checked_at
        return Plan(tuple(actions), BurstMemo(targets, checked), {"cpu_burst": report})
