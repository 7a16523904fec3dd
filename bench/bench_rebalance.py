"""Benchmark of one rebalancing cycle's planning: 5000 nodes x 30 pods (target <= 1 s).

    python -m bench.bench_rebalance [--nodes 5000] [--pods-per-node 30] [--repeat 15]

Builds the controller's inputs once (slim nodes and pods with their traits, as the informers cache them;
one agent sample per node; the sources' pod usage as `fetch_pod_usages` returns it), then times what
`Rebalancer.run` computes between the polls: steps 1-4 (`assess`) and steps 5-7 (`select_and_plan`) in
a dry run. A third of the nodes are hot (all confirmed sources), a third cold, so every source gets
candidates and the fit search runs over 1700 destinations. Two limit settings: the defaults (10
evictions per cycle: planning stops early, what a cluster runs) and no limits (every source is planned
until it is under its threshold: the worst case). Also timed: decoding the sources' agent pod lists.
Prints median, p10 and p90 of each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from contract.classify import Classifier
from controller.rebalance.assess import assess
from controller.rebalance.moves import select_and_plan
from controller.rebalance.settings import RebalanceSettings
from controller.rebalance.traits import TRAITS, node_traits, pod_traits
from controller.rebalance.usage import PodLoad, pod_usages
from testsupport.rebalance_objects import GIB, agent_pod, node, pod

TARGET_SECONDS = 1.0
ZONE_KEY = "topology.kubernetes.io/zone"
ZONES = [{"matchExpressions": [{"key": ZONE_KEY, "operator": "In", "values": ["zone-0", "zone-1", "zone-2"]}]}]
NOT_READY = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}]


def build(nodes: int, per_node: int, cfg: RebalanceSettings) -> dict[str, Any]:
    """Inputs of one cycle; node i is hot (i % 3 == 0), cold (1) or normal (2)."""
    classifier = Classifier()
    node_objs: list[dict[str, Any]] = []
    ratios: dict[str, tuple[float | None, float | None]] = {}
    counts: dict[str, int] = {}
    pods: dict[str, dict[str, Any]] = {}
    docs: dict[str, bytes] = {}
    for i in range(nodes):
        name = f"node-{i:05d}"
        zone = f"zone-{i % 3}"
        obj = node(name, cpu=32, memory_gib=128, labels={"topology.kubernetes.io/zone": zone})
        node_objs.append({"metadata": {"name": name}, TRAITS: node_traits(obj)})
        kind = i % 3
        cpu = (0.85 + (i % 10) / 100) if kind == 0 else (0.2 + (i % 20) / 100) if kind == 1 else 0.6
        ratios[name] = (cpu, 0.3 + (i % 5) / 100 if kind != 0 else 0.5)
        if kind == 0:
            counts[name] = cfg.consecutive_abnormalities - 1
        entries = []
        for k in range(per_node):
            pname = f"app-{i}-{k}"
            ns = f"team-{(i + k) % 40}"
            p = pod(pname, name, namespace=ns, cpu="250m", memory="512Mi", offline=k % 5 == 0,
                    affinity_terms=ZONES if k % 4 == 0 else None, tolerations=NOT_READY)  # fmt: skip
            traits = pod_traits(p, classifier, {"koordinator.sh/qosClass"})
            pods[f"{ns}/{pname}"] = {"metadata": {"name": pname, "namespace": ns}, TRAITS: traits}
            entries.append(agent_pod(ns, pname, 0.2 + (k % 10) / 10, (0.25 + (k % 4) / 4) * GIB))
        if kind == 0:
            docs[name] = json.dumps(entries).encode()
    return {"nodes": node_objs, "ratios": ratios, "counts": counts, "pods": pods, "docs": docs}


Timings = tuple[list[float], list[float]]  # wall, CPU (this process)


def timed(fn: Callable[[], object], repeat: int) -> Timings:
    wall, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return wall, cpu


def describe(label: str, timings: Timings) -> str:
    parts = []
    for what, seconds in zip(("wall", "cpu"), timings, strict=True):
        q = statistics.quantiles(seconds, n=10) if len(seconds) > 1 else [seconds[0]] * 9
        ms = [statistics.median(seconds) * 1000, q[0] * 1000, q[-1] * 1000]
        parts.append(f"{what} median {ms[0]:7.1f} ms (p10 {ms[1]:7.1f}, p90 {ms[2]:7.1f})")
    return f"  {label:36s} " + "; ".join(parts)


def run(nodes: int, per_node: int, repeat: int) -> dict[str, Timings]:
    default = RebalanceSettings(enabled=True)
    unlimited = default.model_copy(
        update={
            "max_evictions_per_cycle": 10**9,
            "max_evictions_per_namespace": 10**9,
            "max_evictions_per_node": per_node,
        }
    )
    data = build(nodes, per_node, default)
    traits = {n["metadata"]["name"]: n[TRAITS] for n in data["nodes"]}
    pods = data["pods"]
    usages: dict[str, list[PodLoad]] = {n: pod_usages(d, default.window) for n, d in data["docs"].items()}

    def cycle(cfg: RebalanceSettings) -> Callable[[], object]:
        def once() -> object:
            a = assess(traits, data["ratios"], data["counts"], cfg)
            return select_and_plan(a, usages, {}, pods.get, pods.values, cfg, lambda *x: "dry_run")

        return once

    check = cycle(unlimited)()
    assert len(check.assessment.sources) == len(data["docs"]) and check.plan.moves  # type: ignore[attr-defined]
    results = {
        "assess (steps 1-4)": timed(lambda: assess(traits, data["ratios"], data["counts"], default), repeat),
        "cycle, default limits (steps 1-7)": timed(cycle(default), repeat),
        "cycle, no limits (steps 1-7)": timed(cycle(unlimited), repeat),
        "decode and validate the sources' pod lists": timed(
            lambda: [pod_usages(d, default.window) for d in data["docs"].values()], max(3, repeat // 3)
        ),
    }
    moves = len(check.plan.moves)  # type: ignore[attr-defined]
    low = len(check.assessment.low)  # type: ignore[attr-defined]
    print(f"  sources {len(data['docs'])}, destinations {low}, planned moves without limits {moves}")
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_rebalance")
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--pods-per-node", type=int, default=30)
    p.add_argument("--repeat", type=int, default=15)
    args = p.parse_args(argv)
    print(f"rebalancing plan benchmark: {args.nodes} nodes x {args.pods_per_node} pods")
    results = run(args.nodes, args.pods_per_node, args.repeat)
    for label, seconds in results.items():
        print(describe(label, seconds))
    default = statistics.median(results["cycle, default limits (steps 1-7)"][1])
    worst = statistics.median(results["cycle, no limits (steps 1-7)"][1])
    ok = default <= TARGET_SECONDS
    print(f"  target: one cycle <= {TARGET_SECONDS:g} s of CPU (default limits, median): {'met' if ok else 'NOT met'}")
    print(f"  without limits (every source planned until under its threshold): {worst:.2f} s of CPU")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
