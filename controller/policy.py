"""crane-scheduler's `DynamicSchedulerPolicy` file: parsing, validation and crane's default policy.

The same file is meant to be handed to a real crane-scheduler, so the field names (including crane's
`maxLimitPecent` spelling) and Go duration strings are kept exactly. We are stricter than crane where its
leniency silently disables a rule (unknown fields, a predicate without a sync period, `count: 0`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from common.config import is_configmap, parse_yaml, unwrap_configmap
from contract.windows import NODE_WINDOW_KEYS
from controller.durations import parse_go_duration
from controller.errors import ConfigError, from_validation_error

API_VERSION = "scheduler.policy.crane.io/v1alpha1"
KIND = "DynamicSchedulerPolicy"

#: The windows the Colo agent serves under crane's metric names (GET /api/v1/node -> windows), from the
#: contract both programs share, so that every window it serves can be synced and nothing else.
AGENT_WINDOWS = frozenset(NODE_WINDOW_KEYS)


def _go_duration(value: object) -> float:
    if not isinstance(value, str):
        raise ValueError("must be a Go duration string such as '3m' or '1h30m'")
    seconds = parse_go_duration(value)
    if seconds <= 0:
        raise ValueError("must be a positive duration")
    return seconds


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class SyncPolicy(_Strict):
    """Write annotation `name` every `period` seconds."""

    name: str
    period: float

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in AGENT_WINDOWS:
            raise ValueError(f"{v!r} is not a window the agent serves (known: {', '.join(sorted(AGENT_WINDOWS))})")
        return v

    @field_validator("period", mode="before")
    @classmethod
    def _period(cls, v: object) -> float:
        return _go_duration(v)


class PredicatePolicy(_Strict):
    """Filter a node out when annotation `name` is above `max_limit_percent` (0 disables, as in crane)."""

    name: str
    max_limit_percent: float = Field(alias="maxLimitPecent")

    @field_validator("max_limit_percent")
    @classmethod
    def _ratio(cls, v: float) -> float:
        if not math.isfinite(v) or v < 0 or v > 1:
            raise ValueError("must be a ratio between 0 and 1 (0 disables the filter)")
        return v


class PriorityPolicy(_Strict):
    """Weight of annotation `name` in the score."""

    name: str
    weight: float

    @field_validator("weight")
    @classmethod
    def _weight(cls, v: float) -> float:
        if not math.isfinite(v) or v < 0:
            raise ValueError("must be a finite number >= 0")
        return v


class HotValuePolicy(_Strict):
    """Every `count` pods bound within `time_range` seconds add 1 to the node's hot value."""

    time_range: float = Field(alias="timeRange")
    count: int = Field(gt=0)

    @field_validator("time_range", mode="before")
    @classmethod
    def _range(cls, v: object) -> float:
        return _go_duration(v)


class PolicySpec(_Strict):
    """crane's PolicySpec; a missing list is empty, as crane decodes it."""

    sync_policy: tuple[SyncPolicy, ...] = Field(default=(), alias="syncPolicy")
    predicate: tuple[PredicatePolicy, ...] = ()
    priority: tuple[PriorityPolicy, ...] = ()
    hot_value: tuple[HotValuePolicy, ...] = Field(default=(), alias="hotValue")

    @field_validator("sync_policy", "predicate", "priority", "hot_value", mode="before")
    @classmethod
    def _null_is_empty(cls, v: object) -> object:
        return () if v is None else v

    @model_validator(mode="after")
    def _cross_check(self) -> PolicySpec:
        seen: set[str] = set()
        for i, s in enumerate(self.sync_policy):
            if s.name in seen:
                raise ValueError(f"syncPolicy[{i}].name: duplicate metric {s.name!r}")
            seen.add(s.name)
        named: list[tuple[str, int, str]] = [("predicate", i, p.name) for i, p in enumerate(self.predicate)]
        named += [("priority", i, p.name) for i, p in enumerate(self.priority)]
        for section, i, name in named:
            if name not in seen:
                raise ValueError(f"{section}[{i}].name: {name!r} has no syncPolicy entry, so crane would ignore it")
        if self.priority and sum(p.weight for p in self.priority) <= 0:
            raise ValueError("priority: the weights must not all be 0")
        return self


class DynamicSchedulerPolicy(_Strict):
    """The whole policy document."""

    api_version: Literal["scheduler.policy.crane.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["DynamicSchedulerPolicy"]
    metadata: dict[str, Any] | None = None
    spec: PolicySpec


def default_policy() -> DynamicSchedulerPolicy:
    """crane-scheduler's shipped default policy."""
    return parse_policy(
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "spec": {
                "syncPolicy": [
                    {"name": "cpu_usage_avg_5m", "period": "3m"},
                    {"name": "cpu_usage_max_avg_1h", "period": "15m"},
                    {"name": "cpu_usage_max_avg_1d", "period": "3h"},
                    {"name": "mem_usage_avg_5m", "period": "3m"},
                    {"name": "mem_usage_max_avg_1h", "period": "15m"},
                    {"name": "mem_usage_max_avg_1d", "period": "3h"},
                ],
                "predicate": [
                    {"name": "cpu_usage_avg_5m", "maxLimitPecent": 0.65},
                    {"name": "cpu_usage_max_avg_1h", "maxLimitPecent": 0.75},
                    {"name": "mem_usage_avg_5m", "maxLimitPecent": 0.65},
                    {"name": "mem_usage_max_avg_1h", "maxLimitPecent": 0.75},
                ],
                "priority": [
                    {"name": "cpu_usage_avg_5m", "weight": 0.2},
                    {"name": "cpu_usage_max_avg_1h", "weight": 0.3},
                    {"name": "cpu_usage_max_avg_1d", "weight": 0.5},
                    {"name": "mem_usage_avg_5m", "weight": 0.2},
                    {"name": "mem_usage_max_avg_1h", "weight": 0.3},
                    {"name": "mem_usage_max_avg_1d", "weight": 0.5},
                ],
                "hotValue": [{"timeRange": "5m", "count": 5}, {"timeRange": "1m", "count": 2}],
            },
        },
        source="default policy",
    )


def parse_policy(doc: object, source: str = "policy") -> DynamicSchedulerPolicy:
    """Validate a decoded policy document; ConfigError names the offending field."""
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: <root>: expected a DynamicSchedulerPolicy mapping")
    try:
        return DynamicSchedulerPolicy.model_validate(doc)
    except ValidationError as err:
        raise _rename(from_validation_error(err, source)) from None


def _rename(err: ConfigError) -> ConfigError:
    # Report crane's spelling of the fields, not our Python names, and the path under spec.
    text = str(err)
    for ours, theirs in (
        ("max_limit_percent", "maxLimitPecent"),
        ("time_range", "timeRange"),
        ("sync_policy", "syncPolicy"),
        ("hot_value", "hotValue"),
        ("api_version", "apiVersion"),
    ):
        text = text.replace(ours, theirs)
    text = re.sub(r"spec: (syncPolicy|predicate|priority|hotValue)\[", r"spec.\1[", text)
    text = text.replace("spec: priority: ", "spec.priority: ")
    return ConfigError(text)


def load_policy(path: str | Path) -> DynamicSchedulerPolicy:
    """Read a YAML or JSON policy file, or the ConfigMap holding it as `policy.yaml` (the manifests' form)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"policy file {path}: {err.strerror or err}") from None
    doc = parse_yaml(text, f"policy file {path}")
    if is_configmap(doc):
        doc = unwrap_configmap(doc, f"policy file {path}", "policy.yaml")
    return parse_policy(doc, source=f"policy file {path}")
