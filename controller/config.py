"""The controller's own settings (YAML file + CLI overrides), validated with pydantic.

Every duration accepts seconds or a Go duration string. Unknown keys are errors: a typo must stop start-up
(exit code 2) rather than silently fall back to a default.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from common.config import Layers, UrlPath, is_configmap, load, validate
from common.listen import ListenAddress
from contract.classify import DEFAULT_OFFLINE_CLASSES
from controller.durations import to_seconds
from controller.rebalance.settings import RebalanceSettings
from controller.scoring import MAX_EXTENDER_PRIORITY, MAX_POLLING_INTERVAL
from serving.settings import ServingSettings

_LABEL_KEY = r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_LABEL_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SELECTOR_TERM = re.compile(
    rf"!?{_LABEL_KEY}|{_LABEL_KEY}\s*(=|==|!=)\s*{_LABEL_VALUE}"
    rf"|{_LABEL_KEY}\s+(in|notin)\s*\(\s*{_LABEL_VALUE}(\s*,\s*{_LABEL_VALUE})*\s*\)"
)

ENV_PREFIX = "COLO_CONTROLLER_"
DEFAULT_PORT = 8090


def _positive_seconds(v: object) -> float:
    seconds = to_seconds(v)
    if seconds <= 0:
        raise ValueError("must be a positive duration")
    return seconds


Seconds = Annotated[float, BeforeValidator(_positive_seconds)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AgentSettings(_Section):
    """How to find and query the node agents."""

    #: Port the agents listen on.
    port: int = Field(default=9817, ge=1, le=65535)
    #: http, or https (the manifests: the agents serve the colo-agent-tls certificate).
    scheme: Literal["http", "https"] = "http"
    #: With https: the CA that signed the agents' certificate (else the system's), and the name it was
    #: issued for (agents are reached by IP; default: the IP itself).
    tls_ca_file: str | None = None
    #: The name the agents' certificate is issued for (the manifests: colo-agent.colo-system.svc).
    tls_server_name: str | None = None
    #: With https: a bearer token file sent to the agents (they review it), for what they do not serve
    #: openly (/api/v1/pods, read by rebalancing); in a pod, the service account's token.
    bearer_token_file: str | None = None
    #: Where the agents serve their node document.
    path: UrlPath = "/api/v1/node"
    #: Namespace of the agents' Service and EndpointSlices.
    namespace: str = "colo-system"
    #: Label selector of the agents' EndpointSlices.
    endpointslice_selector: str = "kubernetes.io/service-name=colo-agent"
    #: Find each node's agent through the EndpointSlices; false: each node's InternalIP.
    use_endpointslices: bool = True


class PollingSettings(_Section):
    """One cycle polls every agent; cycles never overlap."""

    #: One cycle polls every agent (below 240s: crane trusts node_hot_value for 5 minutes).
    interval: Seconds = 30.0
    #: Per agent request.
    timeout: Seconds = 2.0
    #: Agent requests in flight at once.
    concurrency: int = Field(default=128, ge=1, le=4096)
    #: Largest agent answer read.
    max_response_bytes: int = Field(default=1 << 20, ge=1024)
    #: Agent connections kept open between polls (0: a new connection per poll); also at most half the
    #: open-file limit. About 36 KiB each over HTTPS.
    max_idle_connections: int = Field(default=10000, ge=0)
    #: A node publishing batch capacity whose agent has not answered this many cycles in a row (its endpoint
    #: gone or not ready counts) gets its kubernetes.io/batch-* held at the allocated amount and
    #: volcano.sh/oversubscription-* set to 0 until it answers again (controller/floor.py); 0: never.
    floor_silent_after: int = Field(default=4, ge=0)

    @field_validator("interval")
    @classmethod
    def _keeps_hot_value_fresh(cls, v: float) -> float:
        if v >= MAX_POLLING_INTERVAL:
            raise ValueError(
                f"must be below {MAX_POLLING_INTERVAL:g}s: crane trusts node_hot_value for 300s and it is "
                "rewritten at most once per cycle, with time left for polling and writing"
            )
        return v


class WriterSettings(_Section):
    """Annotation patches are rate limited so a large cluster cannot flood the API server."""

    #: Annotation patches per second, on average.
    qps: float = Field(default=100.0, gt=0)
    #: ... and at most this many at once.
    burst: int = Field(default=200, ge=1)
    #: Patches in flight at once.
    workers: int = Field(default=4, ge=1, le=64)
    #: A load metric moved by less than this (a ratio, 0..1) since it was written is not rewritten until it
    #: would expire as crane reads it (stamp + period + 5m) or crosses a predicate's limit; 0: every change.
    min_change: float = Field(default=0.05, ge=0, le=1)
    #: A change of `min_change` or more waits until the written values are this old (a predicate crossing,
    #: a missing value and an expiring one do not wait).
    min_interval: Annotated[float, BeforeValidator(to_seconds)] = Field(default=120.0, ge=0)

    @field_validator("qps")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be finite")
        return v


class LeaderSettings(_Section):
    """coordination.k8s.io/v1 Lease; only the leader polls and writes."""

    #: Elect a leader with a Lease (only the leader polls and writes).
    enabled: bool = True
    #: The Lease's namespace.
    namespace: str = "colo-system"
    #: The Lease's name.
    name: str = "colo-controller"
    #: This replica's identity in the Lease; unset: host name + random suffix.
    identity: str | None = None
    #: How long a lease holds without renewal.
    lease_duration: Seconds = 15.0
    #: The leader gives up leading if it could not renew within this.
    renew_deadline: Seconds = 10.0
    #: How often a replica tries to acquire or renew.
    retry_period: Seconds = 2.0

    @model_validator(mode="after")
    def _ordered(self) -> LeaderSettings:
        if not self.lease_duration > self.renew_deadline > self.retry_period:
            raise ValueError("need lease_duration > renew_deadline > retry_period")
        return self


class ClassifySettings(_Section):
    """Online/offline pod classification, same knobs as the agent's."""

    #: PriorityClasses whose pods are offline; keep equal to the agent's.
    offline_priority_classes: tuple[str, ...] = DEFAULT_OFFLINE_CLASSES
    #: Pods with a spec.priority below this are offline; keep equal to the agent's.
    offline_priority_below: int = 0


class ExtenderSettings(_Section):
    """kube-scheduler HTTP extender."""

    #: Not a knob: kube-scheduler scales extender scores assuming 0..10. Accepted (only as 10) so that
    #: existing config files keep loading.
    max_priority: int = MAX_EXTENDER_PRIORITY
    #: The largest real ExtenderArgs with nodeCacheCapable: 5000 names of up to 253 characters (1.3 MB) and a
    #: Pod of up to 1.5 MiB (the API server's object limit), doubled (controller.extender).
    max_body_bytes: int = Field(default=8 << 20, ge=1024)
    #: Offline pods (batch resources or an offline class) through crane's load predicates too. Off: their
    #: batch capacity is computed from the node's load already, and a busy hour must not block batch work.
    filter_offline: bool = False
    #: When the load predicates would filter every candidate node, filter none (count it, log it): the load
    #: annotations are a soft signal, and a stale max_avg_1h must not stop scheduling on a small cluster.
    fail_open: bool = True

    @field_validator("max_priority")
    @classmethod
    def _pinned(cls, v: int) -> int:
        if v != MAX_EXTENDER_PRIORITY:
            raise ValueError(
                f"must be {MAX_EXTENDER_PRIORITY}: kube-scheduler scales extender scores assuming "
                f"MaxExtenderPriority = {MAX_EXTENDER_PRIORITY} (leave the key out)"
            )
        return v


class ControllerConfig(_Section):
    """Top level of `--config FILE`."""

    #: crane DynamicSchedulerPolicy (YAML/JSON, or a ConfigMap holding policy.yaml); unset: crane's default policy.
    policy_file: str | None = None
    admission_file: str | None = None  # the admission webhook's settings and profiles (controller/admission)
    #: Kubeconfig file; unset: the in-cluster service account.
    kubeconfig: str | None = None
    #: HOST:PORT of the extender, health, metrics and JSON endpoints. Unset: 127.0.0.1:8090 standalone
    #: (`--agent`: plain HTTP on loopback only), 0.0.0.0:8090 in a cluster (the manifests set it).
    listen: ListenAddress | None = None
    #: Log threshold.
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    #: json: one JSON object per line.
    log_format: Literal["text", "json"] = "text"
    #: Per Kubernetes API request.
    kube_request_timeout: Seconds = 10.0
    #: Label selector of the nodes Colo manages (polled and annotated), e.g. `colo.io/agent=true`; the
    #: node informer only sees those. Empty: the nodes with a ready agent endpoint (with
    #: agent.use_endpointslices), else every node with an InternalIP.
    node_selector: str = ""
    agent: AgentSettings = AgentSettings()
    polling: PollingSettings = PollingSettings()
    writer: WriterSettings = WriterSettings()
    leader_election: LeaderSettings = LeaderSettings()
    classify: ClassifySettings = ClassifySettings()
    extender: ExtenderSettings = ExtenderSettings()
    serving: ServingSettings = ServingSettings()
    rebalance: RebalanceSettings = RebalanceSettings()
    #: Deprecated: also write `colo.io/oversubscription`, a copy of the agent's own capacity annotations.
    legacy_oversubscription_annotation: bool = False

    def listen_in(self, standalone: bool) -> str:
        """The listening address: the configured one, else loopback standalone and every address in a cluster."""
        if self.listen is not None:
            return self.listen
        return f"{'127.0.0.1' if standalone else '0.0.0.0'}:{DEFAULT_PORT}"

    @field_validator("node_selector")
    @classmethod
    def _selector(cls, v: str) -> str:
        for term in filter(None, (t.strip() for t in re.split(r",(?![^()]*\))", v))):
            if not _SELECTOR_TERM.fullmatch(term):
                raise ValueError(f"{term!r} is not a label selector term (k, !k, k=v, k!=v, k in (a,b), k notin (a))")
        return v.strip()

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, v: object) -> object:
        return v.lower() if isinstance(v, str) else v


def sibling_configmap(directory: Path, key: str) -> Path | None:
    """The first `*.yaml` ConfigMap manifest in `directory` whose data has `key`."""
    for candidate in sorted(directory.glob("*.yaml")):
        try:
            doc = yaml.safe_load(candidate.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError, UnicodeDecodeError):
            continue
        if is_configmap(doc) and isinstance(doc.get("data"), dict) and key in doc["data"]:
            return candidate
    return None


def build_config(doc: dict[str, Any], source: str = "config") -> ControllerConfig:
    """Validate a decoded document; ConfigError names the key."""
    layers = Layers()
    layers.add(doc, "file")
    return validate(ControllerConfig, layers, file_source=source)


def load_config(
    path: str | None,
    overrides: Mapping[str, tuple[str, Any]] | None = None,
    env: Mapping[str, str] | None = None,
) -> ControllerConfig:
    """`--config FILE` (plain YAML or the ConfigMap holding it), COLO_CONTROLLER_* variables, then flags
    (`key: (flag, value)`); ConfigError names the flag, variable or key."""

    def policy_next_to_file(doc: dict[str, Any], configmap: bool) -> None:
        admission = doc.get("admission_file")
        if path and isinstance(admission, str) and admission and not Path(admission).is_absolute():
            doc["admission_file"] = str(Path(path).parent / admission)  # found next to the file, as the policy
        policy = doc.get("policy_file")
        if not path or not isinstance(policy, str) or not policy:
            return
        if not Path(policy).is_absolute():
            # A policy named in the config file is found next to it, wherever we were started from.
            doc["policy_file"] = str(Path(path).parent / policy)
        elif configmap and not Path(policy).exists():
            # The manifests' ConfigMap names where the policy is mounted in the pod; outside it, the
            # ConfigMap next to this one that holds a key of that name stands in for it.
            sibling = sibling_configmap(Path(path).parent, Path(policy).name)
            if sibling is not None:
                doc["policy_file"] = str(sibling)

    return load(
        ControllerConfig,
        path=path,
        env={} if env is None else env,
        env_prefix=ENV_PREFIX,
        flags=overrides or {},
        env_skip=("COLO_CONTROLLER_CONFIG",),
        file_hook=policy_next_to_file,
    )
