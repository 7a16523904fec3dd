"""What the controller tests share: simulated agents (testsupport.agentfleet.AgentFleet) as a fixture, a
settable clock, the agents' EndpointSlices in the fake API server, a configuration for fast cycles, and
controllers started against the fake API server and stopped after the test.

Import the fixtures to use them (`from tests.controller_fleet import fleet_fixture  # noqa: F401` gives
tests a `fleet` argument; `started_fixture` a `started` list).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from controller.config import ControllerConfig, build_config
from controller.policy import DynamicSchedulerPolicy, default_policy
from controller.service import Controller
from kube import Kube
from testsupport.agentfleet import AgentFleet
from testsupport.kubeapi.server import FakeKubeAPI
from testsupport.waiting import wait_for

T0 = 1795341600.0  # 2026-11-22T10:00:00Z
NS = "colo-system"


class Clock:
    """A wall clock the test sets."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(name="fleet")
def fleet_fixture() -> Iterator[AgentFleet]:
    f = AgentFleet()
    try:
        yield f
    finally:
        f.close()


@pytest.fixture(name="started")
def started_fixture() -> Iterator[list[Controller]]:
    """Controllers appended here are stopped after the test."""
    controllers: list[Controller] = []
    yield controllers
    for c in controllers:
        c.stop()


def fleet_targets(fleet: AgentFleet, path: str = "/api/v1/node") -> dict[str, str]:
    """node -> URL of each simulated agent's `path`."""
    return {k: f"http://{h}:{p}{path}" for k, (h, p) in fleet.addresses.items()}


def add_slice(api: FakeKubeAPI, node: str, port: int) -> None:
    """The agents' EndpointSlice entry of `node`: its agent answers on 127.0.0.1:`port`."""
    api.put(
        "endpointslices",
        {
            "metadata": {
                "name": f"colo-agent-{node}",
                "namespace": NS,
                "labels": {"kubernetes.io/service-name": "colo-agent"},
            },
            "addressType": "IPv4",
            "ports": [{"name": "api", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["127.0.0.1"], "nodeName": node, "conditions": {"ready": True}}],
        },
    )


def config(agent_port: int = 9817, **overrides: Any) -> ControllerConfig:
    """Fast cycles, no leader election; a dict override is merged into its section, anything else replaces."""
    doc: dict[str, Any] = {
        "agent": {"port": agent_port, "namespace": NS},
        "polling": {"interval": 0.2, "timeout": 1.0, "concurrency": 4},
        "writer": {"qps": 1000, "burst": 1000, "workers": 2},
        "leader_election": {"enabled": False, "namespace": NS},
    }
    for key, value in overrides.items():
        doc[key] = {**doc.get(key, {}), **value} if isinstance(value, dict) else value
    return build_config(doc)


def start_synced(
    kube: Kube,
    cfg: ControllerConfig,
    started: list[Controller],
    *,
    policy: DynamicSchedulerPolicy | None = None,
    clock: Any = None,
) -> Controller:
    """A controller whose informers have synced, cycles left to the test (`run_cycle`)."""
    c = Controller(kube, cfg, policy or default_policy(), clock=clock or Clock(T0))
    started.append(c)
    c.start(run_loop=False)
    wait_for(c.synced, what="informers")
    return c


def run_cycle(c: Controller) -> None:
    """One polling cycle, and every annotation it planned written."""
    asyncio.run(c.cycle())
    assert c.writer.wait_idle(10)
