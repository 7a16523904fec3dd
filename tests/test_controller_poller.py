"""Polling real agent HTTP servers on loopback: slow, broken and hung agents; bounded concurrency."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator

import pytest

from bench.bench_controller import AgentFleet, agent_payload
from controller.config import AgentSettings
from controller.discovery import discover
from controller.policy import AGENT_WINDOWS
from controller.poller import AgentPoller, PollResult


@pytest.fixture
def fleet() -> Iterator[AgentFleet]:
    f = AgentFleet()
    try:
        yield f
    finally:
        f.close()


def targets(fleet: AgentFleet) -> dict[str, str]:
    return {k: f"http://{h}:{p}/api/v1/node" for k, (h, p) in fleet.addresses.items()}


def poll(fleet: AgentFleet, *, concurrency: int = 8, timeout: float = 1.0) -> PollResult:
    poller = AgentPoller(wanted=sorted(AGENT_WINDOWS), concurrency=concurrency, timeout=timeout)
    return asyncio.run(poller.poll_all(targets(fleet)))


def test_samples_parsed(fleet: AgentFleet) -> None:
    usage: dict[str, float | None] = dict.fromkeys(AGENT_WINDOWS, 0.25)
    usage["cpu_usage_max_avg_1d"] = None  # not enough history yet
    usage["mem_usage_avg_5m"] = float("nan")
    fleet.add("n1", agent_payload("n1", usage, oversubscription=(1500, 1 << 30)))
    fleet.add("n2", agent_payload(None, 0.5, oversubscription=None))  # node_name may be null
    result = poll(fleet)
    assert result.failed == {}
    s1 = result.samples["n1"]
    assert s1.windows["cpu_usage_avg_5m"] == 0.25 and s1.windows["cpu_usage_max_avg_1d"] is None
    assert math.isnan(s1.windows["mem_usage_avg_5m"] or 0.0)
    assert s1.oversubscription is not None and s1.oversubscription.cpu_millicores == 1500
    assert result.samples["n2"].oversubscription is None


def test_broken_agents_fail_alone(fleet: AgentFleet) -> None:
    for key in ("ok", "status", "garbage", "hang", "close", "huge", "wrong-node", "slow"):
        fleet.add(key, agent_payload(None if key != "wrong-node" else "someone-else"))
    for mode in ("status", "garbage", "hang", "close", "huge"):
        fleet.set(mode, mode=mode)
    fleet.set("slow", delay=0.3)
    targets_ = targets(fleet)
    targets_["refused"] = "http://127.0.0.1:1/api/v1/node"
    poller = AgentPoller(wanted=sorted(AGENT_WINDOWS), concurrency=16, timeout=0.6)
    result = asyncio.run(poller.poll_all(targets_))
    assert set(result.samples) == {"ok", "slow"}
    assert result.failed == {
        "status": "http_status",
        "garbage": "bad_payload",
        "hang": "timeout",
        "close": "bad_response",
        "huge": "too_large",
        "wrong-node": "bad_payload",
        "refused": "connect",
    }


def test_slow_agent_does_not_delay_the_rest(fleet: AgentFleet) -> None:
    fleet.add("slow", agent_payload("slow"))
    fleet.set("slow", mode="hang")
    for i in range(30):
        fleet.add(f"n{i}", agent_payload(f"n{i}"))
    # Two workers: while one is stuck on the hung agent for its whole deadline, the other serves all.
    started = time.time()
    result = poll(fleet, concurrency=2, timeout=3.0)
    assert result.failed == {"slow": "timeout"}
    assert len(result.samples) == 30
    # Nobody waited for the hung agent: every answer came before its deadline expired.
    assert max(s.at for s in result.samples.values()) < started + 3.0
    assert fleet.stats["slow"].requests == 1


def test_concurrency_is_bounded(fleet: AgentFleet) -> None:
    for i in range(40):
        fleet.add(f"n{i}", agent_payload(f"n{i}"))
        fleet.set(f"n{i}", delay=0.05)
    peak = 0

    async def run() -> PollResult:
        nonlocal peak
        poller = AgentPoller(wanted=sorted(AGENT_WINDOWS), concurrency=5, timeout=2)
        task = asyncio.create_task(poller.poll_all(targets(fleet)))
        while not task.done():
            peak = max(peak, fleet.total_in_flight())
            await asyncio.sleep(0.005)
        return await task

    result = asyncio.run(run())
    assert len(result.samples) == 40
    assert 1 <= peak <= 5


def test_discovery_prefers_endpointslices() -> None:
    settings = AgentSettings(port=9817)
    nodes = [
        {"metadata": {"name": n}, "status": {"addresses": [{"type": "InternalIP", "address": ip}]}}
        for n, ip in (("a", "10.0.0.1"), ("b", "10.0.0.2"), ("c", "fd00::3"))
    ]
    nodes.append({"metadata": {"name": "no-ip"}, "status": {}})
    slices = [
        {
            "addressType": "IPv4",
            "ports": [{"name": "metrics", "port": 9100}, {"name": "api", "port": 9817}],
            "endpoints": [
                {"addresses": ["192.0.2.1"], "nodeName": "a", "conditions": {"ready": True}},
                {"addresses": ["192.0.2.2"], "nodeName": "b", "conditions": {"ready": False}},
                {"addresses": ["192.0.2.9"], "nodeName": "gone"},
            ],
        }
    ]
    assert discover(nodes, slices, settings) == {
        "a": "http://192.0.2.1:9817/api/v1/node",
        "b": "http://10.0.0.2:9817/api/v1/node",  # not ready in the slice: fall back to InternalIP
        "c": "http://[fd00::3]:9817/api/v1/node",
    }
