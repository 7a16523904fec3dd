"""The parts' registry: each part's module (agent/enforce/parts/<name>.py) registers its spec once, with its place in
the order restore puts parts back, and `PARTS` is the only list of them. Importing agent.enforce.parts (this module's
package) imports every part module, so a new part is one new module: no line here.

The order matters: baseline first (a SCHED_IDLE group refuses weight changes), bursts before the CFS quota
batch (a burst only ever goes down there); the orders in use are 10 to 100, in tens."""

from __future__ import annotations

from collections.abc import Iterable

from agent.enforce.ledger import Touched
from agent.enforce.parts.spec import PartSpec, Protects
from common.plugins import check_new

#: every registered part, in restore order (kept in that order as parts register, whatever the import order)
PARTS: dict[str, PartSpec] = {}
_ORDER: dict[str, int] = {}


def register(spec: PartSpec, *, order: int) -> None:
    """Called once per part by its module. `order` places it in the restore order; a second part of the same
    name, or at an order taken, is a mistake."""
    check_new("part", spec.name, order, _ORDER)
    _ORDER[spec.name] = order
    ordered = sorted([*PARTS.values(), spec], key=lambda s: _ORDER[s.name])
    PARTS.clear()  # the same mapping, reordered: the executor and restore hold it by reference
    PARTS.update((s.name, s) for s in ordered)


def unregister(name: str) -> None:
    PARTS.pop(name, None)
    _ORDER.pop(name, None)


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
