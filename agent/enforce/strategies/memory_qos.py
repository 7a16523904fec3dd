"""The `memory_qos` strategy (cgroup v2 only): online pods' memory.min or memory.low from their requests and
memory.high from their limits (`pod_targets` below), on containers, pods and every cgroup above them up
to kubepods (a child's protection is bounded by its parent's). Offline pods are left to enforcement's
memory.high. On cgroup v1 the plan is empty and the report says unsupported.

Everything is asked for each pass (the executor skips what holds); a pod that stops being online or goes
away gets its recorded values back (`Restore` of the part), and so does every pod when the feature is off.
The cgroups above pods are shared: `Restore(uid="")` puts back those no online pod needs any more.

A pod's own targets, their actions and its report entry depend on its spec alone: kept between passes and
computed again when the pod's PodMeta object or its containers change (SpecCache in online.py); each pass
sums the protection above pods and compares with the ledger's record.

Memory QoS for online pods on cgroup v2 (the kernel's memory controller, as koordlet's memory QoS uses it).

An online container's request × `protect_percent` is protected from reclaim: `memory.low` (reclaimed only
when nothing unprotected is left) or `memory.min` (never reclaimed; the OOM killer goes elsewhere first).
With `high_percent`, `memory.high` = limit × percent throttles and reclaims the container before its hard
limit would OOM-kill it. A child's protection is bounded by its parent's, so the pod holds the sum of its
containers' and every ancestor up to kubepods the sum of what is under it. Offline pods keep the
memory.high enforcement gives them; v1 has no such files, so there the feature reports itself unsupported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.config import AgentConfig
from agent.config_sections.pod_qos import MemoryQosConfig
from agent.enforce.actions import (
    SHARED,
    Action,
    Part,
    Plan,
    Recorded,
    Report,
    Restore,
    SetMemoryHigh,
    SetMemoryProtection,
)
from agent.enforce.parts.memory import MEMORY_QOS
from agent.enforce.strategies.online import SpecCache, online_pod
from agent.enforce.strategies.registry import Facts, register
from agent.node_state import NodeState
from agent.sense.pace import NOTHING_MORE, PassNeeds
from agent.snapshot import PodSample
from cgroup import parent_cgroup

PAGE = 4096
V1_REASON = "memory QoS needs cgroup v2 (memory.min/low/high); this node runs v1"


@dataclass(frozen=True, slots=True)
class ContainerMemory:
    request_bytes: int
    limit_bytes: int | None


@dataclass(frozen=True, slots=True)
class PodMemory:
    cgroup: str
    ancestors: tuple[str, ...]  # its QoS tier up to kubepods, e.g. ('/kubepods/burstable', '/kubepods')
    online: bool
    limit_bytes: int | None  # the pod cgroup's hard limit as read (kubelet's); None: unlimited
    containers: Mapping[str, ContainerMemory]  # container cgroup -> request and limit


@dataclass(frozen=True, slots=True)
class MemoryTarget:
    min_bytes: int
    low_bytes: int
    high_bytes: int | None  # None: leave memory.high alone


def _pages(n: float) -> int:
    return int(n) // PAGE * PAGE


def _target(cfg: MemoryQosConfig, protect: int, limit: int | None) -> MemoryTarget:
    if limit is not None:
        protect = min(protect, limit)
    high = None
    if cfg.high_percent and limit is not None:
        high = min(limit, max(_pages(limit * cfg.high_percent / 100), protect))  # never throttle what is protected
    floor = protect if cfg.protection == "min" else 0
    low = protect if cfg.protection == "low" else 0
    return MemoryTarget(floor, low, high)


def pod_targets(cfg: MemoryQosConfig, pod: PodMemory) -> dict[str, MemoryTarget]:
    """An online pod's containers' targets, then its own: the part of the plan only its spec decides."""
    targets: dict[str, MemoryTarget] = {}
    total = 0
    for cgroup, c in pod.containers.items():
        t = _target(cfg, _pages(c.request_bytes * cfg.protect_percent / 100), c.limit_bytes)
        targets[cgroup] = t
        total += max(t.min_bytes, t.low_bytes)
    targets[pod.cgroup] = _target(cfg, total, pod.limit_bytes)  # the pod's real limit: never the spec's sum
    return targets


def ancestor_target(cfg: MemoryQosConfig, protect: int) -> MemoryTarget:
    """A cgroup above pods: the sum of the protection under it; its memory.high is left alone."""
    t = _target(cfg, protect, None)
    return MemoryTarget(t.min_bytes, t.low_bytes, None)


def supported(cfg: MemoryQosConfig, is_v2: bool) -> tuple[bool, str]:
    """Whether the node can have memory QoS, and why it is not applied ("" when it is)."""
    if not is_v2:
        return False, V1_REASON
    return True, "" if cfg.enabled else "disabled"


PARTS: frozenset[Part] = frozenset({"memory_qos"})


def ancestors(cgroup: str, kubepods: str) -> tuple[str, ...]:
    """The cgroups between a pod and kubepods (both excluded... kubepods included), nearest first."""
    out: list[str] = []
    path = cgroup.rstrip("/")
    root = kubepods.rstrip("/") or "/"
    while path.startswith(root) and path != root:
        path = parent_cgroup(path)
        out.append(path)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class PodProtection:
    """One online pod's targets as its spec gives them (cached per pod: agent/enforce/strategies/online.py SpecCache):
    its containers' then its own cgroup, each with its target and the actions asking for it. The report
    entry is shared between passes: read-only."""

    # (cgroup, its target, the actions asking for it, the files it asks for: a record of others is put back)
    cgroups: tuple[tuple[str, MemoryTarget, tuple[Action, ...], frozenset[str]], ...]
    actions: tuple[Action, ...]  # every cgroup's, in that order
    ancestors: tuple[str, ...]
    protect: int  # the pod's protection: each ancestor holds the sum of its pods'
    report: dict[str, Any]


@dataclass(frozen=True, slots=True)
class MemoryQosReport(Report):
    enabled: bool
    supported: bool
    reason: str  # why not, where it is not supported ("" where it is)
    protection: str  # "low" or "min"
    pods: Mapping[str, Any]  # uid -> {protected_bytes, high_bytes}

    def fields(self) -> dict[str, Any]:
        return {
            "memory_qos": {
                "enabled": self.enabled,
                "supported": self.supported,
                "reason": self.reason,
                "protection": self.protection,
                "pods": self.pods,
            }
        }


class MemoryQos:
    name = "memory_qos"
    parts = PARTS

    def __init__(self, config: MemoryQosConfig, is_v2: bool, kubepods: str) -> None:
        self.config, self.is_v2, self.kubepods = config, is_v2, kubepods
        # on (v2), it reads pods' memory limits from the sample
        self.reads = PassNeeds(pod_memory_limits=True) if config.enabled and is_v2 else NOTHING_MORE
        self._specs: SpecCache[PodProtection | None] = SpecCache(self._pod)

    def _actions(self, cg: str, t: MemoryTarget, uid: str) -> tuple[Action, ...]:
        kind = self.config.protection
        out: list[Action] = []
        if kind != "none":
            out.append(SetMemoryProtection(cg, kind, t.min_bytes if kind == "min" else t.low_bytes, "memory_qos", uid))
        if t.high_bytes is not None:
            out.append(SetMemoryHigh(cg, t.high_bytes, "memory_qos", uid))
        return tuple(out)

    def _pod(self, p: PodSample) -> PodProtection | None:
        """What the pod's spec asks for (None: not online, or no container with a memory request known)."""
        o = online_pod(p)
        if o is None:
            return None
        memory = p.meta.container_memory
        containers = {c.cgroup: ContainerMemory(*memory[c.id]) for c in p.containers if c.id in memory}
        if not containers:
            return None
        up = ancestors(p.cgroup, self.kubepods)
        targets = pod_targets(self.config, PodMemory(p.cgroup, up, True, p.memory_limit_bytes, containers))
        kind = self.config.protection
        files, with_high = frozenset({kind}), frozenset({kind, "high"})
        cgroups = tuple(
            (cg, t, self._actions(cg, t, p.uid), files if t.high_bytes is None else with_high)
            for cg, t in targets.items()
        )
        own = targets[p.cgroup]
        protect = max(own.min_bytes, own.low_bytes)
        report = {"protected_bytes": protect, "high_bytes": own.high_bytes}
        return PodProtection(cgroups, tuple(a for c in cgroups for a in c[2]), up, protect, report)

    def plan(self, state: NodeState, recorded: Recorded) -> Plan:
        cfg, kind = self.config, self.config.protection
        active = self.is_v2 and cfg.enabled  # else nothing to plan: no pod is looked at
        ok, reason = supported(cfg, self.is_v2)
        report_pods: dict[str, Any] = {}
        report = MemoryQosReport(cfg.enabled and ok, ok, reason, kind, report_pods)
        actions: list[Action] = []
        planned: set[str] = set()
        above: dict[str, int] = {}
        entries = recorded.entries
        for p, m in self._specs.each(state.online if active else ()):
            if m is None:
                continue
            uid = p.uid
            planned.add(uid)
            entry = entries.get(uid)
            record = entry.parts.get(MEMORY_QOS) if entry is not None else None
            if not record:
                actions += m.actions
            else:
                for cg, t, asked, files in m.cgroups:
                    actions += asked
                    was = record.get(cg)
                    # a file no longer asked for (another `protection`, high_percent 0): as it was
                    if was is not None and not was.keys() <= files:
                        actions += _back(cg, uid, was, kind, t.high_bytes)
            report_pods[uid] = m.report
            for a in m.ancestors:
                above[a] = above.get(a, 0) + m.protect
        for a, protect in above.items():
            planned.add(SHARED)
            actions += self._actions(a, ancestor_target(cfg, protect), SHARED)
        for uid, entry in recorded.entries.items():
            if MEMORY_QOS in entry.parts and uid not in planned:
                actions.append(Restore(uid, PARTS))
        actions.append(Restore(SHARED, PARTS))  # cgroups above pods that no target of this pass names
        return Plan(tuple(actions), None, report)


def _back(cg: str, uid: str, record: dict[str, int | None], kind: str, high: int | None) -> list[Action]:
    """The recorded value of each file of `cg` this pass does not ask a value of."""
    out: list[Action] = []
    for name, before in record.items():
        if name == "high" and high is None:
            out.append(SetMemoryHigh(cg, before, "memory_qos", uid))
        elif name in ("min", "low") and name != kind:
            out.append(SetMemoryProtection(cg, "min" if name == "min" else "low", before or 0, "memory_qos", uid))
    return out


def _build(config: AgentConfig, facts: Facts) -> MemoryQos:
    """Always active: it plans its restores when off."""
    return MemoryQos(config.qos.memory, facts.is_v2, facts.kubepods)


register(MemoryQos.name, _build, order=80, report_defaults={"memory_qos": {}})
