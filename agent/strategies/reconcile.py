"""Restore decisions, planned purely from the ledger and the pass's state: what Colo changed and no longer
should is put back through the same executor as every other write.

- a pod that is gone: every part its entry holds;
- a pod that is no longer offline: the offline parts (`OFFLINE_PARTS`);
- any pod: the parts no active strategy owns (a restart with another cpu_policy, memory_high off);
- a QoS tier Colo capped while no active strategy owns "quota": uncapped.

A strategy for online pods restores its own part on the pods it stops covering (a `Restore` in its plan).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from agent.actions import Action, Part, Restore, SetCpuQuota
from agent.ledger import Touched
from agent.node_state import NodeState

#: What only offline pods carry: back as soon as a pod is no longer offline.
OFFLINE_PARTS: frozenset[Part] = frozenset({"baseline", "quota", "cpuset", "memory_high"})


def plan(state: NodeState, entries: Mapping[str, Touched], tiers: Mapping[str, int], active: frozenset[Part],
         held: Callable[[Touched], frozenset[Part]]) -> tuple[Action, ...]:  # fmt: skip
    """The Restore actions of a pass (before the strategies' own). `held(entry)`: what an entry holds;
    `tiers`: tier cgroup -> the period it had before Colo's cap (0: not recorded, its own)."""
    offline = {p.uid for p in state.offline}
    actions: list[Action] = []
    for uid, entry in entries.items():
        parts = held(entry)
        if uid not in state.snapshot.pods:
            back = parts
        elif uid not in offline:
            back = (parts & OFFLINE_PARTS) | (parts - active)
        else:
            back = parts - active
        if back or (uid not in offline and not parts - back):  # an entry left holding nothing goes
            actions.append(Restore(uid, back))
    if "quota" not in active:
        actions += uncap(tiers)
    return tuple(actions)


def everything(entries: Mapping[str, Touched], tiers: Mapping[str, int],
               held: Callable[[Touched], frozenset[Part]]) -> tuple[Action, ...]:  # fmt: skip
    """All Colo changed: at shutdown, or with enforcement switched off."""
    return (*(Restore(uid, held(e)) for uid, e in entries.items()), *uncap(tiers))


def uncap(tiers: Mapping[str, int]) -> list[Action]:
    """No quota on these tiers, as kubelet leaves them (at the period recorded before the cap, else theirs)."""
    return [SetCpuQuota(tier, None, period, "quota") for tier, period in sorted(tiers.items())]
