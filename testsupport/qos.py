"""The one place the online QoS tests and bench/ build an enforcement stage with the QoS strategies and the
tier alike): pods described by hand over real cgroups, the node's load given, the rest as a pass has it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent.config import AgentConfig
from agent.config_sections.enforcement import EnforcementConfig
from agent.config_sections.pod_qos import MemoryQosConfig
from agent.enforce import qos_report
from agent.enforce.actions import Recorded, SetMemoryHigh, SetMemoryProtection
from agent.enforce.stage import Enforcer, detect_facts
from agent.enforce.strategies.memory_qos import MemoryQos, MemoryTarget
from agent.enforce.strategies.registry import strategies
from agent.node_state import NodeState, node_state
from agent.snapshot import ContainerSample, NodeSample, PodMeta, PodSample, Snapshot
from cgroup import CgroupReader, Layout, PathModel

GI = 1 << 30
QOS_STRATEGIES = ("cpu_burst", "quota_burst", "memory_qos")


@dataclass(frozen=True)
class Ctr:
    """One container as the pass sees it: its cgroup, CPU limit (cores), the last interval's throttled
    ratio and usage, and its memory request and limit."""

    cgroup: str
    cpu_limit: float | None = 0.5
    throttled: float | None = 0.0
    usage: float | None = 0.0
    memory: tuple[int, int | None] | None = None


def online_pod(uid: str, cgroup: str, containers: Sequence[Ctr], cls: str = "online", **meta: Any) -> PodSample:
    ids = [c.cgroup.rsplit("/", 1)[1] for c in containers]
    limits = [c.cpu_limit for c in containers]
    samples = tuple(ContainerSample(i, c.cgroup, c.usage, 0, 0, 0, c.throttled)
                    for i, c in zip(ids, containers, strict=True))  # fmt: skip
    pod_limit = None if any(x is None for x in limits) else sum(x or 0.0 for x in limits)
    memory = {i: c.memory for i, c in zip(ids, containers, strict=True) if c.memory is not None}
    mem_limits = [m[1] for m in memory.values()]
    pod_memory_limit = None if not mem_limits or None in mem_limits else sum(x or 0 for x in mem_limits)
    meta.setdefault("memory_limit_bytes", pod_memory_limit)
    pm = PodMeta(uid, "default", uid, cls, cpu_limit_cores=pod_limit,  # type: ignore[arg-type]
                 container_cpu_limits=dict(zip(ids, limits, strict=True)), container_memory=memory,
                 **meta)  # fmt: skip
    throttled = max((c.throttled or 0.0 for c in containers), default=0.0)
    # the pod cgroup's memory limit as the sampler reads it: kubelet's, here the meta's (overhead none)
    return PodSample(pm, "burstable", cgroup, 0.0, 0, 0, 0, 0, throttled, samples,
                     memory_limit_bytes=pm.memory_limit_bytes)  # fmt: skip


def qos_state(pods: Sequence[PodSample], busy: float | None = 0.2, cpus: float = 2.0, *, memory: int = 8 * GI,
              used: int = GI, evicting: bool = False, offline_suppressed: bool = False) -> NodeState:  # fmt: skip
    """The pass's state on a node of `cpus` and `memory` with `busy` cores and `used` bytes in use (the node's
    load is the test's input)."""
    node = NodeSample(cpus, busy, memory, used, 0)
    snap = Snapshot(1, 0.0, 0.0, node, {}, {p.uid: p for p in pods}, (), 0.0)
    state = node_state(snap, (cpus, memory))
    return dataclasses.replace(state, evicting=evicting, offline_suppressed=offline_suppressed)


def qos_stage(layout: Layout, model: PathModel, ledger_file: str, *, dry_run: bool = False, every: bool = False,
              **qos: Any) -> Enforcer:  # fmt: skip
    """The enforcement stage with the online QoS strategies only (as the registry builds them from `qos`),
    the offline ones left out; with `every`, all the registry's (a pod that turns offline meets them)."""
    reader = CgroupReader(layout)
    cfg = AgentConfig.model_validate({"qos": qos})
    chosen = [s for s in strategies(cfg, detect_facts(layout, model, reader)) if every or s.name in QOS_STRATEGIES]
    return Enforcer(layout, model, reader, EnforcementConfig(ledger_file=ledger_file), lambda: (2.0, 8 * GI),
                    dry_run=dry_run, registered=chosen)  # fmt: skip


def memory_targets(
    cfg: MemoryQosConfig, is_v2: bool, pods: Sequence[PodSample], kubepods: str = "/kubepods"
) -> tuple[dict[str, Any], dict[str, MemoryTarget]]:
    """The memory_qos strategy's report and, per cgroup, the target its actions ask for (the production
    path: the same plan the stage carries out)."""
    plan = MemoryQos(cfg, is_v2, kubepods).plan(qos_state(pods), Recorded({}, {}))
    found: dict[str, dict[str, int | None]] = {}
    for a in plan.actions:
        if isinstance(a, SetMemoryProtection):
            found.setdefault(a.cgroup, {})[a.kind] = a.value
        elif isinstance(a, SetMemoryHigh):
            found.setdefault(a.cgroup, {})["high"] = a.limit
    targets = {cg: MemoryTarget(f.get("min") or 0, f.get("low") or 0, f.get("high")) for cg, f in found.items()}
    return plan.report.fields()["memory_qos"], targets


def section(stage: Enforcer) -> dict[str, Any]:
    """The `qos` key of /api/v1/node."""
    return qos_report.section(stage)
