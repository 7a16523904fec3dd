"""colo-agent's configuration: one YAML file, environment variables and flags, validated by pydantic.

Precedence: flags > environment (COLO_<KEY>, nested keys joined by '__') > file > defaults. A bad value
stops start-up with exit code 2 and a message naming the key and what is allowed.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

DEFAULT_PORT = 9817
LogLevel = Literal["debug", "info", "warning", "error"]


class ConfigError(Exception):
    """Raised for any invalid configuration; the message names the key."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClassifyConfig(Strict):
    """Which pods are offline (see agent/classify.py)."""

    offline_priority_classes: tuple[str, ...] = ("koord-batch", "koord-free")
    offline_priority_below: int = 0


class OversubscriptionConfig(Strict):
    """How oversubscribable capacity is computed and published (agent/capacity.py)."""

    enabled_on_all_nodes: bool = False
    peak_window: str = "max_avg_1h"
    min_history_seconds: float = Field(default=300.0, ge=0)
    cpu_reclaim_ratio: float = Field(default=0.8, gt=0, le=1)
    memory_reclaim_ratio: float = Field(default=0.75, gt=0, le=1)
    update_fraction: float = Field(default=0.1, ge=0, le=1)
    update_interval_seconds: float = Field(default=60.0, gt=0)
    stall_intervals: int = Field(default=5, ge=1)
    extended_resources: bool = False


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
    discovery_seconds: float = Field(default=10.0, gt=0)
    container_memory_detail_every: int = Field(default=5, ge=1)  # passes between containers' memory.stat reads
    aggregate_label_keys: tuple[str, ...] = ("quota.scheduling.koordinator.sh/name",)
    pod_windows: tuple[str, ...] | None = None  # pod windows exported to Prometheus; None: all (JSON has all)
    kubeconfig: str | None = None
    node_name: str | None = None
    dry_run: bool = False
    classify: ClassifyConfig = ClassifyConfig()
    oversubscription: OversubscriptionConfig = OversubscriptionConfig()
    enforcement: EnforcementConfig = EnforcementConfig()
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


def _set_nested(target: dict[str, Any], dotted: Sequence[str], value: Any) -> None:
    for part in dotted[:-1]:
        nxt = target.setdefault(part, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"{'.'.join(dotted)}: {part} is not a section")
        target = nxt
    target[dotted[-1]] = value


_SERVICE_LINK = re.compile(r".*_(SERVICE_HOST|SERVICE_PORT(_.+)?|PORT(_\d+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)?)$")


def _env_value(key: str, value: str) -> Any:
    """Plain strings stay strings (pydantic converts numbers and booleans); `[a, b]` and `{k: v}` are YAML."""
    if value[:1] in ("[", "{"):
        try:
            return yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{key}: not a YAML list or mapping: {exc}") from None
    return value


def _env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in env.items():
        # Kubernetes' service links (COLO_AGENT_SERVICE_HOST, COLO_AGENT_PORT_9817_TCP...) are not settings
        if not key.startswith("COLO_") or key == "COLO_CONFIG" or _SERVICE_LINK.match(key):
            continue
        _set_nested(out, key[5:].lower().split("__"), _env_value(key, value))
    return out


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(merged.get(k), dict):
            merged[k] = _merge(merged[k], v)
        else:
            merged[k] = v
    return merged


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="colo-agent", description="Colo node agent and metrics exporter")
    p.add_argument("--config", metavar="FILE", help="YAML config file (also COLO_CONFIG)")
    p.add_argument("--listen", metavar="HOST:PORT", help="address of /metrics, /healthz and the JSON API")
    p.add_argument("--interval", type=float, metavar="SECONDS", help="sampling interval (default 1)")
    p.add_argument("--standalone", action="store_true", default=None, help="never contact a cluster")
    p.add_argument("--cgroup-root", metavar="PATH", help="kubelet's --cgroup-root (default /)")
    p.add_argument("--host-root", metavar="PATH", help="where the host's / is mounted (default /)")
    p.add_argument("--cgroup-driver", choices=["systemd", "cgroupfs"], help="skip driver detection")
    p.add_argument("--state-file", metavar="PATH", help="window state file ('' disables)")
    p.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig (default: in-cluster config)")
    p.add_argument("--node-name", metavar="NAME", help="this node's name (default: $NODE_NAME)")
    p.add_argument("--dry-run", action="store_true", default=None, help="decide and report, write nothing")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    return p


def _format_error(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "config"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        lines.append(f"{key}: {msg} (got {e.get('input')!r})")
    return "invalid configuration: " + "; ".join(lines)


def load_config(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> AgentConfig:
    """Parse flags, environment and file into a validated config, or raise ConfigError."""
    env = os.environ if env is None else env
    args = build_parser().parse_args(argv)
    data: dict[str, Any] = {}
    path = args.config or env.get("COLO_CONFIG")
    if path:
        try:
            with open(path) as f:
                loaded = yaml.safe_load(f) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"config file {path}: {exc}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {path}: the top level must be a mapping of keys")
        data = loaded
    data = _merge(data, _env_overrides(env))
    if env.get("NODE_NAME") and "node_name" not in data:
        data["node_name"] = env["NODE_NAME"]
    flags = {k: v for k, v in vars(args).items() if k != "config" and v is not None}
    data = _merge(data, flags)
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_error(exc)) from None
