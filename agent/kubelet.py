"""kubelet's own formulas for a pod's cgroup values: what a pod's cgroups hold before Colo touches them, for
when no trustworthy reading exists (a lost or damaged ledger) and for the OOM preference of processes
first seen later."""

from __future__ import annotations

# kubelet's oom_score_adj (pkg/kubelet/qos/policy.go)
GUARANTEED_OOM_SCORE_ADJ = -997
BESTEFFORT_OOM_SCORE_ADJ = 1000
KUBELET_CFS_PERIOD_US = 100_000  # kubelet's default cpuCFSQuotaPeriod


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
    return max(1000, round(limit_cores * 1000) * KUBELET_CFS_PERIOD_US // 1000)
