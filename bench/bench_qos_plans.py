"""Benchmark: what the online QoS strategies add to each enforcement pass, planning only (no cgroup I/O).

250 online pods × 3 containers with CPU limits and memory requests, the three strategies (cpu_burst,
quota_burst, memory_qos) planned once per pass as the enforcer does, their memos carried over: CPU time per
pass, median and p10–p90 over the passes, with the features off (the default: the burst strategy still
reads the pods' annotations) and on (every target asked for in the first pass, changes only afterwards).

Run: `.venv/bin/python -m bench.bench_qos_plans [--pods 250] [--passes 300]`.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from typing import Any

from agent.config import AgentConfig
from agent.enforce.actions import Recorded
from agent.enforce.strategies.registry import Facts, strategies
from agent.node_state import node_state
from agent.snapshot import ContainerSample, NodeSample, PodMeta, PodSample, Snapshot

GI, MI = 1 << 30, 1 << 20
QOS = ("cpu_burst", "quota_burst", "memory_qos")


def _pods(n: int) -> list[PodSample]:
    out = []
    for i in range(n):
        uid, cg = f"uid-{i}", f"/kubepods/burstable/poduid-{i}"
        ctrs = tuple(ContainerSample(f"c{i}-{j}", f"{cg}/c{i}-{j}", 0.2, 0, 0, 0, 0.3 if j == 0 else 0.0)
                     for j in range(3))  # fmt: skip
        meta = PodMeta(uid, "ns", uid, "online", cpu_limit_cores=1.5, memory_limit_bytes=768 * MI,
                       container_cpu_limits={c.id: 0.5 for c in ctrs},
                       container_memory={c.id: (128 * MI, 256 * MI) for c in ctrs})  # fmt: skip
        out.append(PodSample(meta, "burstable", cg, 0.6, 0, 0, 0, 0, 0.1, ctrs))
    return out


def _run(pods: list[PodSample], passes: int, qos: dict[str, Any]) -> list[float]:
    cfg = AgentConfig.model_validate({"qos": qos})
    chosen = [s for s in strategies(cfg, Facts(True, "/kubepods/besteffort", True)) if s.name in QOS]
    snap = Snapshot(1, 0.0, 0.0, NodeSample(64.0, 8.0, 256 * GI, 64 * GI, 0), {}, {p.uid: p for p in pods}, (), 0.0)
    state = dataclasses.replace(node_state(snap, (64.0, 256 * GI)))
    memos: dict[str, Any] = {}
    times = []
    for i in range(passes):
        t0 = time.thread_time()
        for s in chosen:
            plan = s.plan(state, Recorded({}, {}, memos.get(s.name), float(i)))
            memos[s.name] = plan.memo
        times.append((time.thread_time() - t0) * 1000)
    return times[1:]  # the first pass asks for every target


def _summary(name: str, ms: list[float]) -> str:
    q = statistics.quantiles(ms, n=10)
    return f"{name}: median {statistics.median(ms):.2f} ms per pass (p10–p90 {q[0]:.2f}–{q[-1]:.2f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=250)
    ap.add_argument("--passes", type=int, default=300)
    args = ap.parse_args()
    pods = _pods(args.pods)
    print(f"{args.pods} online pods x 3 containers, {args.passes} passes")
    print(_summary("off (defaults)", _run(pods, args.passes, {})))
    on = {"cpu_burst": {"enabled": True}, "quota_burst": {"enabled": True}, "memory": {"enabled": True}}
    print(_summary("all on", _run(pods, args.passes, on)))


if __name__ == "__main__":
    main()
