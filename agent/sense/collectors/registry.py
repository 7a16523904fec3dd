"""The collectors' registry, as node_exporter has it: each collector registers itself once, and the registry is the
only list of them. A registration says everything the agent does with a collector:

- its name, whether it is on by default (or always on), what it reads (`what`): the `collectors.<name>`
  switches of the configuration (agent/config.py) and their reference;
- how it is built (`factory`), its place in the pass (`order`), and where its part goes: a node collector's
  into the snapshot field `fills` names, a pod collector's into the pod's sample through `store`, a typed
  function (`def _store(sample: PodSample, part: T) -> None: sample.x = part`, checked by mypy against
  what `collect` returns: a mismatch reads "Cannot infer value of type parameter T of register");
- its metric families (`families`) and how its part becomes their samples: `node_series` once per render,
  `pod_series` for each pod in the pods' pass (the pods collector's own figures are per pod too). Both
  run in `metrics_order` (default: `order`) among the other collectors' and the exporter's own series
  (`NODE_WINDOWS_ORDER`, `POD_WINDOWS_ORDER`): /metrics lists families in first-use order;
- its fields in each pod's `/api/v1/pods` entry (`pod_fields`, in `metrics_order` too) and their units
  (`units`, in `/api/v1/units`);
- `example`: a representative part the reference pages render when the doc generator's fixture has none
  (a collector off by default).

Every pass reports each enabled collector's success and duration (`colo_collector_success`,
`colo_collector_duration_seconds`, declared here). So a new collector is its module (a class and one
`register` call) and the field it fills in agent/snapshot.py; the sampler, the exporter, the JSON API and
tools/docgen.py read the registration. tests/test_collector_registry.py declares a pod collector in full;
docs/agent-collectors.md has the table of arguments.

Two scopes: a node collector runs once per pass and returns its part of the snapshot; a pod collector runs
within the pods collector's one visit of each pod and returns its part of that pod's sample.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, Field, create_model

from agent.snapshot import PodSample, Snapshot
from common.exposition import LabelShapes
from common.families import Families, Family, FamilyLines, PutLine
from common.plugins import check_new

if TYPE_CHECKING:
    from agent.sense.collectors.context import CollectorDeps, PassContext

SUCCESS = Family("colo_collector_success", "1 when the collector succeeded in the last pass.")
DURATION = Family("colo_collector_duration_seconds", "Time the collector took in the last pass.")

Scope = Literal["node", "pod"]
#: where the exporter's own series stand among the collectors' (`metrics_order`): the node's windows and
#: crane-scheduler's gauges after the node collector's; a pod's windows (and in /api/v1/pods its windows and
#: batch fields) after its pod collectors' but the containers'
NODE_WINDOWS_ORDER = 15
POD_WINDOWS_ORDER = 80

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

#: a collector's node-level series of one render: (the render's families, the snapshot, the node's labels)
NodeSeries = Callable[[Families, Snapshot, dict[str, str]], None]
#: a collector's series of one pod: (put, the lines of its `families` in their order, the pod's label texts
#: (`base`, `template(extra)`), the pod); `put(lines, label_text, value)` leaves a None value out
PodSeries = Callable[[PutLine, Sequence[FamilyLines], LabelShapes, PodSample], None]
#: a collector's fields in the pod's /api/v1/pods entry (JSON values: `contract.agent_api.json_number`)
PodFields = Callable[[PodSample], Mapping[str, Any]]


class Collector(Protocol[T_co]):
    """What a collector is to the pass: `collect(ctx)` returns its part (the snapshot's for a node collector,
    the current pod's for a pod collector); `forget(cgroup)` drops what it keeps for a vanished cgroup;
    `close()` releases what it holds open."""

    def collect(self, ctx: PassContext) -> T_co: ...

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
    fills: str  # node scope: the Snapshot field its part fills ("" for a pod collector)
    order: int  # its place in the pass
    factory: Callable[[CollectorDeps], Collector[Any]]
    what: str  # what it reads, in the words of the `collectors.<name>` switch's documentation
    store: Callable[[PodSample, Any], None] | None = None  # pod scope: puts its part into the pod's sample
    families: tuple[Family, ...] = ()
    metrics_order: int = 0  # its place in /metrics and in a pod's /api/v1/pods entry
    node_series: NodeSeries | None = None
    pod_series: PodSeries | None = None
    pod_fields: PodFields | None = None
    units: Mapping[str, str] = field(default_factory=dict)  # /api/v1/units of its pod fields
    example: Any = None  # a representative part, for the reference pages


_SPECS: dict[str, CollectorSpec] = {}
_ordered: list[tuple[CollectorSpec, ...]] = []  # in_metrics_order(), kept until a collector (un)registers


_SNAPSHOT_FIELDS = frozenset(f.name for f in dataclasses.fields(Snapshot))


def register(
    name: str,
    default: bool,
    factory: Callable[[CollectorDeps], Collector[T]],
    *,
    order: int,
    fills: str = "",
    store: Callable[[PodSample, T], None] | None = None,
    scope: Scope = "node",
    always_on: bool = False,
    what: str = "",
    families: tuple[Family, ...] = (),
    metrics_order: int | None = None,
    node_series: NodeSeries | None = None,
    pod_series: PodSeries | None = None,
    pod_fields: PodFields | None = None,
    units: Mapping[str, str] | None = None,
    example: Any = None,
) -> None:
    """Called once by each collector's module (the module says what each argument is). A node collector names
    the Snapshot field it `fills`, a pod collector gives its `store`; a second collector of a name, or at an
    order taken, is a mistake."""
    check_new("collector", name, order, {s.name: s.order for s in _SPECS.values()})
    if scope == "node" and (fills not in _SNAPSHOT_FIELDS or store is not None):
        raise ValueError(f"node collector {name}: fills must name a Snapshot field, not {fills!r}")
    if scope == "pod" and (store is None or fills):
        raise ValueError(f"pod collector {name}: its part goes into the pod's sample through store=, not fills=")
    if (node_series or pod_series) and not families:
        raise ValueError(f"collector {name}: series of no declared family")
    _SPECS[name] = CollectorSpec(
        name=name,
        default=default or always_on,
        always_on=always_on,
        scope=scope,
        fills=fills,
        order=order,
        factory=factory,
        what=what,
        store=store,
        families=families,
        metrics_order=order if metrics_order is None else metrics_order,
        node_series=node_series,
        pod_series=pod_series,
        pod_fields=pod_fields,
        units=units or {},
        example=example,
    )
    _ordered.clear()


def unregister(name: str) -> None:
    """A collector registered by a test goes again."""
    _SPECS.pop(name, None)
    _ordered.clear()


def specs() -> tuple[CollectorSpec, ...]:
    """Every registered collector in order (importing agent.sense.collectors, this module's package, registers them
    all)."""
    return tuple(sorted(_SPECS.values(), key=lambda s: s.order))


def in_metrics_order() -> tuple[CollectorSpec, ...]:
    """Every registered collector in its /metrics (and /api/v1/pods) order (each render reads it)."""
    if not _ordered:
        _ordered.append(tuple(sorted(_SPECS.values(), key=lambda s: (s.metrics_order, s.order))))
    return _ordered[0]


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
