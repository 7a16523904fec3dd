"""The admission webhook's settings: where it listens, its certificate, and the colocation profiles.

They live in their own YAML file (`admission_file` in the controller's config, or `--admission FILE`), so
the optional kustomize component can ship and mount it without touching the main ConfigMap. Unknown keys
are errors, as in the main config.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from common.config import read_file
from common.label_selector import LabelSelector
from common.listen import ListenAddress
from contract.classify import QOS_LEVEL_ANNOTATION, qos_level
from controller.errors import from_validation_error

#: Namespaces the webhook never changes, whatever the profiles say: the control plane's and Colo's own.
DEFAULT_EXCLUDED_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease", "colo-system")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Profile(_Section):
    """Which pods (namespace and pod selectors) get what: offline marker, priority class, scheduler, and
    the conversion of cpu/memory to kubernetes.io/batch-cpu / batch-memory."""

    #: The profile's name (in metrics and warnings).
    name: str = Field(min_length=1)
    #: Namespaces whose pods it selects (missing or empty: every namespace).
    namespace_selector: LabelSelector | None = Field(default=None, alias="namespaceSelector")
    #: Pods it selects (missing or empty: every pod).
    selector: LabelSelector | None = None
    qos_level: str | None = None  # volcano.sh/qos-level annotation, an offline level: -7..-1 or BE
    koordinator_qos_class: Literal["BE"] | None = None  # koordinator.sh/qosClass label
    #: PriorityClass to set (its value and preemptionPolicy come with it).
    priority_class_name: str | None = None
    #: schedulerName to set.
    scheduler_name: str | None = None
    #: Convert cpu/memory requests and limits to kubernetes.io/batch-cpu / batch-memory.
    batch_resources: bool = False

    @field_validator("qos_level")
    @classmethod
    def _offline_level(cls, v: str | None) -> str | None:
        if v is not None:
            level = qos_level(v)
            if level is None or level >= 0 or v != v.strip():
                raise ValueError(f"must be an offline {QOS_LEVEL_ANNOTATION}: -7..-1 or BE")
        return v

    @model_validator(mode="after")
    def _does_something(self) -> Profile:
        if not (
            self.qos_level
            or self.koordinator_qos_class
            or self.priority_class_name
            or self.scheduler_name
            or self.batch_resources
        ):
            raise ValueError(f"profile {self.name!r} sets nothing")
        return self


class AdmissionSettings(_Section):
    """Root of the admission file."""

    #: HTTPS address of the webhook (POST /mutate).
    listen: ListenAddress = "0.0.0.0:9443"
    #: PEM certificate, read again when it changes.
    cert_file: str = "/etc/colo-webhook/tls.crt"
    #: Its key.
    key_file: str = "/etc/colo-webhook/tls.key"
    #: Namespaces never changed, whatever the profiles say.
    excluded_namespaces: tuple[str, ...] = DEFAULT_EXCLUDED_NAMESPACES
    #: An AdmissionReview carries the pod twice at most; etcd keeps objects below 1.5 MiB.
    max_body_bytes: int = Field(default=8 << 20, ge=1024)
    #: The colocation profiles; the first that selects a pod wins.
    profiles: tuple[Profile, ...] = ()

    @field_validator("profiles")
    @classmethod
    def _unique_names(cls, v: tuple[Profile, ...]) -> tuple[Profile, ...]:
        names = [p.name for p in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"profile names must be unique: {', '.join(dup)}")
        return v


def load_admission(path: str) -> AdmissionSettings:
    """Read and validate the admission file (plain YAML, or the ConfigMap manifest holding it under
    `admission.yaml`); ConfigError names the file and the key."""
    doc = read_file(path, data_key="admission.yaml")
    try:
        return AdmissionSettings.model_validate(doc)
    except ValidationError as err:
        raise from_validation_error(err, f"admission file {path}") from None
