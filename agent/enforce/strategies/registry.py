"""The strategy protocol and the strategies' registry, the one list the enforcement stage runs.

A strategy is a small class built once with its configuration (no I/O, ever): `plan(state, recorded)`
returns the cgroup actions it wants this pass, what to remember for the next one (its memo) and what it
reports (merged into the `enforcement` section of /api/v1/node). `parts` are what it may write: a part
the ledger holds that no active strategy owns is restored (agent/enforce/strategies/reconcile.py).

Each strategy's module registers it once, as the collectors do (agent/sense/collectors/registry.py): its name, a
factory `(config, facts) -> Strategy | None` (None: not active with this configuration and these facts),
its `order`, the order actions are applied in (batch_limits after cfs_quota: it sees the quota; the orders in
use are 10 to 100, in tens), and `report_defaults`: the keys its report adds to the node's sections
(agent/enforce/report.py), with their values while it is not active (a key without one is there only while
it is). Importing agent.enforce.strategies (this module's package) imports every module in it,
so adding a strategy is one file under agent/enforce/strategies/: no line here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agent.config import AgentConfig
from agent.enforce.actions import Part, Plan, Recorded
from agent.enforce.ledger import Touched
from agent.enforce.originals import OwnOriginals
from agent.node_state import NodeState
from agent.sense.pace import PassNeeds, union
from agent.snapshot import PodSample
from common.plugins import check_new


class Strategy(Protocol):
    name: str  # also the key of its memo and of its report
    parts: frozenset[Part]  # what it may write; parts in the ledger no active strategy owns get restored

    def plan(self, state: NodeState, recorded: Recorded) -> Plan: ...


@runtime_checkable
class WritesOwnLimits(Protocol):
    """A strategy whose values are a pod's own limits (batch): they are the pod's originals, what release and
    restore put back, whatever the cgroups held at first sight."""

    def own_originals(self, entry: Touched, pod: PodSample, is_v2: bool) -> bool: ...


def own_originals(chosen: Sequence[Strategy]) -> list[OwnOriginals]:
    """The hooks of the strategies that write pods' own limits, for the originals (agent/enforce/originals.py)."""
    return [s.own_originals for s in chosen if isinstance(s, WritesOwnLimits)]


@dataclass(frozen=True, slots=True)
class Facts:
    """What the cgroup layer knows at start, for the strategies' choice and construction (what changes per
    pass, such as exclusive CPUs, is in the NodeState)."""

    is_v2: bool
    besteffort_tier: str  # the best-effort QoS tier's cgroup
    burst_supported: bool = False  # the kernel has CFS burst (cpu.cfs_burst_us / cpu.max.burst)
    kubepods: str = "/kubepods"  # the cgroup above every pod (memory QoS protects up to it)
    own_pod_uid: str = ""  # the agent's own pod (the downward API's POD_UID): never judged as a service


#: (the agent's configuration, what the cgroup layer knows at start) -> the strategy, None when not active
Factory = Callable[[AgentConfig, Facts], Strategy | None]


@dataclass(frozen=True, slots=True)
class StrategySpec:
    name: str  # the strategy's own `name`
    order: int  # its place in the order actions are applied
    factory: Factory
    report_defaults: Mapping[str, Any] = field(default_factory=dict)  # its report's keys while it is not active


_SPECS: dict[str, StrategySpec] = {}


def register(name: str, factory: Factory, *, order: int, report_defaults: Mapping[str, Any] | None = None) -> None:
    """Called once per strategy by its module; a second strategy of the same name, or at an order taken, is a
    mistake."""
    check_new("strategy", name, order, {s.name: s.order for s in _SPECS.values()})
    _SPECS[name] = StrategySpec(name, order, factory, report_defaults or {})


def unregister(name: str) -> None:
    _SPECS.pop(name, None)


def specs() -> tuple[StrategySpec, ...]:
    """Every registered strategy in order (importing agent.enforce.strategies registers them all)."""
    return tuple(sorted(_SPECS.values(), key=lambda s: s.order))


def report_defaults() -> dict[str, Any]:
    """Every registered strategy's report keys, in the strategies' order (a key two declare keeps its first
    place), with their values while no active strategy reports them."""
    out: dict[str, Any] = {}
    for spec in specs():
        for key, value in spec.report_defaults.items():
            out.setdefault(key, value)
    return out


@runtime_checkable
class ReadsEachPass(Protocol):
    """A strategy that needs more read each pass than the defaults (every online pod, every container...): the
    sampler's pace follows what the active ones declare, so no entry point names a feature."""

    reads: PassNeeds


def pass_needs(chosen: Sequence[Strategy]) -> PassNeeds:
    """What the active strategies need read each pass, together."""
    return union(s.reads for s in chosen if isinstance(s, ReadsEachPass))


def strategies(config: AgentConfig, facts: Facts) -> list[Strategy]:
    """The active strategies, in the order their actions are applied."""
    built = (spec.factory(config, facts) for spec in specs())
    return [s for s in built if s is not None]
