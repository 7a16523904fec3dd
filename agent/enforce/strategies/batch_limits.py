"""Batch pods' own limits: what kubelet would write for `cpu`/`memory`, from `kubernetes.io/batch-cpu` and
`kubernetes.io/batch-memory` (kubelet sees such a pod as BestEffort and writes nothing but the minimum
weight). Per pod and per running container (matched by container ID, so a restarted container gets its
values in the pass that first sees it):

- CFS quota from the batch-cpu limit (kubelet's MilliCPUToQuota at `enforcement.cpu_period_us`); the pod's
  only when every container has one, as kubelet's ResourceConfigForPod;
- cpu.shares from the batch-cpu request (MilliCPUToShares); on v2 cpu.weight by `batch.weight_formula`;
- memory.limit_in_bytes / memory.max from the batch-memory limit (the pod's when every container has one).

Only the resource the pod asks for in batch form is written: a pod with batch-memory but plain `cpu` keeps
kubelet's CPU values. These are the pod's own limits (part "batch", protecting "own" limits): never recorded as an
original, never restored, left in place when Colo stops. Suppression works on top of them, and the two
never fight over a cgroup file:

- while suppression holds a pod's CFS quotas (its ledger entry says `quota`), it alone writes them, never
  looser than the batch limits (they are the pod's recorded originals and its limit in the budget split),
  and release puts back the batch quotas; this strategy writes the quotas only when suppression does not,
  and in the pass where both ask the executor keeps the tighter (`actions.merge_wishes`);
- the pod cgroup's weight belongs to the offline baseline (minimum weight, SCHED_IDLE) whenever the pod has
  a ledger entry; the batch shares are that entry's original, written back at restore and at shutdown.
  Containers' weights and every memory limit are written here alone.

A pod whose batch values kubelet would reject (a request above its limit, a negative value, a memory limit
below one page), or that asks for both `cpu` and `batch-cpu` (or both memories), gets none of them written:
the problems are reported (the plan's report, /api/v1/pods, one log line per pod).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.config import AgentConfig
from agent.config_sections.enforcement import BatchConfig
from agent.enforce.actions import Action, Part, Plan, Recorded, Report, SetCpuQuota, SetCpuShares, SetMemoryLimit
from agent.enforce.ledger import Touched
from agent.enforce.parts.quota import QUOTA
from agent.enforce.strategies.registry import Facts, register
from agent.node_state import NodeState
from agent.snapshot import PodBatch, PodMeta, PodSample
from cgroup.kubelet_rules import QUOTA_PERIOD_US, CgroupValues, WeightFormula, container_values, pod_values

log = logging.getLogger(__name__)

PART: Part = "batch"


@dataclass(frozen=True, slots=True)
class BatchTargets:
    """What kubelet would have written for one batch pod: the pod cgroup's values, each container's by
    container ID, which resources the pod asks for in batch form, and why none may be written."""

    pod: CgroupValues
    containers: dict[str, CgroupValues] = field(default_factory=dict)
    cpu: bool = False
    memory: bool = False
    problems: tuple[str, ...] = ()


def _conflicts(meta: PodMeta, batch: PodBatch) -> list[str]:
    """A pod asking for a resource both ways: kubelet already wrote the plain one (the webhook refuses
    such a pod; one created by hand keeps kubelet's values). The pod overhead counts in both totals."""
    out = []
    plain_cpu = meta.cpu_limit_cores is not None or meta.cpu_request_cores * 1000 > batch.overhead_milli_cpu + 0.5
    if batch.has_cpu and plain_cpu:
        out.append("both cpu and kubernetes.io/batch-cpu: kubelet's cpu values stand")
    plain_memory = meta.memory_limit_bytes is not None or meta.memory_request_bytes > batch.overhead_memory
    if batch.has_memory and plain_memory:
        out.append("both memory and kubernetes.io/batch-memory: kubelet's memory values stand")
    return out


def targets(
    meta: PodMeta, *, formula: WeightFormula = "linear", period_us: int = QUOTA_PERIOD_US, cfs_quota: bool = True
) -> BatchTargets | None:
    """The pod's batch targets; None for a pod without batch resources."""
    batch = meta.batch
    if batch is None:
        return None
    res = [c.resources for c in batch.containers]
    pod = pod_values(
        res,
        formula=formula,
        period_us=period_us,
        cfs_quota=cfs_quota,
        overhead_milli_cpu=batch.overhead_milli_cpu,
        overhead_memory=batch.overhead_memory,
    )
    problems = []
    for text in pod.problems:  # kubelet_rules numbers containers; name them
        head, sep, rest = text.partition(": ")
        if sep and head.startswith("container ") and head[10:].isdigit() and int(head[10:]) < len(res):
            text = f"container {batch.containers[int(head[10:])].name}: {rest}"
        problems.append(text)
    problems += _conflicts(meta, batch)
    containers = {
        c.id: container_values(c.resources, formula=formula, period_us=period_us, cfs_quota=cfs_quota)
        for c in batch.containers
        if c.id
    }
    return BatchTargets(pod, containers, batch.has_cpu, batch.has_memory, tuple(problems))


def as_originals(entry: Touched, pod: PodSample, t: BatchTargets | None, is_v2: bool) -> bool:
    """Make a batch pod's ledger entry hold its batch values as the originals (what release and restore put
    back), whatever the cgroups held at first sight (kubelet's BestEffort values, or an older ledger's):
    else release and this strategy would undo each other every pass. True when the entry changed."""
    if t is None or t.problems or not t.cpu:
        return False
    changed = False
    want = (t.pod.shares, t.pod.weight if is_v2 else None, t.pod.quota_us, t.pod.period_us)
    if (entry.shares, entry.weight, entry.quota_us, entry.period_us) != want:
        entry.shares, entry.weight, entry.quota_us, entry.period_us = want
        changed = True
    for c in pod.containers:
        v = t.containers.get(c.id)
        if v is None:
            continue
        known = c.cgroup in entry.containers and entry.container_periods.get(c.cgroup) == v.period_us
        if not known or entry.containers[c.cgroup] != v.quota_us:
            entry.containers[c.cgroup], entry.container_periods[c.cgroup] = v.quota_us, v.period_us
            changed = True
    return changed


def pod_actions(pod: PodSample, t: BatchTargets, entry: Touched | None) -> list[Action]:
    """The writes that give one pod (without problems) its batch values, leaving to suppression what it
    holds: the CFS quotas while the entry holds the `quota` part, the pod cgroup's weight while the pod has an entry."""
    uid, out = pod.uid, list[Action]()
    running = [(c.cgroup, t.containers[c.id]) for c in pod.containers if c.id in t.containers]
    if t.cpu:
        if entry is None or QUOTA not in entry.parts:  # the pod's quota and its containers', in one safe-order batch
            below = {cg: (v.quota_us, v.period_us) for cg, v in running}
            out.append(SetCpuQuota(pod.cgroup, t.pod.quota_us, t.pod.period_us, PART, uid, containers=below))
        if entry is None:
            out.append(SetCpuShares(pod.cgroup, t.pod.shares, PART, uid, weight=t.pod.weight))
        out += [SetCpuShares(cg, v.shares, PART, uid, weight=v.weight) for cg, v in running]
    if t.memory:
        out.append(SetMemoryLimit(pod.cgroup, t.pod.memory_limit, PART, uid))
        out += [SetMemoryLimit(cg, v.memory_limit, PART, uid) for cg, v in running]
    return out


def _pod_name(pod: PodSample) -> str:
    return f"{pod.meta.namespace}/{pod.meta.name}" if pod.meta.name else pod.uid


@dataclass(frozen=True, slots=True)
class BatchReport(Report):
    pods: Mapping[str, Mapping[str, int | None]]  # uid -> cpu_quota_us, cpu_shares, memory_limit_bytes written
    problems: Mapping[str, list[str]]  # uid -> why its values are not written (kubelet would reject them)

    def fields(self) -> dict[str, Any]:
        return {"batch": {"pods": self.pods, "problems": self.problems}}


class BatchLimits:
    """The strategy: `plan(state, recorded)`; `recorded.memo` is the set of pods whose problems were logged."""

    name = "batch_limits"
    parts: frozenset[Part] = frozenset({PART})

    def __init__(self, config: BatchConfig, period_us: int = QUOTA_PERIOD_US) -> None:
        self.config, self.period_us = config, period_us
        # by UID: the PodMeta they were computed from (the pod source keeps one object per resourceVersion)
        self._targets: dict[str, tuple[PodMeta, BatchTargets | None]] = {}

    def targets(self, meta: PodMeta) -> BatchTargets | None:
        """The pod's targets, computed again only when its PodMeta is another object (the pod changed)."""
        cached = self._targets.get(meta.uid)
        if cached is not None and cached[0] is meta:
            return cached[1]
        c = self.config
        found = targets(meta, formula=c.weight_formula, period_us=self.period_us, cfs_quota=c.cpu_cfs_quota)
        self._targets[meta.uid] = (meta, found)
        return found

    def own_originals(self, entry: Touched, pod: PodSample, is_v2: bool) -> bool:
        """A batch pod's originals are its batch values (see `as_originals`)."""
        meta = pod.meta
        held = self._targets.get(meta.uid)  # `targets` inline: asked of every offline pod in every pass
        t = held[1] if held is not None and held[0] is meta else self.targets(meta)
        return t is not None and as_originals(entry, pod, t, is_v2)

    def plan(self, state: NodeState, recorded: Recorded) -> Plan:
        if not self.config.enabled:
            return Plan(memo=frozenset(), report=BatchReport({}, {}))  # what was written stays
        logged: frozenset[str] = recorded.memo if isinstance(recorded.memo, frozenset) else frozenset()
        actions: list[Action] = []
        pods: dict[str, Mapping[str, int | None]] = {}
        problems: dict[str, list[str]] = {}
        cache = self._targets
        for pod in state.snapshot.pods.values():  # every pod with batch values, whatever its class
            meta = pod.meta
            held = cache.get(meta.uid)  # `targets` inline: a pass asks this of every pod on the node
            t = held[1] if held is not None and held[0] is meta else self.targets(meta)
            if t is None:
                continue
            if t.problems:
                problems[pod.uid] = list(t.problems)
                continue
            actions += pod_actions(pod, t, recorded.entries.get(pod.uid))
            pods[pod.uid] = {
                "cpu_quota_us": t.pod.quota_us if t.cpu else None,
                "cpu_shares": t.pod.shares if t.cpu else None,
                "memory_limit_bytes": t.pod.memory_limit if t.memory else None,
            }
        if len(cache) != len(state.snapshot.pods):  # it holds every pod of the pass: more only when some left
            for uid in cache.keys() - state.snapshot.pods.keys():
                del cache[uid]
        for uid in sorted(problems.keys() - logged):
            pod = state.snapshot.pods[uid]
            log.warning(
                "batch pod %s: not written, kubelet would reject it: %s", _pod_name(pod), "; ".join(problems[uid])
            )
        return Plan(tuple(actions), memo=frozenset(problems), report=BatchReport(pods, problems))


def problems_of(meta: PodMeta) -> list[str]:
    """Why a pod's batch values are not written (the /api/v1/pods field); [] when they are or it has none."""
    t = targets(meta)
    return [] if t is None else list(t.problems)


def _build(config: AgentConfig, facts: Facts) -> BatchLimits | None:
    return BatchLimits(config.batch, config.enforcement.cpu_period_us) if config.batch.enabled else None


# after cfs_quota: it sees the quota; while not active, each batch pod's values and what is not written: none
register(BatchLimits.name, _build, order=50, report_defaults={"batch": {"pods": {}, "problems": {}}})
