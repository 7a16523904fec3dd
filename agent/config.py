"""colo-agent's configuration: one YAML file, environment variables and flags, validated by pydantic.

Precedence: flags > environment (COLO_<KEY>, nested keys joined by '__') > file > defaults. A bad value
stops start-up with exit code 2 and a message naming the key and what is allowed.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent.sense.collectors import enabled_from, switches_model
from agent.windows.persist import FILE_NAME as STATE_FILE_NAME
from common.cli import Flags
from common.config import ConfigError, load
from common.listen import ListenAddress, split_host_port
from serving.settings import ServingSettings

DEFAULT_PORT = 9817
ENV_PREFIX = "COLO_"
#: The DaemonSet's state file, on the node's /var/lib/colo hostPath (the manifests create the directory); the
#: windows in their binary format, named for it (agent/windows/persist.py migrates the old agent-state.json).
POD_STATE_FILE = f"/var/lib/colo/{STATE_FILE_NAME}"
DISK_COLLECTORS = ("disk", "disk_devices")  # what disk QoS reads (agent/sense/collectors/disk.py)
LogLevel = Literal["debug", "info", "warning", "error"]

__all__ = ["AgentConfig", "ConfigError", "build_parser", "load_config"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClassifyConfig(Strict):
    """Which pods are offline (see contract/classify.py)."""

    #: PriorityClasses whose pods are offline (koordinator's batch and free classes).
    offline_priority_classes: tuple[str, ...] = ("koord-batch", "koord-free")
    #: Pods with a spec.priority below this are offline (system-critical pods never are).
    offline_priority_below: int = 0


class CollectorSwitches(Strict):
    """The `collectors` section's base: its fields, one per switchable collector, come from the collectors'
    registry (agent/sense/collectors/registry.py)."""

    def enabled(self) -> frozenset[str]:
        return enabled_from(self.model_dump())


if TYPE_CHECKING:
    CollectorsConfig = CollectorSwitches
else:
    CollectorsConfig = switches_model(CollectorSwitches)


class OversubscriptionConfig(Strict):
    """How oversubscribable capacity is computed (agent/capacity/lendable.py) and published (agent/capacity/owner.py,
    agent/capacity/publish_rules.py, docs/publishing.md)."""

    #: Publish capacity on every node, not only on nodes labelled volcano.sh/oversubscription=true.
    enabled_on_all_nodes: bool = False
    #: node_peak: the peak of the node's online usage (one series, Σ online pods); pod_peaks: Σ each online
    #: pod's own peak, the rule before colo-sim measured both (docs/simulation.md).
    predictor: Literal["node_peak", "pod_peaks"] = "node_peak"
    #: The window peaks are taken over (max_avg_1d: the highest 5-minute average of the last day), or the
    #: current 5-minute average if higher.
    peak_window: str = "max_avg_1d"
    #: node_peak: an online pod seen for less than this adds what it requested and does not use yet to the
    #: node's peak (and the node's own series needs this much history); pod_peaks: such a pod counts its full
    #: request (or its usage, if higher).
    min_history_seconds: float = Field(default=300.0, ge=0)
    #: Share of the node's allocatable CPU the online peak, the system peak and the batch capacity may fill
    #: together (chosen with colo-sim on the first half of the Bitbrains month: CPU is taken back from batch
    #: pods within a sampling pass).
    cpu_reclaim_ratio: float = Field(default=0.95, gt=0, le=1)
    #: Share of the node's allocatable memory the online peak, the system peak and the batch capacity may fill
    #: together (chosen likewise; memory is taken back only by eviction, and online pods that arrive need room
    #: at once).
    memory_reclaim_ratio: float = Field(default=0.7, gt=0, le=1)
    update_fraction: float = Field(
        default=0.1, ge=0, le=1,
        description="hysteresis band, both directions: a published value moves only when the new one differs "
        "by more than this fraction of it",
    )  # fmt: skip
    update_interval_seconds: float = Field(
        default=60.0, gt=0,
        description="minimum seconds between two writes of the same set (annotations, or status) that are not "
        "for safety; a drop for safety and a rise to the floor are written at once",
    )  # fmt: skip
    publish_window_seconds: float = Field(
        default=60.0, gt=0,
        description="the number proposed for publishing is the mean of the capacities computed in this many "
        "seconds: one noisy sample of system usage moves it by 1/window",
    )  # fmt: skip
    pressure_margin_percent: float = Field(
        default=10.0, ge=0, le=100,
        description="a resource is under pressure when the node's smoothed usage of it (eviction's average, "
        "% of allocatable) is within this many points of its eviction high watermark; a drop of its capacity "
        "is then written at once",
    )  # fmt: skip
    #: After this many sampling intervals without a pass, sampling counts as stalled: the annotations go to 0
    #: and kubernetes.io/batch-* to what the node's batch pods request.
    stall_intervals: int = Field(default=5, ge=1)
    #: Publish kubernetes.io/batch-* in node status; false (or the label removed) holds them at what the
    #: node's batch pods request until none do, then removes them.
    extended_resources: bool = True


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
    cut_factor: float = Field(default=0.5, gt=0, lt=1)  # a rise multiplies the offline CPU budget by this, at once
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
        default=2, ge=1, le=10,
        description="offline pods are released, or suppressed again, only when this many passes in a row "
        "agree (a one-second spike changes nothing; a real rise is answered on the second pass)",
    )  # fmt: skip
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


class CpuBurstConfig(Strict):
    """CFS burst for online pods with a CPU limit (agent/enforce/strategies/cpu_burst.py)."""

    enabled: bool = False  # every online pod; without it a pod opts in by volcano.sh/enable-quota-burst=true
    burst_percent: int = Field(default=100, ge=1, le=100)  # of the quota: the kernel refuses a burst above it


class QuotaBurstConfig(Strict):
    """Raise a throttled online container's quota while the node is idle (agent/enforce/strategies/quota_burst.py)."""

    #: Raise a throttled online container's quota while the node is idle.
    enabled: bool = False
    max_quota_burst_percent: int = Field(default=300, ge=101, le=1000)  # of the container's own quota
    step_percent: int = Field(default=25, ge=1, le=100)  # of its own quota, added per pass
    throttled_ratio: float = Field(default=0.1, gt=0, le=1)  # throttled periods / periods that asks for more
    node_safe_usage: float = Field(default=0.6, gt=0, le=1)  # node CPU busy / CPUs under which quota grows
    restore_after_seconds: float = Field(default=30.0, ge=0)  # quiet within its own quota that long: restored


class MemoryQosConfig(Strict):
    """memory.min/low and memory.high for online pods on cgroup v2 (agent/enforce/strategies/memory_qos.py)."""

    #: memory.min/low (and optionally memory.high) for online pods, cgroup v2 only.
    enabled: bool = False
    protection: Literal["low", "min", "none"] = "low"  # low: reclaimed last; min: never reclaimed
    protect_percent: int = Field(default=100, ge=0, le=100)  # of the memory request
    high_percent: int = Field(default=0, ge=0, le=100)  # memory.high from the limit; 0: off


class NetworkQosConfig(Strict):
    """Egress limits of offline pods (agent/enforce/strategies/net_egress.py, docs/network-qos.md); off by default."""

    #: Hold offline pods' egress to a node budget with a token bucket in each pod's network namespace (needs
    #: collectors.pod_network).
    enabled: bool = False
    #: Bytes per second all offline pods together may send, split equally among them.
    offline_egress_bytes_per_second: int = Field(default=125_000_000, ge=1)
    #: Each offline pod's floor, bytes per second (a pod never gets less, even tightened).
    min_pod_bytes_per_second: int = Field(default=1_000_000, ge=1)
    #: Online traffic on the uplink (bytes/s sent by the node minus what offline pods send) above which the
    #: budget is tightened.
    online_high_bytes_per_second: int = Field(default=500_000_000, ge=1)
    #: Online traffic under which a tightened budget is released (hysteresis: below the high mark).
    online_low_bytes_per_second: int = Field(default=300_000_000, ge=0)
    #: The budget while tightened, percent of offline_egress_bytes_per_second.
    tightened_percent: int = Field(default=20, ge=1, le=100)
    #: The node's uplink interfaces; empty: every physical interface.
    uplinks: tuple[str, ...] = ()
    #: Passes between two checks of a limit that did not change (each check enters the pod's namespace; pods
    #: take turns).
    verify_every: int = Field(default=60, ge=1)

    @model_validator(mode="after")
    def _hysteresis(self) -> NetworkQosConfig:
        if self.online_low_bytes_per_second >= self.online_high_bytes_per_second:
            raise ValueError("network_qos.online_low_bytes_per_second must be below online_high_bytes_per_second")
        return self


class QosConfig(Strict):
    """What Colo does for online pods themselves: CPU burst and memory QoS (all off by default)."""

    cpu_burst: CpuBurstConfig = CpuBurstConfig()
    quota_burst: QuotaBurstConfig = QuotaBurstConfig()
    memory: MemoryQosConfig = MemoryQosConfig()


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


class AgentConfig(Strict):
    listen: ListenAddress | None = None  # HOST:PORT; default 127.0.0.1 standalone, 0.0.0.0 in a cluster
    #: Sampling interval, seconds.
    interval: float = Field(default=1.0, ge=0.05, le=60)
    #: Never contact a cluster, even in a pod or with a kubeconfig.
    standalone: bool = False
    #: kubelet's --cgroup-root (KinD: /kubelet).
    cgroup_root: str = "/"
    #: Where the host's / is mounted (the DaemonSet uses /host).
    host_root: str = "/"
    #: systemd or cgroupfs; unset: detected from this setting, kubelet's config file, kubelet's command line, then the
    #: filesystem (the rule that decided is printed).
    cgroup_driver: Literal["systemd", "cgroupfs"] | None = None
    #: Where the windows survive restarts; '' disables persistence. Unset: /var/lib/colo/windows.colowin
    #: in a pod (the DaemonSet's hostPath), else the per-user state directory ($XDG_STATE_HOME/colo or
    #: ~/.local/state/colo). A path you name must be in a directory that exists. A windows.colowin not there yet is
    #: read from its old name agent-state.json beside it, removed at the first save.
    state_file: str | None = None
    #: How often the windows are saved (and at stop).
    state_save_seconds: float = Field(default=60.0, ge=1)
    #: Log threshold.
    log_level: LogLevel = "info"
    #: json: one JSON object per line (time, level, logger, message, exception).
    log_format: Literal["text", "json"] = "text"
    #: Standalone: how often the cgroup tree is scanned for pods.
    discovery_seconds: float = Field(default=10.0, gt=0)
    container_memory_detail_every: int = Field(default=5, ge=1)  # passes between containers' memory.stat reads
    #: Pod labels whose values aggregate pod usage in the metrics (koordinator's elastic quota name).
    aggregate_label_keys: tuple[str, ...] = ("quota.scheduling.koordinator.sh/name",)
    pod_windows: tuple[str, ...] | None = None  # pod windows exported to Prometheus; None: all (JSON has all)
    #: Kubeconfig file; unset: the in-cluster service account in a pod, else standalone.
    kubeconfig: str | None = None
    #: This node's name; unset: $NODE_NAME (the downward API), else the hostname.
    node_name: str | None = None
    #: Compute, log and export every decision; write nothing (no cgroup writes, annotations, evictions).
    dry_run: bool = False
    collectors: CollectorsConfig = CollectorsConfig()
    classify: ClassifyConfig = ClassifyConfig()
    oversubscription: OversubscriptionConfig = OversubscriptionConfig()
    enforcement: EnforcementConfig = EnforcementConfig()
    batch: BatchConfig = BatchConfig()
    serving: ServingSettings = ServingSettings()
    qos: QosConfig = QosConfig()
    network_qos: NetworkQosConfig = NetworkQosConfig()

    @field_validator("cgroup_root", "host_root")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError("must be an absolute path")
        return v

    @model_validator(mode="after")
    def _window_names(self) -> AgentConfig:
        from agent.windows.store import WINDOW_NAMES

        if self.oversubscription.peak_window not in WINDOW_NAMES:
            raise ValueError(f"oversubscription.peak_window must be one of {', '.join(WINDOW_NAMES)}")
        unknown = set(self.pod_windows or ()) - set(WINDOW_NAMES)
        if unknown:
            raise ValueError(f"pod_windows: {', '.join(sorted(unknown))} not among {', '.join(WINDOW_NAMES)}")
        if self.network_qos.enabled and "pod_network" not in self.collectors.enabled():
            raise ValueError("network_qos.enabled needs collectors.pod_network: true (the offline pods' traffic)")
        return self

    @model_validator(mode="after")
    def _disk_collectors(self) -> AgentConfig:
        """Disk QoS decides on the disk collectors: it switches them on, and refuses a switch set off."""
        if not self.enforcement.disk.enabled:
            return self
        off = [n for n in DISK_COLLECTORS if n in self.collectors.model_fields_set and not getattr(self.collectors, n)]
        if off:
            raise ValueError(f"enforcement.disk.enabled needs collectors.{off[0]}: it decides on what it reads")
        object.__setattr__(self, "collectors", self.collectors.model_copy(update=dict.fromkeys(DISK_COLLECTORS, True)))
        return self

    def state_file_in(self, in_pod: bool, env: Mapping[str, str]) -> str:
        """The state file to use: the configured one, else the default of where the agent runs."""
        if self.state_file is not None:
            return self.state_file
        return POD_STATE_FILE if in_pod else os.path.join(user_state_dir(env), STATE_FILE_NAME)

    def listen_address(self, in_cluster: bool) -> tuple[str, int]:
        if self.listen is None:
            return ("0.0.0.0" if in_cluster else "127.0.0.1"), DEFAULT_PORT
        return split_host_port(self.listen)


def user_state_dir(env: Mapping[str, str]) -> str:
    """Colo's per-user state directory, as the XDG Base Directory specification places it."""
    base = env.get("XDG_STATE_HOME", "")
    if not os.path.isabs(base):  # unset, empty or relative: the specification says to ignore it
        base = os.path.join(env.get("HOME") or os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "colo")


def build_parser() -> argparse.ArgumentParser:
    return build_flags().parser


def build_flags() -> Flags:
    """colo-agent's flags; each help names its default and its COLO_* variable."""
    f = Flags(
        "colo-agent",
        "Colo node agent and metrics exporter: measures this node's pods, publishes oversubscribable "
        "capacity and protects online pods from offline ones.",
        ENV_PREFIX,
        epilog="Without --kubeconfig and outside a pod it runs standalone on this machine's /proc and cgroups.",
    )
    f.parser.add_argument("--config", metavar="FILE", help="YAML file, or a ConfigMap holding it (env COLO_CONFIG)")
    f.add(
        "--listen",
        "listen",
        "address of /metrics, /healthz and the JSON API",
        metavar="HOST:PORT",
        shown_default="127.0.0.1:9817 standalone, 0.0.0.0:9817 in a cluster",
    )
    f.add("--interval", "interval", "sampling interval", type=float, metavar="SECONDS", shown_default="1")
    f.add("--standalone", "standalone", "never contact a cluster", action="store_true", shown_default="off")
    f.add("--cgroup-root", "cgroup_root", "kubelet's --cgroup-root (KinD: /kubelet)", metavar="PATH", shown_default="/")
    f.add("--host-root", "host_root", "where the host's / is mounted", metavar="PATH", shown_default="/")
    f.add(
        "--cgroup-driver",
        "cgroup_driver",
        "skip driver detection",
        choices=["systemd", "cgroupfs"],
        shown_default="detected",
    )
    f.add(
        "--state-file",
        "state_file",
        "window state file ('' disables)",
        metavar="PATH",
        shown_default="/var/lib/colo/windows.colowin in a pod, else $XDG_STATE_HOME/colo/windows.colowin",
    )
    f.add("--kubeconfig", "kubeconfig", "kubeconfig file", metavar="PATH", shown_default="in-cluster config in a pod")
    f.add("--node-name", "node_name", "this node's name", metavar="NAME", shown_default="$NODE_NAME, else the hostname")
    f.add(
        "--dry-run",
        "dry_run",
        "decide, log and export everything, write nothing",
        action="store_true",
        shown_default="off",
    )
    f.add_logging()
    f.parser.add_argument("--check", action="store_true", help="validate the configuration, print it, and exit")
    for action in f.parser._actions:
        if action.dest not in ("help", "version"):
            action.default = None  # unset flags must not override the file and the environment
    return f


def load_config(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> AgentConfig:
    """Parse flags, environment and file into a validated config, or raise ConfigError naming the source."""
    env = os.environ if env is None else env
    flags = build_flags()
    args = flags.parser.parse_args(argv)
    values = vars(args)
    path = args.config or env.get("COLO_CONFIG")
    layered = {key: (flag, values[key]) for key, flag in flags.flag_of.items()}
    # the downward API's NODE_NAME, below the file and COLO_NODE_NAME
    below = {"node_name": ("NODE_NAME", env["NODE_NAME"])} if env.get("NODE_NAME") else {}
    return load(
        AgentConfig, path=path, env=env, env_prefix=ENV_PREFIX, flags=layered, below_file=below,
        env_skip=("COLO_CONFIG", "COLO_CONTROLLER_"),
    )  # fmt: skip
