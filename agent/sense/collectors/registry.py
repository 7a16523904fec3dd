"""The collectors' registry, as node_exporter has it: each collector registers itself once — its name, whether
it is on by default (or always on), what it fills and how it is built — and the registry is the only list of
names. It makes the `collectors.<name>` switches of the configuration (agent/config.py) and gives the sampler
the enabled collectors in order, which it builds and times: every pass reports each collector's success and
duration (`colo_collector_success`, `colo_collector_duration_seconds`, declared here).

Two scopes: a node collector runs once per pass and returns its part of the snapshot; a pod collector runs
within the pods collector's one visit of each pod and returns its part of that pod's sample.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, Field, create_model

from common.families import Family
from common.plugins import check_new

if TYPE_CHECKING:
    from agent.sense.collectors.context import CollectorDeps, PassContext

SUCCESS = Family("colo_collector_success", "1 when the collector succeeded in the last pass.")
DURATION = Family("colo_collector_duration_seconds", "Time the collector took in the last pass.")

Scope = Literal["node", "pod"]


class Collector(Protocol):
    """What a collector is to the pass: `collect(ctx)` returns its part (the snapshot's for a node collector,
    the current pod's for a pod collector); `forget(cgroup)` drops what it keeps for a vanished cgroup;
    `close()` releases what it holds open."""

    def collect(self, ctx: PassContext) -> Any: ...

    def forget(self, cgroup: str) -> None: ...

    def close(self) -> None: ...


class KeepsNothing:
    """For collectors with nothing per cgroup to forget and nothing to close."""

    def forget(self, cgroup: str) -> None:
        return None

    def close(self) -> None:
        return None


@dataclass(frozen=True, slots=True)
class CollectorSpec:
    name: str
    default: bool  # on unless switched off (always True for the always-on ones)
    always_on: bool  # decisions need it: no switch
    scope: Scope
    fills: str  # the field it fills: of the Snapshot (node scope) or of the PodSample (pod scope)
    order: int  # its place in the pass and in /metrics
    factory: Callable[[CollectorDeps], Collector]
    what: str  # what it reads, in the words of the `collectors.<name>` switch's documentation


_SPECS: dict[str, CollectorSpec] = {}


def register(
    name: str,
    default: bool,
    factory: Callable[[CollectorDeps], Collector],
    *,
    fills: str,
    order: int,
    scope: Scope = "node",
    always_on: bool = False,
    what: str = "",
) -> None:
    """Called once by each collector's module. `order` places it in the pass and in /metrics (a pod collector
    among the pod collectors); `what` it reads documents its switch."""
    check_new("collector", name, order, {s.name: s.order for s in _SPECS.values()})
    _SPECS[name] = CollectorSpec(name, default or always_on, always_on, scope, fills, order, factory, what)


def specs() -> tuple[CollectorSpec, ...]:
    """Every registered collector in order (importing agent.sense.collectors, this module's package, registers them
    all)."""
    return tuple(sorted(_SPECS.values(), key=lambda s: s.order))


def names() -> tuple[str, ...]:
    return tuple(s.name for s in specs())


def always_on() -> frozenset[str]:
    return frozenset(s.name for s in specs() if s.always_on)


def switches_model(base: type[BaseModel]) -> type[BaseModel]:
    """The `collectors` section of the configuration: one boolean per switchable collector, its default the
    collector's (so COLO_COLLECTORS__<NAME> and the YAML key follow from the registration)."""
    fields: dict[str, Any] = {
        s.name: (bool, Field(default=s.default, description=s.what)) for s in specs() if not s.always_on
    }
    model: type[BaseModel] = create_model("CollectorsConfig", __base__=base, **fields)
    model.__doc__ = "Collectors that can be switched off (node and pods always run: the decisions need them)."
    return model


def enabled_from(switches: Mapping[str, bool]) -> frozenset[str]:
    """The collectors to run: the always-on ones and every switch that is on."""
    return frozenset(s.name for s in specs() if s.always_on or switches.get(s.name, s.default))
