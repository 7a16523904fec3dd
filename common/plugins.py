"""What the agent's three registries (collectors, cgroup parts, enforcement strategies) share: their package
imports every module in it, each module registers itself on import with its place in the registry's order."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Collection, Iterable, Mapping


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


class RegisteredName:
    """A configuration value that must name a registered plugin (a pydantic AfterValidator's function): the
    configuration checks it and the generated reference lists `names()`, both from the registry itself."""

    def __init__(self, kind: str, names: Callable[[], Iterable[str]]) -> None:
        self.kind = kind
        self.names = names

    def __call__(self, value: str) -> str:
        known = tuple(self.names())
        if value not in known:
            raise ValueError(f"unknown {self.kind} {value!r}; registered: {', '.join(known)}")
        return value
