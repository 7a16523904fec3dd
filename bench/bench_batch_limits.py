"""Benchmark: what the batch_limits strategy adds to an agent pass.

Run: `.venv/bin/python -m bench.bench_batch_limits [--pods 110] [--repeat 200]`. Plans the batch limits of a
node full of batch pods (kubelet's default maximum of 110 pods, three containers each, every pod with a
ledger entry as enforcement makes them) and prints the plan's time per pass (median, p10-p90) and per pod.
The executor's reads and writes are not included: they are the same as for any other strategy's actions.
"""

from __future__ import annotations

import argparse
import statistics
import time

from agent.config_sections.enforcement import BatchConfig
from agent.enforce.actions import Recorded
from agent.enforce.ledger import Touched
from agent.enforce.strategies.batch_limits import BatchLimits
from agent.node_state import node_state
from agent.snapshot import ContainerBatch, ContainerSample, NodeSample, PodBatch, PodMeta, PodSample, Snapshot
from cgroup.kubelet_rules import BatchResources


def node(pods: int) -> tuple[Snapshot, dict[str, Touched]]:
    samples, entries = {}, {}
    for i in range(pods):
        uid = f"pod-{i}"
        ids = [f"{uid}-c{j}" for j in range(3)]
        res = BatchResources(500, 1000, 1 << 30, 2 << 30)
        batch = PodBatch(tuple(ContainerBatch(f"c{j}", cid, res) for j, cid in enumerate(ids)))
        cg = f"/kubepods/besteffort/pod{uid}"
        ctrs = tuple(ContainerSample(cid, f"{cg}/{cid}", 0.1, 0, 0, 0, 0.0) for cid in ids)
        samples[uid] = PodSample(PodMeta(uid, "jobs", uid, "offline", batch=batch), "besteffort", cg, 0.3, 0, 0, 0, 0,
                                 0.0, ctrs)  # fmt: skip
        entries[uid] = Touched(uid, cg, 1536, 300_000, 100_000)
    snap = Snapshot(1, 0.0, 0.0, NodeSample(64.0, 20.0, 256 << 30, 64 << 30, 0), {}, samples, (), 0.0)
    return snap, entries


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    snap, entries = node(args.pods)
    state = node_state(snap, (64.0, 256 << 30))
    strategy = BatchLimits(BatchConfig())
    recorded = Recorded(entries, {})
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        plan = strategy.plan(state, recorded)
        times.append(time.perf_counter() - t0)
    q = statistics.quantiles(times, n=10)
    med = statistics.median(times)
    print(f"batch_limits.plan, {args.pods} batch pods x 3 containers, {len(plan.actions)} actions: "
          f"median {med * 1e3:.2f} ms (p10 {q[0] * 1e3:.2f}, p90 {q[-1] * 1e3:.2f}), "
          f"{med / args.pods * 1e6:.1f} us per pod")  # fmt: skip


if __name__ == "__main__":
    main()
