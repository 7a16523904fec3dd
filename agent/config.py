"""colo-agent's configuration: one YAML file, environment variables and flags, validated by pydantic.

Precedence: flags > environment (COLO_<KEY>, nested keys joined by '__') > file > defaults. A bad value
stops start-up with exit code 2 and a message naming the key and what is allowed. This module holds the root
model, its top-level keys and the loading; the sections it nests are in agent/config_sections/, by what reads them.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator, model_validator

from agent.config_sections.enforcement import BatchConfig, EnforcementConfig
from agent.config_sections.lending import ClassifyConfig, OversubscriptionConfig
from agent.config_sections.pod_qos import NetworkQosConfig, QosConfig
from agent.config_sections.strict import Strict
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


class CollectorSwitches(Strict):
    """The `collectors` section's base: its fields, one per switchable collector, come from the collectors'
    registry (agent/sense/collectors/registry.py)."""

    def enabled(self) -> frozenset[str]:
        return enabled_from(self.model_dump())


if TYPE_CHECKING:
    CollectorsConfig = CollectorSwitches
else:
    CollectorsConfig = switches_model(CollectorSwitches)


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
        AgentConfig,
        path=path,
        env=env,
        env_prefix=ENV_PREFIX,
        flags=layered,
        below_file=below,
        env_skip=("COLO_CONFIG", "COLO_CONTROLLER_"),
    )
