"""What enforcement and eviction read: the `enforcement` section (offline suppression, OOM preference) with the
eviction, disk and run-queue sections it nests, and the `batch` section (batch pods' own limits)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from agent.config_sections.strict import Strict


class EvictionConfig(Strict):
    """Eviction by watermarks (agent/evict/evictor.py); node annotations override the watermarks."""

    #: Evict offline pods while the node is above a high watermark.
    enabled: bool = True
    #: Node CPU usage, integer percent of allocatable, above which offline pods are evicted (a node annotation
    #: overrides it); batch pods' CPU within their kubernetes.io/batch-cpu requests is not counted (lent, and taken
    #: back by CFS weights and the CPU budget).
    cpu_high_watermark: int = Field(default=80, ge=0, le=100)
    #: Below it the evicting state clears.
    cpu_low_watermark: int = Field(default=30, ge=0, le=100)
    #: Node memory usage, integer percent of allocatable, above which offline pods are evicted (a node annotation
    #: overrides it). 80, not Volcano's 60: memory is lent up to memory_reclaim_ratio (0.7) of allocatable, and
    #: lending stops pressure_margin_percent below this watermark; at 60 a node whose batch pods used what they
    #: were lent evicted them (docs/online-qos.md#lending-and-the-watermarks).
    memory_high_watermark: int = Field(default=80, ge=0, le=100)
    #: Below it the evicting state clears.
    memory_low_watermark: int = Field(default=30, ge=0, le=100)
    #: Usage is averaged over this long before it is compared with the watermarks.
    smoothing_seconds: float = Field(default=5.0, gt=0)
    #: Evictions per round at most.
    max_per_round: int = Field(default=2, ge=1)
    #: Pause between two rounds of evictions.
    cooldown_seconds: float = Field(default=10.0, ge=0)
    #: On oversubscribed nodes evict only while the pods' requests (batch requests included) exceed allocatable.
    require_overcommit_when_oversubscribed: bool = True
    #: Also taint the node volcano.sh/offline-job-evicting while it evicts.
    taint: bool = False
    #: Kill offline pods' processes through their cgroups when memory stays above its high watermark while the API
    #: server is unreachable.
    kill_when_api_down_memory: bool = True
    #: The same for CPU (off: CPU is compressible, suppression handles it).
    kill_when_api_down_cpu: bool = False
    #: How long both must last before the kill.
    kill_after_seconds: float = Field(default=30.0, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> EvictionConfig:
        for res in ("cpu", "memory"):
            if getattr(self, f"{res}_high_watermark") <= getattr(self, f"{res}_low_watermark"):
                raise ValueError(f"eviction.{res}_high_watermark must be above eviction.{res}_low_watermark")
        return self


class DiskQosConfig(Strict):
    """Offline pods' disk bandwidth and IOPS per block device (agent/enforce/strategies/disk_qos.py, docs/disk-qos.md).
    A budget of 0 leaves that direction unlimited."""

    #: Hold offline pods to a per-device disk budget (switches the disk and disk_devices collectors on).
    enabled: bool = False
    #: Bytes per second all offline pods together may read from one block device; 0: no limit.
    read_bps: int = Field(default=0, ge=0)
    #: Bytes per second all offline pods together may write to one block device; 0: no limit.
    write_bps: int = Field(default=0, ge=0)
    #: Read operations per second all offline pods together may issue to one block device; 0: no limit.
    read_iops: int = Field(default=0, ge=0)
    #: Write operations per second all offline pods together may issue to one block device; 0: no limit.
    write_iops: int = Field(default=0, ge=0)
    #: Share of the budget offline pods keep while the device is busy or online pods use it much.
    tightened_share: float = Field(default=0.25, gt=0, le=1)
    #: A device busy (I/O in flight, /proc/diskstats io_ticks) more than this share of the time tightens it.
    busy_ratio: float = Field(default=0.8, gt=0, le=1)
    #: Online pods reading plus writing more than this many bytes per second on a device tighten it; 0: off.
    online_bps: int = Field(default=0, ge=0)
    #: The budget is tightened, or released again, only when this many passes in a row agree.
    confirm_passes: int = Field(default=2, ge=1, le=10)
    #: Each offline pod keeps at least this many bytes per second of a limited direction.
    min_pod_bps: int = Field(default=1 << 20, ge=1)
    #: Each offline pod keeps at least this many operations per second of a limited direction.
    min_pod_iops: int = Field(default=10, ge=1)
    #: Block devices (names in /sys/block) limited although they are loop, ram or zram devices.
    include_devices: tuple[str, ...] = ()


class RunQueueProtectionConfig(Strict):
    """Batch CPU steered by what online pods feel (agent/enforce/strategies/run_queue_guard.py)."""

    #: Cut batch CPU when online pods wait on run queues more than their quiet baseline.
    enabled: bool = False
    #: A reading rises above both baseline × this and baseline + rise_points (share of runnable time waiting).
    rise_ratio: float = Field(default=1.5, gt=1, le=100)
    rise_points: float = Field(default=0.05, gt=0, le=1)  # the least rise that counts, in points of the share
    #: A reading is quiet below baseline × this (or baseline + rise_points / 2); in between the ceiling holds.
    quiet_ratio: float = Field(default=1.2, ge=1, le=100)
    #: A run-queue rise multiplies the offline CPU budget by this, at once (an SLO missed: the floor at once).
    cut_factor: float = Field(default=0.5, gt=0, lt=1)
    #: After this many quiet readings in a row the budget grows by grow_share of allocatable per quiet reading.
    quiet_readings: int = Field(default=2, ge=1, le=100)
    grow_share: float = Field(default=0.05, gt=0, le=1)  # share of allocatable the budget grows per quiet reading
    slo_feedback: bool = True  # judge pods that declare an SLO (colo.io/slo-*, scraped every 5 s) by their slack

    @model_validator(mode="after")
    def _hysteresis(self) -> RunQueueProtectionConfig:
        if self.quiet_ratio < self.rise_ratio:
            return self
        raise ValueError("enforcement.rq_protection.quiet_ratio must be below rise_ratio")


class EnforcementConfig(Strict):
    """Offline suppression and OOM preference (agent/enforce/stage.py)."""

    #: Suppress offline pods' CPU and give them the lowest OOM preference.
    enabled: bool = True
    #: How offline CPU is held to its budget: pod-level CFS quotas, a cpuset, or not at all.
    cpu_policy: Literal["cfsQuota", "cpuset", "none"] = "cfsQuota"
    #: Offline CPU budget = allocatable × this − online usage − system usage.
    cpu_suppress_threshold: float = Field(default=0.65, gt=0, le=1)
    #: The budget never falls below this many cores.
    cpu_min_offline_cores: float = Field(default=0.1, ge=0.01)
    #: The budget grows by at most this share of the node per interval.
    cpu_growth_per_interval: float = Field(default=0.1, gt=0, le=1)
    #: A quota is rewritten only when it moved by more than this share.
    cpu_change_threshold: float = Field(default=0.01, ge=0, lt=1)
    # online + system CPU below this share of allocatable releases offline pods to their own limits; 0: never
    cpu_release_below: float = Field(default=0.3, ge=0, le=0.9)
    cpu_release_confirm_passes: int = Field(
        default=2,
        ge=1,
        le=10,
        description="offline pods are released, or suppressed again, only when this many passes in a row "
        "agree (a one-second spike changes nothing; a real rise is answered on the second pass)",
    )
    #: Share of the budget that best-effort offline pods (no CPU request) share.
    besteffort_share: float = Field(default=0.1, gt=0, le=1)
    #: CFS period of the quotas written; keep it equal to kubelet's --cpu-cfs-quota-period.
    cpu_period_us: int = Field(default=100_000, ge=1000, le=1_000_000)
    #: On cgroup v2, give offline pods memory.high.
    memory_high: bool = True
    #: memory.high is never set below this.
    memory_high_min_bytes: int = Field(default=64 << 20, ge=4096)
    #: oom_score_adj given to every process of an offline pod.
    oom_score_adj: int = Field(default=1000, ge=-1000, le=1000)
    #: How often oom_score_adj is applied again (new processes).
    oom_reapply_seconds: float = Field(default=5.0, gt=0)
    #: kubelet's CPU manager state: the cpuset policy avoids the CPUs it gave exclusively.
    cpu_manager_state: str = "/var/lib/kubelet/cpu_manager_state"
    #: What enforcement changed, kept to put it back after a restart; '' keeps the ledger in memory only.
    ledger_file: str = "/var/lib/colo/enforcement-ledger.json"  # "" keeps the ledger in memory only
    eviction: EvictionConfig = EvictionConfig()
    disk: DiskQosConfig = DiskQosConfig()
    rq_protection: RunQueueProtectionConfig = RunQueueProtectionConfig()


class BatchConfig(Strict):
    """Batch pods' own limits from kubernetes.io/batch-cpu / batch-memory (agent/enforce/strategies/batch_limits.py).

    The CFS period is `enforcement.cpu_period_us` (keep it equal to kubelet's --cpu-cfs-quota-period), so
    suppression and the batch limits never disagree on it."""

    #: Write batch pods' own limits from kubernetes.io/batch-cpu / batch-memory (false: nothing more is written; what
    #: is there stays).
    enabled: bool = True
    # v2 cpu.weight from the shares: "linear" is what kubelet writes for pod cgroups (KEP-2254)
    weight_formula: Literal["linear", "quadratic"] = "linear"
    cpu_cfs_quota: bool = True  # kubelet's --cpu-cfs-quota: false writes no CFS quota from batch-cpu limits
