"""What the agent's three registries (collectors, cgroup parts, enforcement strategies) share: their package
imports every module in it, each module registers itself on import with its place in the registry's order."""

from __future__ import annotations

import importlib
import pkgutil
import typing
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from pydantic import BaseModel
from pydantic.fields import FieldInfo


def import_modules(package: str, path: Iterable[str], skip: Collection[str] = ()) -> None:
    """Import every module of `package` (its `__name__` and `__path__`) but those named in `skip` (the
    registry's own and other non-plugin modules)."""
    for module in pkgutil.iter_modules(path):
        if module.name not in skip:
            importlib.import_module(f"{package}.{module.name}")


def check_new(kind: str, name: str, order: int, orders: Mapping[str, int]) -> None:
    """Raise ValueError when `name` is registered already in `orders` (name -> order) or `order` is taken."""
    if name in orders:
        raise ValueError(f"{kind} {name!r} registered twice")
    taken = next((other for other, at in orders.items() if at == order), None)
    if taken is not None:
        raise ValueError(f"{kind} {name!r}: order {order} is taken by {taken!r}")


@dataclass(frozen=True, slots=True)
class RegisteredName:
    """Annotated metadata of a configuration string that names a plugin of the registry module `registry` (a
    module with `names()`). A configuration may sit below that registry's layer, so it does not check the name
    itself: each program checks what it loaded with `check_registered`, and the generated reference lists
    `names()`; both read the registry, no copy of its names."""

    kind: str
    registry: str

    def names(self) -> tuple[str, ...]:
        return tuple(importlib.import_module(self.registry).names())


def _markers(info: FieldInfo) -> list[RegisteredName]:
    found = [m for m in info.metadata if isinstance(m, RegisteredName)]
    for arg in typing.get_args(info.annotation):  # Annotated inside Optional keeps its metadata here
        if typing.get_origin(arg) is typing.Annotated:
            found += [m for m in typing.get_args(arg)[1:] if isinstance(m, RegisteredName)]
    return found


def check_registered(model: BaseModel, prefix: str = "") -> None:
    """Raise ValueError naming the key of the first value in `model` (its sections included) that a
    `RegisteredName` field gives and its registry does not know."""
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            check_registered(value, f"{prefix}{name}.")
            continue
        for marker in _markers(info):
            known = marker.names()
            if value is not None and value not in known:
                raise ValueError(f"{prefix}{name}: unknown {marker.kind} {value!r}; registered: {', '.join(known)}")
