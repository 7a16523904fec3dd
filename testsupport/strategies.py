"""The strategies the composition root (agent/cluster/link.py) would register for an enforcement config, for the
tests and benchmarks that build an `Enforcer` on their own."""

from __future__ import annotations

from agent.config import AgentConfig
from agent.config_sections.enforcement import EnforcementConfig
from agent.enforce.stage import detect_facts
from agent.enforce.strategies.registry import Strategy, strategies
from cgroup import CgroupReader, Layout, PathModel


def default_strategies(layout: Layout, model: PathModel, config: EnforcementConfig) -> list[Strategy]:
    """What the registry picks for `config` on this host."""
    return strategies(AgentConfig(enforcement=config), detect_facts(layout, model, CgroupReader(layout)))
