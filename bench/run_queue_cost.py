"""What the run_queue collector costs (issue 30, goal: at most 0.1% of a core at 250 pods x 3 containers).

250 pods x 3 containers on the real v1 hierarchy, a third of them offline, a process in every container (a
`sleep`, so the pods hold real threads; `--threaded` pods also hold a Python process of 200 threads, so the
per-turn bound of cgroup/run_delay.py is exercised), sampled as the agent samples in a cluster (offline pods
every pass, online pods every `--online-every` passes; 5 by default, 1 as with the run-queue protection on).

Two samplers take turns over the same tree, one with the run_queue collector and one without; each pass's
CPU time (thread_time) is recorded, 20 ms apart (caches cold, as in the running agent). The collector's cost
is the difference of the medians, shown as a share of one core at a 1 s interval, next to the collector's
own timed duration (`colo_collector_duration_seconds`: wall time, so it also counts waiting for a CPU on a
busy machine).

Run as root: `.venv/bin/python -m bench.run_queue_cost [--pods 250] [--passes 100] [--online-every 5]`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time

from agent.sense.collectors import enabled_from
from agent.sense.collectors.containers import CONTAINER_EVERY
from agent.sense.sampler import Sampler
from agent.windows.store import WindowStore
from testsupport.cgtree import V1Tree
from testsupport.classed_pods import ClassedPodSource

THREADS = (  # 200 more threads, asleep until stdin closes
    "import sys, threading\nstop = threading.Event()\n"
    "for _ in range(200):\n    threading.Thread(target=stop.wait, daemon=True).start()\nsys.stdin.read()\n"
)


def build(pods: int, threaded: int) -> V1Tree:
    tree = V1Tree("cgroupfs")
    tiers = ("guaranteed", "burstable", "besteffort")
    for i in range(pods):
        _, _, containers = tree.pod(tiers[i % 3], containers=3)  # type: ignore[arg-type]
        for c in containers:
            files = [f"{tree.layout.dir(ctrl, c)}/cgroup.procs" for ctrl in tree.controllers()]

            def enter(files: list[str] = files) -> None:
                import os

                for f in files:
                    with open(f, "w") as fh:
                        fh.write(str(os.getpid()))

            tree.procs.append(subprocess.Popen(["sleep", "infinity"], preexec_fn=enter))
        if i < threaded:
            tree.start(containers[0], THREADS)
    return tree


def sampler(tree: V1Tree, source: ClassedPodSource, online_every: int, with_run_queue: bool) -> Sampler:
    chosen = enabled_from({}) if with_run_queue else enabled_from({}) - {"run_queue"}
    return Sampler(tree.layout, tree.model, source, WindowStore(), container_stat_every=5,
                   container_every=CONTAINER_EVERY, pod_memory_limits=False, online_every=online_every,
                   collectors=chosen)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=250)
    ap.add_argument("--passes", type=int, default=100)
    ap.add_argument("--online-every", type=int, default=5)
    ap.add_argument("--threaded", type=int, default=5, help="pods that also hold a process of 200 threads")
    args = ap.parse_args()
    tree = build(args.pods, args.threaded)
    try:
        source = ClassedPodSource(tree.layout, tree.model, lambda i, _: "offline" if i % 3 == 2 else "online")
        with_rq, without = (sampler(tree, source, args.online_every, True),
                            sampler(tree, source, args.online_every, False))  # fmt: skip
        cpu: dict[bool, list[float]] = {True: [], False: []}
        own: list[float] = []
        threads = 0
        for i in range(args.passes + 10):
            for on, s in ((True, with_rq), (False, without)):
                start = time.thread_time()
                snap = s.sample()
                if i >= 10:
                    cpu[on].append(time.thread_time() - start)
                    if on:
                        own += [r.duration_seconds for r in snap.collectors if r.name == "run_queue"]
                        threads = sum(p.run_queue.threads for p in snap.pods.values() if p.run_queue is not None)
                time.sleep(0.02)
        with_rq.close()
        without.close()
        a, b = statistics.median(cpu[True]), statistics.median(cpu[False])
        print(f"run_queue collector, {args.pods} pods x 3 containers (a process in each; {args.threaded} pods "
              f"with 200 more threads: {threads} threads listed), online pods every {args.online_every} "
              "passes:")  # fmt: skip
        print(f"  pass CPU median {1e3 * b:.2f} ms without it, {1e3 * a:.2f} ms with it: {1e3 * (a - b):.2f} ms "
              f"per pass = {100 * (a - b):.3f}% of a core at 1 s (goal <= 0.1%)")  # fmt: skip
        print(f"  its own timed duration: median {1e3 * statistics.median(own):.2f} ms, "
              f"p90 {1e3 * sorted(own)[int(0.9 * len(own))]:.2f} ms (wall time)")  # fmt: skip
    finally:
        tree.cleanup()


if __name__ == "__main__":
    main()
