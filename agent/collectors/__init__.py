"""The sampling pass's collectors, one module each. Importing this package imports every module in it, and each
collector's module registers it (agent/collectors/registry.py): a new collector is one new module here."""

import importlib
import pkgutil

from agent.collectors.registry import always_on, enabled_from, names, specs, switches_model
from agent.pass_clock import CollectorRun, PassClock

_NOT_COLLECTORS = frozenset({"registry", "context"})

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _NOT_COLLECTORS:
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["CollectorRun", "PassClock", "always_on", "enabled_from", "names", "specs", "switches_model"]
