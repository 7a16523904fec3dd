"""Polling real agent HTTP servers on loopback: slow, broken and hung agents; bounded concurrency."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable
from typing import Any

import pytest

from controller.agent_endpoints import discover
from controller.config import AgentSettings
from controller.policy import AGENT_WINDOWS
from controller.poller import AgentPoller, PollResult, SampleRejected, parse_sample
from tests.controller_fleet import (
    fleet_fixture,  # noqa: F401
    fleet_targets,
)
from testsupport.agentfleet import AgentFleet, agent_payload


def poll(fleet: AgentFleet, *, concurrency: int = 8, timeout: float = 1.0) -> PollResult:
    poller = AgentPoller(wanted=sorted(AGENT_WINDOWS), concurrency=concurrency, timeout=timeout)
    return asyncio.run(poller.poll_all(fleet_targets(fleet)))


def test_samples_parsed(fleet: AgentFleet) -> None:
    usage: dict[str, float | None] = dict.fromkeys(AGENT_WINDOWS, 0.25)
    usage["cpu_usage_max_avg_1d"] = None  # not enough history yet
    usage["mem_usage_avg_5m"] = 1.004  # a hair above 1: within the tolerance, clamped
    fleet.add("n1", agent_payload("n1", usage, oversubscription=(1500, 1 << 30)))
    fleet.add("n2", agent_payload(None, 0.5, oversubscription=None))  # node_name may be null; label off
    result = poll(fleet)
    assert result.failed == {} and result.rejected == {}
    s1 = result.samples["n1"]
    assert s1.windows["cpu_usage_avg_5m"] == 0.25 and s1.windows["cpu_usage_max_avg_1d"] is None
    assert s1.windows["mem_usage_avg_5m"] == 1.0
    assert s1.oversubscription is not None and s1.oversubscription.cpu_millicores == 1500
    assert result.samples["n2"].oversubscription is None


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    *parents, last = path.split(".")
    target = doc
    for key in parents:
        target = target[key]
    target[last] = value
    return doc


def _rename(doc: dict[str, Any], path: str, new: str) -> dict[str, Any]:
    *parents, last = path.split(".")
    target = doc
    for key in parents:
        target = target[key]
    target[new] = target.pop(last)
    return doc


#: Bad documents an agent (or something posing as one) may send, and the reason each is rejected with.
BAD: dict[str, tuple[Callable[[dict[str, Any]], dict[str, Any] | str], str]] = {
    "NaN ratio": (lambda d: _set(d, "windows.mem_usage_avg_5m.value", math.nan), "not_finite"),
    "infinite ratio": (lambda d: _set(d, "windows.cpu_usage_avg_5m.value", math.inf), "not_finite"),
    "ratio 7.5": (lambda d: _set(d, "windows.cpu_usage_avg_5m.value", 7.5), "out_of_range"),
    "ratio 1e308": (lambda d: _set(d, "windows.cpu_usage_max_avg_1h.value", 1e308), "out_of_range"),
    "negative ratio": (lambda d: _set(d, "windows.cpu_usage_avg_5m.value", -0.5), "out_of_range"),
    "coverage 2": (lambda d: _set(d, "windows.cpu_usage_avg_5m.coverage", 2.0), "out_of_range"),
    "ratio as a string": (lambda d: _set(d, "windows.cpu_usage_avg_5m.value", "0.5"), "wrong_type"),
    "ratio as a bool": (lambda d: _set(d, "windows.cpu_usage_avg_5m.value", True), "wrong_type"),
    "window renamed": (lambda d: _rename(d, "windows.cpu_usage_avg_5m", "cpu_usage_avg5m"), "missing_field"),
    "windows renamed": (lambda d: _rename(d, "windows", "window"), "missing_field"),
    "value renamed": (lambda d: _rename(d, "windows.cpu_usage_avg_5m.value", "val"), "missing_field"),
    "no memory total": (lambda d: _rename(d, "memory_total_bytes", "memory_bytes"), "missing_field"),
    "oversubscription 1e300": (lambda d: _set(d, "oversubscription.cpu_millicores", 1e300), "wrong_type"),
    "oversubscription 10**300": (lambda d: _set(d, "oversubscription.cpu_millicores", 10**300), "out_of_range"),
    "cpu above allocatable": (lambda d: _set(d, "oversubscription.cpu_millicores", 8001), "out_of_range"),
    "memory above allocatable": (lambda d: _set(d, "oversubscription.memory_bytes", (16 << 30) + 2), "out_of_range"),
    "published, no number": (lambda d: _rename(d, "oversubscription.memory_bytes", "memory_b"), "missing_field"),
    "bytes as a float": (lambda d: _set(d, "memory_used_bytes", 1.5), "wrong_type"),
    "used above total": (lambda d: _set(d, "memory_used_bytes", 1 << 40), "out_of_range"),
    "cores above capacity": (lambda d: _set(d, "cpu_cores", 80.0), "out_of_range"),
    "negative rate": (lambda d: _set(d, "network.total.receive_bytes_per_second", -1.0), "out_of_range"),
    "another node": (lambda d: _set(d, "node_name", "someone-else"), "wrong_node"),
    "a 1 MB node name": (lambda d: _set(d, "node_name", "n" * (1 << 20)), "out_of_range"),
    "not a timestamp": (lambda d: _set(d, "timestamp", "yesterday"), "out_of_range"),
    "not JSON": (lambda d: "{'windows': ", "not_json"),
    "a list": (lambda d: "[1, 2]", "not_object"),
    "deeply nested": (lambda d: "[" * 100000 + "]" * 100000, "not_json"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_documents_are_rejected_by_reason(case: str) -> None:
    mutate, reason = BAD[case]
    mutated = mutate(agent_payload("n1", 0.3))
    body = mutated if isinstance(mutated, str) else json.dumps(mutated)  # NaN/Infinity as Python writes them
    with pytest.raises(SampleRejected) as info:
        parse_sample("n1", body.encode(), sorted(AGENT_WINDOWS), 0.0)
    assert info.value.reason == "bad_payload" and info.value.rejection == reason, str(info.value)
    assert "\n" not in str(info.value) and len(str(info.value)) < 300  # one line, never the whole document


def test_rejections_are_reported_per_node(fleet: AgentFleet) -> None:
    fleet.add("ok", agent_payload("ok", 0.3))
    fleet.add("nan", json.dumps(_set(agent_payload("nan", 0.3), "windows.cpu_usage_avg_5m.value", math.nan)).encode())
    fleet.add("huge", agent_payload("huge", 1e308))
    result = poll(fleet)
    assert set(result.samples) == {"ok"}
    assert result.failed == {"nan": "bad_payload", "huge": "bad_payload"}
    assert result.rejected == {"nan": "not_finite", "huge": "out_of_range"}


def test_broken_agents_fail_alone(fleet: AgentFleet) -> None:
    for key in ("ok", "status", "garbage", "hang", "close", "huge", "wrong-node", "slow"):
        fleet.add(key, agent_payload(None if key != "wrong-node" else "someone-else"))
    for mode in ("status", "garbage", "hang", "close", "huge"):
        fleet.set(mode, mode=mode)
    fleet.set("slow", delay=0.3)
    targets_ = fleet_targets(fleet)
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
        task = asyncio.create_task(poller.poll_all(fleet_targets(fleet)))
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
