"""The one list of parts, in the order restore puts them back (baseline first: a SCHED_IDLE group refuses
weight changes; bursts before the CFS quota batch: a burst only ever goes down there). One line per part."""

from __future__ import annotations

from collections.abc import Iterable

from agent.ledger import Touched
from agent.parts import baseline, batch, burst, cpuset, disk, memory, net_egress, quota
from agent.parts.spec import PartSpec, Protects

PARTS: dict[str, PartSpec] = {
    spec.name: spec
    for spec in (
        baseline.SPEC,
        quota.QUOTA_SPEC,
        cpuset.SPEC,
        memory.MEMORY_HIGH_SPEC,
        burst.SPEC,
        quota.QUOTA_BURST_SPEC,
        memory.MEMORY_QOS_SPEC,
        batch.SPEC,
        net_egress.SPEC,
        disk.SPEC,
    )
}


def register(spec: PartSpec) -> None:
    """Add a part (last in the restore order); a second part of the same name is a mistake."""
    if spec.name in PARTS:
        raise ValueError(f"part {spec.name!r} is registered already")
    PARTS[spec.name] = spec


def unregister(name: str) -> None:
    PARTS.pop(name, None)


def parts_protecting(kind: Protects) -> frozenset[str]:
    return frozenset(name for name, spec in PARTS.items() if spec.protects == kind)


def known_parts() -> frozenset[str]:
    """Every part a ledger entry can hold (the pod's own limits are never held)."""
    return frozenset(name for name, spec in PARTS.items() if spec.protects != "own")


def held_parts(entry: Touched, among: Iterable[str] | None = None) -> frozenset[str]:
    """The parts (of `among`, default all) the entry says Colo changed, and restore would put back."""
    if among is None:
        return frozenset(name for name in entry.parts if name in PARTS)
    return frozenset(name for name in among if name in entry.parts and name in PARTS)
