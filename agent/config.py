"""colo-agent's configuration: one YAML file, environment variables and flags, validated by pydantic.

Precedence: flags > environment (COLO_<KEY>, nested keys joined by '__') > file > defaults. A bad value
stops start-up with exit code 2 and a message naming the key and what is allowed.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from common.cli import Flags
from common.config import ConfigError, load
from serving.settings import ServingSettings

DEFAULT_PORT = 9817
ENV_PREFIX = "COLO_"
LogLevel = Literal["debug", "info", "warning", "error"]

__all__ = ["AgentConfig", "ConfigError", "build_parser", "load_config"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClassifyConfig(Strict):
    """Which pods are offline (see agent/classify.py)."""

    offline_priority_classes: tuple[str, ...] = ("koord-batch", "koord-free")
    offline_priority_below: int = 0


class CollectorsConfig(Strict):
    """Collectors that can be switched off (node and pods always run: the decisions need them)."""

    tiers: bool = True
    containers: bool = True
    psi: bool = True
    network: bool = True

    def enabled(self) -> frozenset[str]:
        optional = {name for name in ("tiers", "containers", "psi", "network") if getattr(self, name)}
        return frozenset({"node", "pods"} | optional)


class OversubscriptionConfig(Strict):
    """How oversubscribable capacity is computed and published (agent/capacity.py)."""

    enabled_on_all_nodes: bool = False
    # node_peak: the peak of the node's online usage; pod_peaks: Σ each pod's peak (before issue 20)
    predictor: Literal["node_peak", "pod_peaks"] = "node_peak"
    peak_window: str = "max_avg_1d"
    min_history_seconds: float = Field(default=300.0, ge=0)
    # chosen on the first half of the Bitbrains month with colo-sim (docs/simulation.md): CPU is throttled back
    # from batch pods in milliseconds, memory is not, and online pods that arrive need room at once
    cpu_reclaim_ratio: float = Field(default=0.95, gt=0, le=1)
    memory_reclaim_ratio: float = Field(default=0.7, gt=0, le=1)
    update_fraction: float = Field(default=0.1, ge=0, le=1)
    update_interval_seconds: float = Field(default=60.0, gt=0)
    stall_intervals: int = Field(default=5, ge=1)
    extended_resources: bool = True  # kubernetes.io/batch-* in node status; false removes them (issue 11)


class EvictionConfig(Strict):
    """Eviction by watermarks (agent/eviction.py); node annotations override the watermarks."""

    enabled: bool = True
    cpu_high_watermark: int = Field(default=80, ge=0, le=100)
    cpu_low_watermark: int = Field(default=30, ge=0, le=100)
    memory_high_watermark: int = Field(default=60, ge=0, le=100)
    memory_low_watermark: int = Field(default=30, ge=0, le=100)
    smoothing_seconds: float = Field(default=5.0, gt=0)
    max_per_round: int = Field(default=2, ge=1)
    cooldown_seconds: float = Field(default=10.0, ge=0)
    require_overcommit_when_oversubscribed: bool = True
    taint: bool = False
    kill_when_api_down_memory: bool = True
    kill_when_api_down_cpu: bool = False
    kill_after_seconds: float = Field(default=30.0, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> EvictionConfig:
        for res in ("cpu", "memory"):
            if getattr(self, f"{res}_high_watermark") <= getattr(self, f"{res}_low_watermark"):
                raise ValueError(f"eviction.{res}_high_watermark must be above eviction.{res}_low_watermark")
        return self


class EnforcementConfig(Strict):
    """Offline suppression and OOM preference (agent/enforcer.py)."""

    enabled: bool = True
    cpu_policy: Literal["cfsQuota", "cpuset", "none"] = "cfsQuota"
    cpu_suppress_threshold: float = Field(default=0.65, gt=0, le=1)
    cpu_min_offline_cores: float = Field(default=0.1, ge=0.01)
    cpu_growth_per_interval: float = Field(default=0.1, gt=0, le=1)
    cpu_change_threshold: float = Field(default=0.01, ge=0, lt=1)
    # online + system CPU below this share of allocatable releases offline pods to their own limits; 0: never
    cpu_release_below: float = Field(default=0.3, ge=0, le=0.9)
    besteffort_share: float = Field(default=0.1, gt=0, le=1)
    cpu_period_us: int = Field(default=100_000, ge=1000, le=1_000_000)
    memory_high: bool = True
    memory_high_min_bytes: int = Field(default=64 << 20, ge=4096)
    oom_score_adj: int = Field(default=1000, ge=-1000, le=1000)
    oom_reapply_seconds: float = Field(default=5.0, gt=0)
    cpu_manager_state: str = "/var/lib/kubelet/cpu_manager_state"
    ledger_file: str = "/var/lib/colo/enforcement-ledger.json"  # "" keeps the ledger in memory only
    eviction: EvictionConfig = EvictionConfig()


class CpuBurstConfig(Strict):
    """CFS burst for online pods with a CPU limit (agent/qos/burst.py)."""

    enabled: bool = False  # every online pod; without it a pod opts in by volcano.sh/enable-quota-burst=true
    burst_percent: int = Field(default=100, ge=1, le=100)  # of the quota: the kernel refuses a burst above it


class QuotaBurstConfig(Strict):
    """Raise a throttled online container's quota while the node is idle (agent/qos/quota_burst.py)."""

    enabled: bool = False
    max_quota_burst_percent: int = Field(default=300, ge=101, le=1000)  # of the container's own quota
    step_percent: int = Field(default=25, ge=1, le=100)  # of its own quota, added per pass
    throttled_ratio: float = Field(default=0.1, gt=0, le=1)  # throttled periods / periods that asks for more
    node_safe_usage: float = Field(default=0.6, gt=0, le=1)  # node CPU busy / CPUs under which quota grows
    restore_after_seconds: float = Field(default=30.0, ge=0)  # quiet within its own quota that long: restored


class MemoryQosConfig(Strict):
    """memory.min/low and memory.high for online pods on cgroup v2 (agent/qos/memory_qos.py)."""

    enabled: bool = False
    protection: Literal["low", "min", "none"] = "low"  # low: reclaimed last; min: never reclaimed
    protect_percent: int = Field(default=100, ge=0, le=100)  # of the memory request
    high_percent: int = Field(default=0, ge=0, le=100)  # memory.high from the limit; 0: off


class QosConfig(Strict):
    """What Colo does for online pods themselves: CPU burst and memory QoS (all off by default)."""

    cpu_burst: CpuBurstConfig = CpuBurstConfig()
    quota_burst: QuotaBurstConfig = QuotaBurstConfig()
    memory: MemoryQosConfig = MemoryQosConfig()


class BatchConfig(Strict):
    """Batch pods' own limits from kubernetes.io/batch-cpu / batch-memory (agent/strategies/batch_limits.py).

    The CFS period is `enforcement.cpu_period_us` (keep it equal to kubelet's --cpu-cfs-quota-period), so
    suppression and the batch limits never disagree on it."""

    enabled: bool = True
    # v2 cpu.weight from the shares: "linear" is what kubelet writes for pod cgroups (KEP-2254)
    weight_formula: Literal["linear", "quadratic"] = "linear"
    cpu_cfs_quota: bool = True  # kubelet's --cpu-cfs-quota: false writes no CFS quota from batch-cpu limits


class AgentConfig(Strict):
    listen: str | None = None  # HOST:PORT; default 127.0.0.1 standalone, 0.0.0.0 in a cluster
    interval: float = Field(default=1.0, ge=0.05, le=60)
    standalone: bool = False
    cgroup_root: str = "/"
    host_root: str = "/"
    cgroup_driver: Literal["systemd", "cgroupfs"] | None = None
    state_file: str = "/var/lib/colo/agent-state.json"  # "" disables persistence
    state_save_seconds: float = Field(default=60.0, ge=1)
    log_level: LogLevel = "info"
    log_format: Literal["text", "json"] = "text"
    discovery_seconds: float = Field(default=10.0, gt=0)
    container_memory_detail_every: int = Field(default=5, ge=1)  # passes between containers' memory.stat reads
    aggregate_label_keys: tuple[str, ...] = ("quota.scheduling.koordinator.sh/name",)
    pod_windows: tuple[str, ...] | None = None  # pod windows exported to Prometheus; None: all (JSON has all)
    kubeconfig: str | None = None
    node_name: str | None = None
    dry_run: bool = False
    collectors: CollectorsConfig = CollectorsConfig()
    classify: ClassifyConfig = ClassifyConfig()
    oversubscription: OversubscriptionConfig = OversubscriptionConfig()
    enforcement: EnforcementConfig = EnforcementConfig()
    batch: BatchConfig = BatchConfig()
    serving: ServingSettings = ServingSettings()
    qos: QosConfig = QosConfig()

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str | None) -> str | None:
        if v is None:
            return v
        host, sep, port = v.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError("must be HOST:PORT with a port 0-65535, e.g. 127.0.0.1:9817")
        return v

    @field_validator("cgroup_root", "host_root")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError("must be an absolute path")
        return v

    @model_validator(mode="after")
    def _window_names(self) -> AgentConfig:
        from agent.windows import WINDOW_NAMES

        if self.oversubscription.peak_window not in WINDOW_NAMES:
            raise ValueError(f"oversubscription.peak_window must be one of {', '.join(WINDOW_NAMES)}")
        unknown = set(self.pod_windows or ()) - set(WINDOW_NAMES)
        if unknown:
            raise ValueError(f"pod_windows: {', '.join(sorted(unknown))} not among {', '.join(WINDOW_NAMES)}")
        return self

    def listen_address(self, in_cluster: bool) -> tuple[str, int]:
        if self.listen is None:
            return ("0.0.0.0" if in_cluster else "127.0.0.1"), DEFAULT_PORT
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)


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
        shown_default="/var/lib/colo/agent-state.json",
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
