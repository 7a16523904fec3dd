"""How many writes colo-controller sends per node per hour at steady load (issue 22: agent + controller ≤ 30).

    python -m bench.bench_controller_writes [--nodes 10] [--hours 3] [--interval 30]

The real `Controller` (informers, planner, writer) runs against the tests' fake API server and simulated
agents on loopback, with a simulated wall clock: each polling cycle advances it by `--interval` seconds, so
an hour is 120 cycles run back to back, not an hour of sleeping. Every request to the API server is
recorded; a write is a POST, PUT or PATCH on a Node (annotations or status). Events and the controller's
Lease are not node writes and are not counted (there is no leader election here).

Load: real utilisation from the Bitbrains GWA-T-12 "Rnd" trace (/work/shared/traces, Shen, van Beek, Iosup,
CCGrid 2015), read in place. Each simulated node packs 8 VMs of the trace (a synthetic packing: VMs taken in
the order of their numbers); its CPU and memory ratio is Σ used / Σ provisioned. The trace has one 5-minute
average every 300 s: a node's `*_avg_5m` at time t is interpolated linearly between the two samples around
it (an agent's sliding 5-minute mean moves like that), `*_max_avg_1h` / `*_max_avg_1d` are the maximum of
the 5-minute means over the past hour / day. Hours are taken on weekdays at 10:00 UTC, one per `--hours`.

Prints writes per node per hour: median and spread (min, max) over nodes × hours.

Measured (10 nodes × 5 hours, shipped settings: 30 s polling, crane's default policy): before issue 22,
20 (min 20, max 20): every 3 minutes, each 5m window's sync period. After: 8 (min 8, max 14): a steady node
is written only before crane would stop trusting its 5m windows (stamp + 3m period + 5m, less one cycle and
the write margin: every 450 s), a node whose load moves by writer.min_change more often. crane's rule alone
bounds it at 60 / 8 = 7.5 per hour with these periods. With a policy whose 5m windows have a 6m period
(`--policy`, the shipped ConfigMap with `period: 6m` for them): 6 (min 6, max 12).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import csv
import gzip
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

from controller.config import build_config
from controller.policy import DynamicSchedulerPolicy, default_policy, load_policy
from controller.service import Controller
from kube import Kube
from testsupport.agentfleet import AgentFleet, agent_payload
from testsupport.kubeapi.server import FakeKubeAPI

TRACE = Path("/work/shared/traces/bitbrains_rnd_dev.csv.gz")
VMS_PER_NODE = 8
DAY = 86400.0
HOUR = 3600.0
#: Weekdays of July 2013 at 10:00 UTC (inside the trace, each with a day of history before it).
HOURS = (1373450400.0, 1373536800.0, 1373882400.0, 1373968800.0, 1374055200.0)
NS = "colo-system"


class Clock:
    """The wall clock the controller reads; the benchmark moves it."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class NodeTrace:
    """One node's CPU and memory ratio every 300 s (Σ used / Σ provisioned of its VMs)."""

    def __init__(self, times: list[float], cpu: list[float], memory: list[float]) -> None:
        self.times, self.cpu, self.memory = times, cpu, memory

    def _avg(self, series: list[float], t: float) -> float:
        i = bisect.bisect_right(self.times, t)
        if i <= 0:
            return series[0]
        if i >= len(self.times):
            return series[-1]
        t0, t1 = self.times[i - 1], self.times[i]
        w = (t - t0) / (t1 - t0) if t1 > t0 else 0.0
        return series[i - 1] * (1 - w) + series[i] * w

    def _max(self, series: list[float], t: float, span: float) -> float:
        lo, hi = bisect.bisect_left(self.times, t - span), bisect.bisect_right(self.times, t)
        return max(series[lo:hi], default=self._avg(series, t))

    def windows(self, t: float) -> dict[str, float]:
        """The six crane windows at `t`, as the agent would serve them."""
        return {
            "cpu_usage_avg_5m": self._avg(self.cpu, t),
            "cpu_usage_max_avg_1h": self._max(self.cpu, t, HOUR),
            "cpu_usage_max_avg_1d": self._max(self.cpu, t, DAY),
            "mem_usage_avg_5m": self._avg(self.memory, t),
            "mem_usage_max_avg_1h": self._max(self.memory, t, HOUR),
            "mem_usage_max_avg_1d": self._max(self.memory, t, DAY),
        }


def load_nodes(nodes: int, start: float, end: float) -> list[NodeTrace]:
    """`nodes` synthetic nodes of VMS_PER_NODE trace VMs each, over [start, end]; samples binned to 300 s."""
    wanted_vms = nodes * VMS_PER_NODE
    # bin -> vm -> (cpu used, cpu prov, mem used, mem prov)
    rows: dict[int, dict[str, tuple[float, float, float, float]]] = defaultdict(dict)
    vm_order: list[str] = []
    with gzip.open(TRACE, "rt", newline="") as f:
        for row in csv.DictReader(f):
            vm = row["vm"]
            if vm not in vm_order:
                if len(vm_order) >= wanted_vms:
                    continue
                vm_order.append(vm)
            t = float(row["unix_s"])
            if not start <= t <= end:
                continue
            rows[int(t // 300)][vm] = (
                float(row["cpu_used_mhz"]), float(row["cpu_prov_mhz"]),
                float(row["mem_used_kb"]), float(row["mem_prov_kb"]),
            )  # fmt: skip
    out: list[NodeTrace] = []
    for n in range(nodes):
        members = vm_order[n * VMS_PER_NODE : (n + 1) * VMS_PER_NODE]
        times: list[float] = []
        cpu: list[float] = []
        memory: list[float] = []
        last: dict[str, tuple[float, float, float, float]] = {}
        for b in sorted(rows):
            for vm in members:
                if vm in rows[b]:
                    last[vm] = rows[b][vm]
            if not last:
                continue
            used_c, prov_c, used_m, prov_m = (sum(v[i] for v in last.values()) for i in range(4))
            times.append(b * 300.0 + 150.0)
            cpu.append(min(1.0, used_c / prov_c) if prov_c else 0.0)
            memory.append(min(1.0, used_m / prov_m) if prov_m else 0.0)
        out.append(NodeTrace(times, cpu, memory))
    return out


def _writes(api: FakeKubeAPI) -> dict[str, int]:
    """node -> writes so far (POST/PUT/PATCH on /api/v1/nodes/<name>[/status])."""
    out: dict[str, int] = defaultdict(int)
    for r in api.requests:
        if r.method in ("POST", "PUT", "PATCH") and r.path.startswith("/api/v1/nodes/"):
            out[r.path.split("/")[4]] += 1
    return out


def simulate_hour(
    traces: list[NodeTrace], start: float, interval: float, tmp: Path, policy: DynamicSchedulerPolicy
) -> list[int]:
    """Writes of each node during the hour after `start` (a warm-up hour before it is not counted)."""
    fleet = AgentFleet()
    api = FakeKubeAPI().start()
    kube = Kube.connect(api.kubeconfig(tmp / "kubeconfig"), request_timeout=5.0)
    assert kube is not None
    names = [f"node-{i:03d}" for i in range(len(traces))]
    clock = Clock(start - HOUR)
    try:
        for name, trace in zip(names, traces, strict=True):
            port = fleet.add(name, agent_payload(name, trace.windows(clock.now)))
            address = {"type": "InternalIP", "address": "127.0.0.1"}
            api.put("nodes", {"metadata": {"name": name}, "status": {"addresses": [address]}})
            api.put("endpointslices", {
                "metadata": {"name": f"colo-agent-{name}", "namespace": NS,
                             "labels": {"kubernetes.io/service-name": "colo-agent"}},
                "addressType": "IPv4", "ports": [{"name": "api", "port": port, "protocol": "TCP"}],
                "endpoints": [{"addresses": ["127.0.0.1"], "nodeName": name, "conditions": {"ready": True}}],
            })  # fmt: skip
        cfg = build_config({
            "agent": {"namespace": NS},
            "polling": {"interval": interval, "timeout": 2.0, "concurrency": 16},
            "writer": {"qps": 1000, "burst": 1000, "workers": 2},
            "leader_election": {"enabled": False},
        })  # fmt: skip
        controller = Controller(kube, cfg, policy, clock=clock)
        controller.start(run_loop=False)
        try:
            _wait(controller.synced)
            counted: dict[str, int] = {}
            while clock.now < start + HOUR:
                if counted == {} and clock.now >= start:
                    counted = dict(_writes(api)) or {"": 0}
                for name, trace in zip(names, traces, strict=True):
                    fleet.set(name, payload=agent_payload(name, trace.windows(clock.now)))
                asyncio.run(controller.cycle())
                assert controller.writer.wait_idle(30)
                clock.now += interval
            after = _writes(api)
            return [after.get(n, 0) - counted.get(n, 0) for n in names]
        finally:
            controller.stop()
    finally:
        kube.close()
        api.stop()
        fleet.close()


def _wait(ready: Callable[[], bool], timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError("informers did not sync")
        time.sleep(0.02)


def summary(values: Iterable[float]) -> str:
    v = sorted(values)
    return f"median {statistics.median(v):.1f}, min {v[0]:.0f}, max {v[-1]:.0f} (n={len(v)})"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--hours", type=int, default=3, choices=range(1, len(HOURS) + 1))
    p.add_argument("--interval", type=float, default=30.0, help="polling interval, seconds (shipped: 30)")
    p.add_argument("--policy", metavar="FILE", help="crane DynamicSchedulerPolicy (default: crane's default)")
    args = p.parse_args(argv)
    policy = load_policy(args.policy) if args.policy else default_policy()
    per_node: list[int] = []
    for start in HOURS[: args.hours]:
        traces = load_nodes(args.nodes, start - DAY - HOUR, start + HOUR)
        with tempfile.TemporaryDirectory() as tmp:
            writes = simulate_hour(traces, start, args.interval, Path(tmp), policy)
        print(f"hour from {start:.0f}: writes per node {writes}", flush=True)
        per_node += writes
    print(f"controller writes per node per hour: {summary(per_node)}")


if __name__ == "__main__":
    main()
