"""The sampling pass's collectors, one module each; importing this package registers them all
(agent/collectors/registry.py). The imports below are in pass order, which is also their order in /metrics:
a new collector is one new module here and one import line."""

# isort: off
from agent.collectors import node, tiers, pods, containers, psi, network  # noqa: F401  (each registers itself)

# isort: on
from agent.collectors.registry import always_on, enabled_from, names, specs, switches_model
from agent.pass_clock import CollectorRun, PassClock

__all__ = ["CollectorRun", "PassClock", "always_on", "enabled_from", "names", "specs", "switches_model"]
