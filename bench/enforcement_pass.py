"""Benchmark the enforcement stage alone: 250 pods x 3 containers on the real v1 hierarchy, a third offline,
one `Enforcer.on_snapshot` per simulated second (the clock advances 1 s per pass, so the baseline and its
oom_score_adj come back every 5 passes as in the running agent). Reports the CPU time of a pass after the first
(which records every original and writes every value): its mean (the stage's cost per second, the baseline's
share included), median, p10, p90 and p99; and of that first pass.

Run as root: `.venv/bin/python -m bench.enforcement_pass [--pods 250] [--passes 200] [--repeat 3]`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from agent.config_sections.enforcement import EnforcementConfig
from agent.enforce.stage import Enforcer
from agent.snapshot import ContainerSample, NodeSample, PodClass, PodMeta, PodSample, Snapshot
from bench.agent_overhead import percentile
from cgroup import CgroupReader
from testsupport.cgtree import V1Tree
from testsupport.strategies import default_strategies

GI = 1 << 30


def pods_of(tree: V1Tree, n: int) -> list[PodSample]:
    tiers = ("guaranteed", "burstable", "besteffort")
    out = []
    for i in range(n):
        uid, path, containers = tree.pod(tiers[i % 3], containers=3)  # type: ignore[arg-type]
        cls: PodClass = "offline" if i % 3 == 1 else "online"
        meta = PodMeta(uid, "default", f"pod-{i}", cls, cpu_request_cores=0.1, cpu_limit_cores=0.5)
        ctrs = tuple(ContainerSample(c.rsplit("/", 1)[1], c, 0.01, 0, 0, 0, 0.0) for c in containers)
        out.append(PodSample(meta, tiers[i % 3], path, 0.03, 64 << 20, 0, 0, 0, 0.0, ctrs))
    return out


def run(pods: int, passes: int) -> dict[str, float]:
    tree = V1Tree("cgroupfs")
    try:
        samples = {p.uid: p for p in pods_of(tree, pods)}
        now = [0.0]
        with tempfile.TemporaryDirectory() as tmp:
            config = EnforcementConfig(ledger_file=f"{tmp}/ledger.json")
            chosen = default_strategies(tree.layout, tree.model, config)
            enf = Enforcer(tree.layout, tree.model, CgroupReader(tree.layout), config, lambda: (2.0, 8 * GI),
                           clock=lambda: now[0], registered=chosen)  # fmt: skip
            times: list[float] = []
            for i in range(passes + 1):
                node = NodeSample(2.0, 1.5 + 0.1 * (i % 3), 8 * GI, 2 * GI, 0)  # busy: offline pods suppressed
                snap = Snapshot(i, now[0], time.time(), node, {}, samples, (), 0.0)
                start = time.thread_time()
                enf.on_snapshot(snap)
                times.append(time.thread_time() - start)
                now[0] += 1.0
            assert enf.errors == 0, enf.last_error
            enf.stop()
    finally:
        tree.cleanup()
    steady = times[1:]
    return {
        "first_ms": times[0] * 1e3,
        "mean_ms": statistics.fmean(steady) * 1e3,  # the cost per second: the baseline's share included
        "median_ms": statistics.median(steady) * 1e3,
        "p10_ms": percentile(steady, 0.1) * 1e3,
        "p90_ms": percentile(steady, 0.9) * 1e3,
        "p99_ms": percentile(steady, 0.99) * 1e3,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=250)
    ap.add_argument("--passes", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    runs = [run(args.pods, args.passes) for _ in range(args.repeat)]
    for key in runs[0]:
        values = [r[key] for r in runs]
        print(f"   enforcement pass {key}: median {statistics.median(values):.2f} "
              f"(runs {', '.join(f'{v:.2f}' for v in values)})")  # fmt: skip


if __name__ == "__main__":
    main()
