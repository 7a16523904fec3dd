"""Benchmark: what batch capacity (allocated, usage above requests, the section) adds to an agent pass.

Run: `.venv/bin/python -m bench.bench_batch_capacity [--pods 110] [--repeat 200]`. A node full of batch pods
(kubelet's default maximum of 110, three containers each, one init container): per pass the agent sums
their batch requests (KubePodSource, over every pod of the listing) and their usage above requests (the
capacity stage), and the publisher round builds the `batch` section. Prints each part's time per pass
(median, p10-p90). The capacity computation itself (windows) is not included: it is unchanged.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from agent.capacity import batch_floor as batch_capacity
from agent.node_state import batch_requests
from agent.snapshot import ContainerBatch, PodBatch, PodMeta, PodSample
from cgroup.kubelet_rules import BatchResources


def pods(count: int) -> list[PodSample]:
    out = []
    for i in range(count):
        uid = f"pod-{i}"
        init = ContainerBatch("init", None, BatchResources(1000, 1000, 1 << 30, 1 << 30, init=True))
        app = tuple(
            ContainerBatch(f"c{j}", f"{uid}-c{j}", BatchResources(500, 1000, 1 << 30, 2 << 30)) for j in range(3)
        )
        meta = PodMeta(uid, "jobs", uid, "offline", batch=PodBatch((init, *app)))
        out.append(PodSample(meta, "besteffort", f"/kubepods/besteffort/pod{uid}", 0.3, (2 + i % 2) << 30, 0, 0, 0,
                             0.0, ()))  # fmt: skip
    return out


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    q = statistics.quantiles(times, n=10)
    return statistics.median(times), q[0], q[-1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    samples = pods(args.pods)
    metas = [p.meta for p in samples]
    requests = batch_requests(metas)
    use = batch_capacity.batch_use(samples)
    parts: dict[str, Callable[[], object]] = {
        "batch_requests (allocated)": lambda: batch_requests(metas),
        "batch_use (usage above requests)": lambda: batch_capacity.batch_use(samples),
        "section": lambda: batch_capacity.section({"cpu": 5500, "memory": 14 << 30}, requests, use),
    }
    for name, fn in parts.items():
        med, p10, p90 = timed(fn, args.repeat)
        print(f"{name}, {args.pods} batch pods: median {med * 1e3:.3f} ms (p10 {p10 * 1e3:.3f}, p90 {p90 * 1e3:.3f})")


if __name__ == "__main__":
    main()
