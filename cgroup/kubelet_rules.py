"""What kubelet would write into a pod's cgroups for cpu/memory, applied to the batch resources.

A pod that asks for `kubernetes.io/batch-cpu` / `kubernetes.io/batch-memory` instead of `cpu`/`memory` is
BestEffort to kubelet: it gets `cpu.shares` 2 and nothing else. The node agent is meant to write, from the
batch values, exactly what kubelet writes from cpu/memory, so these are kubelet's own rules
(pkg/kubelet/cm/helpers_linux.go: MilliCPUToQuota, MilliCPUToShares, ResourceConfigForPod; the runtime's
shares→weight conversion on cgroup v2), as pure functions; and what a pod's cgroups hold before Colo
touches them (shares, quota, oom_score_adj), for when no trustworthy reading exists (a lost or damaged
ledger) and for the OOM preference of processes first seen later.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from cgroup.writer import shares_to_weight as linear_shares_to_weight

#: kubelet's constants (pkg/kubelet/cm/helpers_linux.go).
MIN_SHARES = 2
MAX_SHARES = 262144
SHARES_PER_CPU = 1024
MILLI_CPU_TO_CPU = 1000
QUOTA_PERIOD_US = 100_000  # the default CFS period
MIN_QUOTA_PERIOD_US = 1000  # kubelet never writes a quota below 1 ms
#: kubelet's configuration validation accepts --cpu-cfs-quota-period only within [1 ms, 1 s].
MIN_PERIOD_US = 1000
MAX_PERIOD_US = 1_000_000
MAX_WEIGHT = 10000
#: The kernel keeps a memory limit in whole pages, rounding down: a limit below one page is a limit of 0.
PAGE_SIZE = 4096

#: cgroup v2 cpu.weight from v1 shares: "linear" is KEP-2254's formula (kubelet, runc < 1.3.2, crun < 1.23);
#: "quadratic" the one runc >= 1.3.2 and crun >= 1.23 use (1024 shares -> weight 100, as v1's default).
WeightFormula = Literal["linear", "quadratic"]


def milli_cpu_to_quota(milli_cpu: int, period_us: int = QUOTA_PERIOD_US) -> int:
    """kubelet's MilliCPUToQuota: 0 (no limit: kubelet writes no quota) or at least 1 ms."""
    if milli_cpu == 0:
        return 0
    quota = (milli_cpu * period_us) // MILLI_CPU_TO_CPU
    return max(quota, MIN_QUOTA_PERIOD_US)


def milli_cpu_to_shares(milli_cpu: int) -> int:
    """kubelet's MilliCPUToShares: 1024 per CPU, within [2, 262144]; no request gets the minimum."""
    if milli_cpu == 0:
        return MIN_SHARES
    shares = (milli_cpu * SHARES_PER_CPU) // MILLI_CPU_TO_CPU
    return min(max(shares, MIN_SHARES), MAX_SHARES)


def shares_to_weight(shares: int, formula: WeightFormula) -> int:
    """cgroup v2 cpu.weight for v1 shares, as the node's runtime converts them (see `WeightFormula`)."""
    if formula == "linear":
        return linear_shares_to_weight(shares)
    if shares <= MIN_SHARES:
        return 1
    if shares >= MAX_SHARES:
        return MAX_WEIGHT
    exp2 = math.log2(shares)
    return math.ceil(10 ** ((exp2 * exp2 + 125 * exp2) / 612.0 - 7.0 / 34.0))


@dataclass(frozen=True, slots=True)
class BatchResources:
    """One container's batch values: milli-CPU and bytes; None where the spec has none."""

    cpu_request: int | None = None
    cpu_limit: int | None = None
    memory_request: int | None = None
    memory_limit: int | None = None
    init: bool = False  # an init container
    sidecar: bool = False  # an init container with restartPolicy Always (runs beside the app containers)


@dataclass(frozen=True, slots=True)
class CgroupValues:
    """What kubelet would write: None means "nothing" (no quota, no memory limit)."""

    shares: int
    weight: int
    quota_us: int | None
    period_us: int
    memory_limit: int | None
    problems: tuple[str, ...] = ()  # values kubelet (or the kernel) would reject: report, do not write


def _problems(res: Sequence[BatchResources], period_us: int) -> list[str]:
    out: list[str] = []
    if not MIN_PERIOD_US <= period_us <= MAX_PERIOD_US:
        out.append(f"CFS period {period_us}us outside kubelet's accepted [{MIN_PERIOD_US}, {MAX_PERIOD_US}]")
    for i, r in enumerate(res):
        values = (r.cpu_request, r.cpu_limit, r.memory_request, r.memory_limit)
        if any(v is not None and v < 0 for v in values):
            out.append(f"container {i}: negative batch value")
        if r.cpu_request is not None and r.cpu_limit is not None and r.cpu_request > r.cpu_limit:
            out.append(f"container {i}: batch-cpu request {r.cpu_request}m above its limit {r.cpu_limit}m")
        if r.memory_request is not None and r.memory_limit is not None and r.memory_request > r.memory_limit:
            out.append(f"container {i}: batch-memory request {r.memory_request} above its limit {r.memory_limit}")
        if r.memory_limit is not None and 0 < r.memory_limit < PAGE_SIZE:
            out.append(f"container {i}: batch-memory limit {r.memory_limit} below one page (the kernel makes it 0)")
    return out


def container_values(
    r: BatchResources, *, formula: WeightFormula, period_us: int = QUOTA_PERIOD_US, cfs_quota: bool = True
) -> CgroupValues:
    """A container's cgroup as kubelet/the runtime set it from cpu/memory (here: the batch values).

    `cfs_quota` is kubelet's --cpu-cfs-quota (false: no quota anywhere)."""
    shares = milli_cpu_to_shares(r.cpu_request or 0)
    quota = milli_cpu_to_quota(r.cpu_limit or 0, period_us) if cfs_quota else 0
    return CgroupValues(
        shares=shares,
        weight=shares_to_weight(shares, formula),
        quota_us=quota or None,
        period_us=period_us,
        memory_limit=r.memory_limit or None,
        problems=tuple(_problems([r], period_us)),
    )


def pod_total(res: Sequence[BatchResources], value: list[int | None]) -> int:
    """kube-scheduler's / kubelet's pod total with init containers and sidecars: the larger of the app
    containers plus every sidecar, and each init container plus the sidecars started before it."""
    steady = 0
    sidecars_so_far = 0
    init_peak = 0
    for r, v in zip(res, value, strict=True):
        amount = v or 0
        if not r.init:
            steady += amount
        elif r.sidecar:
            sidecars_so_far += amount
            steady += amount
            init_peak = max(init_peak, sidecars_so_far)
        else:
            init_peak = max(init_peak, sidecars_so_far + amount)
    return max(steady, init_peak)


def pod_values(
    containers: Sequence[BatchResources],
    *,
    formula: WeightFormula,
    period_us: int = QUOTA_PERIOD_US,
    cfs_quota: bool = True,
    overhead_milli_cpu: int = 0,
    overhead_memory: int = 0,
) -> CgroupValues:
    """The pod cgroup as kubelet's ResourceConfigForPod sets it, from the batch values.

    `containers` in spec order, init containers first. Shares from the pod's total request; a quota only
    when every container has a batch-cpu limit, a memory limit only when every container has a
    batch-memory limit (else that part stays unlimited, as for a Burstable pod); a pod with no batch value
    at all is BestEffort (minimum shares, nothing else). The RuntimeClass overhead (`spec.overhead`) is
    added to the total request and to a total limit that exists, as kubelet does."""
    problems = _problems(containers, period_us)
    if all(
        r.cpu_request is None and r.cpu_limit is None and r.memory_request is None and r.memory_limit is None
        for r in containers
    ):
        return CgroupValues(MIN_SHARES, shares_to_weight(MIN_SHARES, formula), None, period_us, None, tuple(problems))
    cpu_request = pod_total(containers, [r.cpu_request for r in containers]) + overhead_milli_cpu
    shares = milli_cpu_to_shares(cpu_request)
    quota: int | None = None
    if cfs_quota and containers and all(r.cpu_limit for r in containers):
        cpu_limit = pod_total(containers, [r.cpu_limit for r in containers]) + overhead_milli_cpu
        quota = milli_cpu_to_quota(cpu_limit, period_us) or None
    memory: int | None = None
    if containers and all(r.memory_limit for r in containers):
        memory = pod_total(containers, [r.memory_limit for r in containers]) + overhead_memory
    return CgroupValues(shares, shares_to_weight(shares, formula), quota, period_us, memory, tuple(problems))


#: kubelet's oom_score_adj (pkg/kubelet/qos/policy.go).
GUARANTEED_OOM_SCORE_ADJ = -997
BESTEFFORT_OOM_SCORE_ADJ = 1000


def kubelet_shares(request_cores: float) -> int:
    """cpu.shares kubelet gives a pod for its CPU request (2 for none)."""
    return max(2, min(262144, int(request_cores * 1024)))


def kubelet_oom_score_adj(qos: str, memory_request_bytes: int, memory_capacity_bytes: int) -> int:
    """kubelet's oom_score_adj for a pod's containers: the fallback when no process could be read."""
    if qos == "guaranteed":
        return GUARANTEED_OOM_SCORE_ADJ
    if qos == "besteffort" or memory_capacity_bytes <= 0:
        return BESTEFFORT_OOM_SCORE_ADJ
    adj = 1000 - (1000 * memory_request_bytes) // memory_capacity_bytes
    return min(max(1000 + GUARANTEED_OOM_SCORE_ADJ, adj), BESTEFFORT_OOM_SCORE_ADJ - 1)


def kubelet_quota(limit_cores: float | None) -> int | None:
    """The CFS quota kubelet gives a CPU limit over its default period (MilliCPUToQuota); None: no limit."""
    if limit_cores is None or limit_cores <= 0:
        return None
    return max(1000, round(limit_cores * 1000) * QUOTA_PERIOD_US // 1000)
