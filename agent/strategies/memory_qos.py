"""The `memory_qos` strategy (cgroup v2 only): online pods' memory.min or memory.low from their requests and
memory.high from their limits (agent/qos/memory_qos.py), on containers, pods and every cgroup above them up
to kubepods (a child's protection is bounded by its parent's). Offline pods are left to enforcement's
memory.high. On cgroup v1 the plan is empty and the report says unsupported.

Everything is asked for each pass (the executor skips what holds); a pod that stops being online or goes
away gets its recorded values back (`Restore` of the part), and so does every pod when the feature is off.
The cgroups above pods are shared: `Restore(uid="")` puts back those no online pod needs any more.
"""

from __future__ import annotations

from typing import Any

from agent.actions import Action, Part, Plan, Recorded, Restore, SetMemoryHigh, SetMemoryProtection
from agent.config import MemoryQosConfig
from agent.node_state import NodeState
from agent.qos.memory_qos import ContainerMemory, PodMemory, plan_memory_qos
from agent.strategies.online import online_pods

PARTS: frozenset[Part] = frozenset({"memory_qos"})
SHARED = ""  # the uid of Restore for the cgroups above pods


def ancestors(cgroup: str, kubepods: str) -> tuple[str, ...]:
    """The cgroups between a pod and kubepods (both excluded... kubepods included), nearest first."""
    out: list[str] = []
    path = cgroup.rstrip("/")
    root = kubepods.rstrip("/") or "/"
    while path.startswith(root) and path != root:
        path = path.rsplit("/", 1)[0] or "/"
        out.append(path)
    return tuple(out)


class MemoryQos:
    name = "memory_qos"
    parts = PARTS

    def __init__(self, config: MemoryQosConfig, is_v2: bool, kubepods: str) -> None:
        self.config, self.is_v2, self.kubepods = config, is_v2, kubepods

    def plan(self, state: NodeState, recorded: Recorded) -> Plan:
        pods: list[PodMemory] = []
        uid_of: dict[str, str] = {}
        active = self.is_v2 and self.config.enabled  # else nothing to plan: no pod is looked at
        for o in online_pods(state.online if active else ()):
            p = o.pod
            memory = p.meta.container_memory
            containers = {c.cgroup: ContainerMemory(*memory[c.id]) for c in p.containers if c.id in memory}
            if not containers:
                continue
            pods.append(PodMemory(p.cgroup, ancestors(p.cgroup, self.kubepods), True, p.meta.memory_limit_bytes,
                                  containers))  # fmt: skip
            uid_of[p.cgroup] = p.uid
            for cg in containers:
                uid_of[cg] = p.uid
        mp = plan_memory_qos(self.config, self.is_v2, pods)
        report: dict[str, Any] = {"enabled": self.config.enabled and mp.supported, "supported": mp.supported,
                                  "reason": mp.reason, "protection": self.config.protection, "pods": {}}  # fmt: skip
        actions: list[Action] = []
        kind = self.config.protection
        planned: set[str] = set()
        pod_cgroups = {p.cgroup for p in pods}
        for cg, t in mp.targets.items():
            uid = uid_of.get(cg, SHARED)
            planned.add(uid)
            if kind != "none":
                actions.append(SetMemoryProtection(cg, kind, t.min_bytes if kind == "min" else t.low_bytes,
                                                   "memory_qos", uid))  # fmt: skip
            if t.high_bytes is not None:
                actions.append(SetMemoryHigh(cg, t.high_bytes, "memory_qos", uid))
            entry = recorded.entries.get(uid) if uid != SHARED else None
            if entry is not None and cg in entry.memory_qos:  # a file no longer asked for (another `protection`,
                actions += _back(cg, uid, entry.memory_qos[cg], kind, t.high_bytes)  # high_percent 0): as it was
            if cg in pod_cgroups:
                report["pods"][uid] = {"protected_bytes": max(t.min_bytes, t.low_bytes), "high_bytes": t.high_bytes}
        for uid, entry in recorded.entries.items():
            if entry.memory_qos and uid not in planned:
                actions.append(Restore(uid, PARTS))
        actions.append(Restore(SHARED, PARTS))  # cgroups above pods that no target of this pass names
        return Plan(tuple(actions), None, {"memory_qos": report})


def _back(cg: str, uid: str, record: dict[str, int | None], kind: str, high: int | None) -> list[Action]:
    """The recorded value of each file of `cg` this pass does not ask a value of."""
    out: list[Action] = []
    for name, before in record.items():
        if name == "high" and high is None:
            out.append(SetMemoryHigh(cg, before, "memory_qos", uid))
        elif name in ("min", "low") and name != kind:
            out.append(SetMemoryProtection(cg, "min" if name == "min" else "low", before or 0, "memory_qos", uid))
    return out
