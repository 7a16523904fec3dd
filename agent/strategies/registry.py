"""The strategy protocol and the one list of strategies the enforcement stage runs.

A strategy is a small class built once with its configuration (no I/O, ever): `plan(state, recorded)`
returns the cgroup actions it wants this pass, what to remember for the next one (its memo) and what it
reports (merged into the `enforcement` section of /api/v1/node). `parts` are what it may write: a part
the ledger holds that no active strategy owns is restored (agent/strategies/reconcile.py).

Adding a strategy: one file under agent/strategies/, one line in `strategies` below.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from agent.actions import Part, Plan, Recorded
from agent.config import AgentConfig
from agent.ledger import Touched
from agent.node_state import NodeState
from agent.originals import OwnOriginals
from agent.snapshot import PodSample
from agent.strategies.baseline import Baseline
from agent.strategies.batch_limits import BatchLimits
from agent.strategies.cpu_burst import CpuBurst
from agent.strategies.cpu_suppression import CfsQuota, Cpuset
from agent.strategies.disk_qos import DiskQos
from agent.strategies.memory_high import MemoryHigh
from agent.strategies.memory_qos import MemoryQos
from agent.strategies.net_egress import NetEgress
from agent.strategies.quota_burst import QuotaBurst


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
    """The hooks of the strategies that write pods' own limits, for the originals (agent/originals.py)."""
    return [s.own_originals for s in chosen if isinstance(s, WritesOwnLimits)]


@dataclass(frozen=True, slots=True)
class Facts:
    """What the cgroup layer knows at start, for the strategies' choice and construction (what changes per
    pass, such as exclusive CPUs, is in the NodeState)."""

    is_v2: bool
    besteffort_tier: str  # the best-effort QoS tier's cgroup
    burst_supported: bool = False  # the kernel has CFS burst (cpu.cfs_burst_us / cpu.max.burst)
    kubepods: str = "/kubepods"  # the cgroup above every pod (memory QoS protects up to it)


def strategies(config: AgentConfig, facts: Facts) -> list[Strategy]:
    """The active strategies, in the order their actions are applied; one line each."""
    e, q = config.enforcement, config.qos
    registered: list[Strategy | None] = [
        Baseline(e),
        CfsQuota(e, facts.besteffort_tier) if e.cpu_policy == "cfsQuota" else None,
        Cpuset(e) if e.cpu_policy == "cpuset" else None,
        MemoryHigh(e) if facts.is_v2 and e.memory_high else None,
        BatchLimits(config.batch, e.cpu_period_us) if config.batch.enabled else None,  # after cfs_quota: see it
        # online QoS: always registered (each plans its restores when off; a pod may opt in to the burst alone)
        CpuBurst(q.cpu_burst, facts.burst_supported),
        QuotaBurst(q.quota_burst),
        MemoryQos(q.memory, facts.is_v2, facts.kubepods),
        DiskQos(e.disk, e.besteffort_share, facts.is_v2),  # always: switched off, it puts back what it wrote
        NetEgress(config.network_qos) if config.network_qos.enabled else None,
    ]
    return [s for s in registered if s is not None]
