"""The one place the enforcement tests build an agent or an enforcer (v1 and v2 tiers alike), so a change
in how agent/ wires enforcement is adapted here once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent import main
from agent.config import AgentConfig
from agent.config_sections.enforcement import EnforcementConfig
from agent.enforce.stage import Enforcer
from agent.pipeline import ClusterPipeline
from agent.runtime import Agent
from cgroup import CgroupReader, Layout, PathModel
from kube import Kube
from testsupport.k8sobjects import NODE
from testsupport.strategies import default_strategies


def build_agent(
    layout: Layout,
    model: PathModel,
    kube: Kube,
    ledger_file: str,
    *,
    interval: float,
    qos: dict[str, Any] | None = None,
    oversubscription: dict[str, Any] | None = None,
    **enforcement: Any,
) -> tuple[Agent, ClusterPipeline]:
    """An in-cluster agent on `layout` with eviction off; `dry_run`, the `qos` and `oversubscription`
    sections and any enforcement key may be given."""
    cfg = AgentConfig.model_validate(
        {
            "interval": interval,
            "cgroup_root": model.cgroup_root,
            "cgroup_driver": model.driver,
            "state_file": "",
            "node_name": NODE,
            "dry_run": enforcement.pop("dry_run", False),
            "enforcement": {
                "ledger_file": ledger_file,
                "oom_reapply_seconds": 0.5,
                "eviction": {"enabled": False},
                **enforcement,
            },
            "qos": qos or {},
            "oversubscription": oversubscription or {},
        }
    )
    agent = main.build_agent(cfg, kube=kube, layout=layout, backoff_initial=0.05, backoff_max=0.5)
    (link,) = agent.services
    assert isinstance(link, ClusterPipeline)
    return agent, link


def build_enforcer(
    layout: Layout,
    model: PathModel,
    ledger_file: str = "",
    allocatable: tuple[float, int] | Callable[[], tuple[float | None, int | None]] = (2.0, 8 << 30),
    memory_high_watermark: Callable[[], float] | None = None,
    *,
    dry_run: bool = False,
    **config: Any,
) -> Enforcer:
    """An enforcer driven by hand-made snapshots (`on_snapshot`) on a node of `allocatable` (cores, bytes)."""
    cfg = EnforcementConfig(ledger_file=ledger_file, **config)
    node = allocatable if callable(allocatable) else (lambda: allocatable)
    reader = CgroupReader(layout)
    chosen = default_strategies(layout, model, cfg)
    if memory_high_watermark is None:
        return Enforcer(layout, model, reader, cfg, node, dry_run=dry_run, registered=chosen)
    return Enforcer(layout, model, reader, cfg, node, dry_run=dry_run, memory_high_watermark=memory_high_watermark,
                    registered=chosen)  # fmt: skip
