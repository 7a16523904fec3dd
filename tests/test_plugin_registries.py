"""Parts and strategies register themselves, as the collectors do: importing their package imports every
module, each module registers with an explicit order, and the registries keep today's orders whatever the
import order. The expected lists below are what the hand-written lists gave before (a reordering shows)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.config import AgentConfig
from agent.enforce.parts import registry as parts
from agent.enforce.parts.spec import PartSpec
from agent.enforce.strategies import registry
from agent.enforce.strategies.baseline import Baseline
from agent.enforce.strategies.batch_limits import BatchLimits
from agent.enforce.strategies.cpu_burst import CpuBurst
from agent.enforce.strategies.cpu_suppression import CfsQuota, Cpuset
from agent.enforce.strategies.disk_qos import DiskQos
from agent.enforce.strategies.memory_high import MemoryHigh
from agent.enforce.strategies.memory_qos import MemoryQos
from agent.enforce.strategies.net_egress import NetEgress
from agent.enforce.strategies.quota_burst import QuotaBurst
from agent.enforce.strategies.registry import Facts, Strategy, strategies
from agent.enforce.strategies.run_queue_guard import RunQueueGuard

ROOT = Path(__file__).resolve().parents[1]
V1 = Facts(is_v2=False, besteffort_tier="/kubepods/besteffort", burst_supported=True)
V2 = Facts(is_v2=True, besteffort_tier="/kubepods.slice/kubepods-besteffort.slice", burst_supported=True,
           kubepods="/kubepods.slice")  # fmt: skip
NO_BURST = Facts(is_v2=False, besteffort_tier="/kubepods/besteffort", burst_supported=False)
ONLINE_AND_DISK = ["cpu_burst", "quota_burst", "memory_qos", "disk_qos"]


def config(**sections: Any) -> AgentConfig:
    return AgentConfig.model_validate(sections)


NETWORK_QOS = {"network_qos": {"enabled": True}, "collectors": {"pod_network": True}}
CASES: dict[str, tuple[AgentConfig, Facts, list[str]]] = {
    "defaults": (config(), V1, ["baseline", "cfs_quota", "batch_limits", *ONLINE_AND_DISK]),
    "cpuset": (config(enforcement={"cpu_policy": "cpuset"}), V1, ["baseline", "cpuset", "batch_limits", *ONLINE_AND_DISK]),
    "no cpu policy": (config(enforcement={"cpu_policy": "none"}), V1, ["baseline", "batch_limits", *ONLINE_AND_DISK]),
    "batch disabled": (config(batch={"enabled": False}), V1, ["baseline", "cfs_quota", *ONLINE_AND_DISK]),
    "network qos": (config(**NETWORK_QOS), V1, ["baseline", "cfs_quota", "batch_limits", *ONLINE_AND_DISK, "net_egress"]),
    "v2, memory_high": (config(), V2, ["baseline", "cfs_quota", "memory_high", "batch_limits", *ONLINE_AND_DISK]),
    "v2, memory_high off": (config(enforcement={"memory_high": False}), V2, ["baseline", "cfs_quota", "batch_limits", *ONLINE_AND_DISK]),
    "v1, memory_high on": (config(enforcement={"memory_high": True}), V1, ["baseline", "cfs_quota", "batch_limits", *ONLINE_AND_DISK]),
    "burst unsupported": (config(), NO_BURST, ["baseline", "cfs_quota", "batch_limits", *ONLINE_AND_DISK]),
    "everything, v2": (config(enforcement={"cpu_policy": "cpuset", "rq_protection": {"enabled": True}}, **NETWORK_QOS), V2,
                       ["baseline", "run_queue_guard", "cpuset", "memory_high", "batch_limits", *ONLINE_AND_DISK, "net_egress"]),
    "run-queue protection": (config(enforcement={"rq_protection": {"enabled": True}}), V1,
                             ["baseline", "run_queue_guard", "cfs_quota", "batch_limits", *ONLINE_AND_DISK]),
    "run-queue protection, no cpu policy": (config(enforcement={"cpu_policy": "none", "rq_protection": {"enabled": True}}), V1,
                                            ["baseline", "batch_limits", *ONLINE_AND_DISK]),
}  # fmt: skip


def listed_by_hand(config: AgentConfig, facts: Facts) -> list[Strategy]:
    """The function the registry replaced, as it was: the oracle for what each strategy is built with."""
    e, q = config.enforcement, config.qos
    registered: list[Strategy | None] = [
        Baseline(e),
        RunQueueGuard(e) if e.rq_protection.enabled and e.cpu_policy != "none" else None,
        CfsQuota(e, facts.besteffort_tier) if e.cpu_policy == "cfsQuota" else None,
        Cpuset(e) if e.cpu_policy == "cpuset" else None,
        MemoryHigh(e) if facts.is_v2 and e.memory_high else None,
        BatchLimits(config.batch, e.cpu_period_us) if config.batch.enabled else None,
        CpuBurst(q.cpu_burst, facts.burst_supported),
        QuotaBurst(q.quota_burst),
        MemoryQos(q.memory, facts.is_v2, facts.kubepods),
        DiskQos(e.disk, e.besteffort_share, facts.is_v2),
        NetEgress(config.network_qos) if config.network_qos.enabled else None,
    ]
    return [s for s in registered if s is not None]


def built_with(s: Strategy) -> tuple[type, dict[str, Any]]:
    """A strategy's class and what it was built with: its attributes that compare by value (caches, which
    start empty, compare by identity)."""
    return type(s), {k: v for k, v in vars(s).items() if type(v).__eq__ is not object.__eq__}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_registry_gives_todays_strategies_in_todays_order(case: str) -> None:
    cfg, facts, expected = CASES[case]
    chosen = strategies(cfg, facts)
    assert [s.name for s in chosen] == expected
    assert [built_with(s) for s in chosen] == [built_with(s) for s in listed_by_hand(cfg, facts)]


def test_what_a_strategy_is_built_with_shows_a_changed_fact() -> None:
    """The comparison above can fail: a fact a factory passes on changes what the strategy holds."""
    cfg, _, _ = CASES["defaults"]
    assert built_with(strategies(cfg, NO_BURST)[3]) != built_with(strategies(cfg, V1)[3])  # cpu_burst: supported


def test_each_strategy_is_registered_under_its_own_name_in_order() -> None:
    specs = registry.specs()
    assert [s.name for s in specs] == ["baseline", "run_queue_guard", "cfs_quota", "cpuset", "memory_high", "batch_limits",
                                       "cpu_burst", "quota_burst", "memory_qos", "disk_qos", "net_egress"]  # fmt: skip
    cfg, facts, _ = CASES["everything, v2"]
    built = {s.name: s for s in strategies(cfg, facts)}
    for spec in specs:
        made = spec.factory(cfg, facts) or spec.factory(config(), V1)
        assert made is not None and made.name == spec.name
        assert spec.name not in built or type(built[spec.name]) is type(made)


def test_a_strategy_is_registered_once_and_at_an_order_of_its_own() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("baseline", lambda c, f: None, order=1000)
    with pytest.raises(ValueError, match="order 10 is taken"):
        registry.register("another", lambda c, f: None, order=10)
    assert "another" not in [s.name for s in registry.specs()]


class Extra:
    name = "extra"
    parts: frozenset[str] = frozenset()

    def plan(self, state: Any, recorded: Any) -> Any:
        raise AssertionError("not run here")


@pytest.fixture
def extra() -> Iterator[None]:
    registry.register("extra", lambda c, f: Extra() if c.batch.enabled else None, order=55)
    try:
        yield
    finally:
        registry.unregister("extra")


@pytest.mark.usefixtures("extra")
def test_a_registered_strategy_takes_its_place_when_its_factory_builds_it() -> None:
    names = [s.name for s in strategies(config(), V1)]
    assert names == ["baseline", "cfs_quota", "batch_limits", "extra", *ONLINE_AND_DISK]
    assert "extra" not in [s.name for s in strategies(config(batch={"enabled": False}), V1)]


# -- parts -------------------------------------------------------------------------------------------------
RESTORE_ORDER = ["baseline", "quota", "cpuset", "memory_high", "burst", "quota_burst", "memory_qos", "batch",
                 "net_egress", "disk"]  # fmt: skip


def test_the_parts_are_in_todays_restore_order() -> None:
    assert list(parts.PARTS) == RESTORE_ORDER
    assert all(name == spec.name for name, spec in parts.PARTS.items())


def test_a_part_takes_its_place_in_the_restore_order_whenever_it_registers() -> None:
    mapping = parts.PARTS
    parts.register(PartSpec("early", "offline"), order=15)
    try:
        assert list(parts.PARTS) == ["baseline", "early", *RESTORE_ORDER[1:]]
        assert parts.PARTS is mapping  # the executor and restore hold it by reference
        with pytest.raises(ValueError, match="order 15 is taken by 'early'"):
            parts.register(PartSpec("late", "offline"), order=15)
        with pytest.raises(ValueError, match="registered twice"):
            parts.register(PartSpec("early", "online"), order=16)
    finally:
        parts.unregister("early")
    assert list(parts.PARTS) == RESTORE_ORDER
    parts.register(PartSpec("early", "offline"), order=15)  # its order is free again
    parts.unregister("early")


@pytest.mark.parametrize("package", ["parts", "strategies"])
def test_no_module_lists_the_registered_modules(package: str) -> None:
    """The registries list nothing by hand: neither imports a module of its own package (the package's
    __init__ imports them all), so a new part or strategy is its own module only."""
    tree = ast.parse((ROOT / "agent" / "enforce" / package / "registry.py").read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in imported if m.startswith(f"agent.enforce.{package}")} <= {"agent.enforce.parts.spec"}
