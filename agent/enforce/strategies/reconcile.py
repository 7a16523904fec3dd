"""Restore decisions, planned purely from the ledger and the pass's state: what Colo changed and no longer
should is put back through the same executor as every other write.

- a pod that is gone: every part its entry holds;
- a pod that is no longer offline: the parts that hold offline pods down (agent/enforce/parts/, `protects` "offline");
- any pod: the parts no active strategy owns (a restart with another cpu_policy, memory_high off);
- a QoS tier Colo capped while no active strategy owns "quota": uncapped.

A strategy for online pods restores its own part on the pods it stops covering (a `Restore` in its plan).
"""

from __future__ import annotations

from collections.abc import Mapping

from agent.enforce.actions import Action, Part, Restore, SetCpuQuota
from agent.enforce.ledger import Touched
from agent.enforce.parts.quota import QUOTA
from agent.enforce.parts.registry import held_parts as held
from agent.enforce.parts.registry import known_parts, parts_protecting
from agent.node_state import NodeState


def plan(
    state: NodeState, entries: Mapping[str, Touched], tiers: Mapping[str, int], active: frozenset[Part]
) -> tuple[Action, ...]:
    """The Restore actions of a pass (before the strategies' own). `active`: the parts the active strategies
    own; `tiers`: tier cgroup -> the period it had before Colo's cap (0: not recorded, its own)."""
    offline = {p.uid for p in state.offline}
    inactive = known_parts() - active
    offline_parts = parts_protecting("offline")
    actions: list[Action] = []
    for uid, entry in entries.items():
        if uid in offline:  # the common case, every pass: only what no strategy owns any more
            if inactive and not inactive.isdisjoint(entry.parts):
                back = held(entry, inactive)
                if back:
                    actions.append(Restore(uid, back))
            continue
        parts = held(entry, None)
        back = parts if uid not in state.snapshot.pods else (parts & offline_parts) | (parts - active)
        if back or not parts - back:  # an entry left holding nothing goes
            actions.append(Restore(uid, back))
    if QUOTA not in active:
        actions += uncap(tiers)
    return tuple(actions)


def everything(entries: Mapping[str, Touched], tiers: Mapping[str, int]) -> tuple[Action, ...]:
    """All Colo changed: at shutdown, or with enforcement switched off."""
    return (*(Restore(uid, held(e, None)) for uid, e in entries.items()), *uncap(tiers))


def uncap(tiers: Mapping[str, int]) -> list[Action]:
    """No quota on these tiers, as kubelet leaves them (at the period recorded before the cap, else theirs)."""
    return [SetCpuQuota(tier, None, period, QUOTA) for tier, period in sorted(tiers.items())]
