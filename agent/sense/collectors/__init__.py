"""The sampling pass's collectors, one module each. Importing this package imports every module in it, and each
collector's module registers it (agent/sense/collectors/registry.py): a new collector is one new module here."""

from agent.sense.collectors.registry import always_on, enabled_from, names, specs, switches_model
from agent.sense.pass_clock import PassClock
from agent.snapshot import CollectorRun
from common.plugins import import_modules

import_modules(__name__, __path__, skip=("registry", "context"))

__all__ = ["CollectorRun", "PassClock", "always_on", "enabled_from", "names", "specs", "switches_model"]
