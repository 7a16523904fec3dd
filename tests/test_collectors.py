"""The collectors' registry: the only list of names, the configuration switches it makes, the turns on which
containers are read, and the one place counters become rates."""

from __future__ import annotations

import zlib

import pytest

from agent.config import AgentConfig, load_config
from agent.sense.collectors import always_on, names, specs
from agent.sense.rates import CpuRates
from agent.sense.sampler import CgroupPodSource, Sampler
from agent.windows.store import WindowStore
from common.config import ConfigError
from testsupport.cgtree import V1Tree


def test_names_are_registered_once_in_pass_order() -> None:
    assert names() == ("node", "tiers", "pods", "containers", "disk", "psi", "run_queue", "pod_network", "network",
                       "disk_devices")  # fmt: skip
    assert always_on() == frozenset({"node", "pods"})
    assert {s.name for s in specs() if s.scope == "pod"} == {"containers", "disk", "psi", "run_queue", "pod_network"}


def test_the_switches_come_from_the_registry_with_their_defaults() -> None:
    switches = AgentConfig().collectors
    assert switches.model_dump() == {"tiers": True, "containers": True, "disk": False, "psi": True, "run_queue": True,
                                     "pod_network": False, "network": True, "disk_devices": False}  # fmt: skip
    # off by default: pod_network reads a file per pod and pass; the disk ones are on with disk QoS
    assert switches.enabled() == frozenset(names()) - {"pod_network", "disk", "disk_devices"}


def test_a_switch_from_the_environment_and_an_unknown_or_always_on_one_rejected() -> None:
    cfg = load_config([], env={"COLO_COLLECTORS__PSI": "false", "COLO_COLLECTORS__NETWORK": "0",
                               "COLO_COLLECTORS__RUN_QUEUE": "false"})  # fmt: skip
    assert cfg.collectors.enabled() == frozenset({"node", "tiers", "pods", "containers"})
    for bad in ({"gpu": False}, {"pods": False}):
        with pytest.raises(ValueError):
            AgentConfig.model_validate({"collectors": bad})
    with pytest.raises(ConfigError):
        load_config([], env={"COLO_COLLECTORS__NODE": "false"})


def test_cpu_rates_rules() -> None:
    r = CpuRates()
    assert r.rate("a", 10.0, 1_000_000_000, 100, 0) == (None, None)  # first reading
    assert r.rate("a", 12.0, 2_000_000_000, 300, 50) == (0.5, 0.25)  # over the real elapsed time
    assert r.rate("a", 13.0, 2_000_000_000, 300, 50) == (0.0, 0.0)  # no periods: not throttled
    assert r.rate("a", 14.0, 1_000, 0, 0) == (None, None)  # recreated: no negative rate
    assert r.rate("a", 14.0, 2_000, 0, 0) == (None, None)  # no time passed
    r.forget("a")
    assert len(r) == 0


@pytest.mark.cgroupv1
def test_containers_are_read_on_their_turn_and_stand_in_between(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    uid, _, (ctr,) = tree.pod("burstable")
    source = CgroupPodSource(tree.layout, tree.model, 1e9)
    sampler = Sampler(tree.layout, tree.model, source, WindowStore(), container_every=3, container_stat_every=3)
    try:
        first = sampler.sample().pods[uid].containers[0]  # first sight: read at once
        seen = [sampler.sample().pods[uid].containers[0] for _ in range(6)]
        turns = [(1 + i + zlib.crc32(ctr.encode())) % 3 == 0 for i in range(6)]
        fresh = [s is not (seen[i - 1] if i else first) for i, s in enumerate(seen)]
        assert fresh == turns  # a new reading exactly on its turns, the same sample in between
        runs = {r.name: r for r in sampler.sample().collectors}
        assert runs["containers"].success and runs["pods"].duration_seconds >= 0
    finally:
        sampler.close()


def test_a_name_or_an_order_registered_twice_is_refused() -> None:
    from agent.sense.collectors.pods import PodsCollector
    from agent.sense.collectors.registry import register

    with pytest.raises(ValueError, match="registered twice"):
        register("pods", True, PodsCollector, fills="pods", order=99)
    with pytest.raises(ValueError, match="order 30 is taken"):
        register("gpu", True, PodsCollector, fills="gpu", order=30)
    assert "gpu" not in names()
