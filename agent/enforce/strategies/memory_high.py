"""memory.high for offline pods (cgroup v2): together they may use what the high memory watermark leaves
after online pods and the system, split in proportion to their working sets, each at least `min_bytes`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.config import AgentConfig
from agent.config_sections.enforcement import EnforcementConfig
from agent.enforce.actions import Part, Plan, Recorded, Report, SetMemoryHigh
from agent.enforce.strategies.registry import Facts, register
from agent.node_state import NodeState, Usage
from agent.snapshot import PodSample


def plan(memory: Usage, offline: Sequence[PodSample], high_percent: float, min_bytes: int) -> dict[str, int]:
    """memory.high in bytes by offline pod UID."""
    allowance = max(0, int(memory.allocatable * high_percent / 100.0) - int(memory.online) - int(memory.system or 0))
    total = sum(p.memory_working_set_bytes for p in offline) or 1
    return {p.uid: max(min_bytes, allowance * p.memory_working_set_bytes // total) for p in offline}


@dataclass(frozen=True, slots=True)
class MemoryHighReport(Report):
    high_bytes: Mapping[str, int]  # offline pod uid -> its memory.high

    def fields(self) -> dict[str, Any]:
        return {"offline_memory_high_bytes": self.high_bytes}


class MemoryHigh:
    """cgroup v2 only (registered there): memory.high of each offline pod, from `plan`'s split of what the
    high watermark (read into the NodeState) leaves."""

    name = "memory_high"
    parts: frozenset[Part] = frozenset({"memory_high"})

    def __init__(self, config: EnforcementConfig) -> None:
        self.min_bytes = config.memory_high_min_bytes

    def plan(self, state: NodeState, recorded: Recorded) -> Plan:
        offline = [p for p in state.offline if p.uid in recorded.entries]
        if not offline:
            return Plan(report=MemoryHighReport({}))
        shares = plan(state.memory, offline, state.memory_high_percent, self.min_bytes)
        actions = tuple(SetMemoryHigh(p.cgroup, shares[p.uid], "memory_high", p.uid) for p in offline)
        return Plan(actions, report=MemoryHighReport(shares))


def _build(config: AgentConfig, facts: Facts) -> MemoryHigh | None:
    return MemoryHigh(config.enforcement) if facts.is_v2 and config.enforcement.memory_high else None


register(MemoryHigh.name, _build, order=40, report_defaults={"offline_memory_high_bytes": {}})
