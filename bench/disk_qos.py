"""Benchmark disk QoS on the real v1 hierarchy and a loop device the bench attaches (and detaches).

1. The pass cost with the disk part on: 250 pods x 3 containers, half offline, the enforcement stage
   (`Enforcer.on_snapshot`, one per simulated second) with `enforcement.disk` off and on (a write budget on
   the loop device), and the collection pass (`Sampler.sample`) with the disk collectors off and on. CPU
   time of a pass, median and p90, after the first.
2. The throughput held against the limit: `dd oflag=direct` of 12 MiB from an offline pod held to 4 MiB/s,
   dd's own rate over the limit, median and spread over runs; an online pod's rate beside it.

Run as root: `.venv/bin/python -m bench.disk_qos [--pods 250] [--passes 60] [--repeat 3] [--dd-runs 5]`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable

from agent.config import AgentConfig
from agent.config_sections.enforcement import EnforcementConfig
from agent.enforce.stage import Enforcer, detect_facts
from agent.enforce.strategies.registry import strategies
from agent.sense.sampler import CgroupPodSource, Sampler
from agent.snapshot import ContainerSample, DiskRates, DiskSample, NodeSample, PodClass, PodMeta, PodSample, Snapshot
from agent.windows.store import WindowStore
from bench.agent_overhead import percentile
from cgroup import CgroupReader
from testsupport.disk import MIB, DiskTree, dd, loop_device

GI = 1 << 30
LIMIT = 4 * MIB


def pods_of(tree: DiskTree, n: int) -> list[PodSample]:
    tiers = ("guaranteed", "burstable", "besteffort")
    out = []
    for i in range(n):
        uid, path, containers = tree.pod(tiers[i % 3], containers=3)  # type: ignore[arg-type]
        cls: PodClass = "offline" if i % 2 else "online"
        meta = PodMeta(uid, "default", f"pod-{i}", cls, cpu_request_cores=0.1, cpu_limit_cores=0.5)
        ctrs = tuple(ContainerSample(c.rsplit("/", 1)[1], c, 0.01, 0, 0, 0, 0.0) for c in containers)
        out.append(PodSample(meta, tiers[i % 3], path, 0.03, 64 << 20, 0, 0, 0, 0.0, ctrs))
    return out


def timed(fn: Callable[[int], object], passes: int) -> dict[str, float]:
    times = []
    for i in range(passes + 1):
        start = time.thread_time()
        fn(i)
        times.append(time.thread_time() - start)
    steady = times[1:]
    return {"median_ms": statistics.median(steady) * 1e3, "p90_ms": percentile(steady, 0.9) * 1e3}


def enforcement(
    tree: DiskTree, samples: dict[str, PodSample], disk: DiskSample, on: bool, passes: int
) -> dict[str, float]:
    now = [0.0]
    with tempfile.TemporaryDirectory() as tmp:
        qos = {"enabled": on, "write_bps": 64 * MIB, "include_devices": (disk.name,)}
        config = AgentConfig(enforcement=EnforcementConfig(ledger_file=f"{tmp}/ledger.json", disk=qos))  # type: ignore[arg-type]
        reader = CgroupReader(tree.layout)
        chosen = strategies(config, detect_facts(tree.layout, tree.model, reader))
        enf = Enforcer(tree.layout, tree.model, reader, config.enforcement, lambda: (2.0, 8 * GI),
                       clock=lambda: now[0], registered=chosen)  # fmt: skip

        def one(i: int) -> None:
            node = NodeSample(2.0, 1.5 + 0.1 * (i % 3), 8 * GI, 2 * GI, 0)
            enf.on_snapshot(Snapshot(i, now[0], time.time(), node, {}, samples, (), 0.0, disks=(disk,)))
            now[0] += 1.0

        out = timed(one, passes)
        assert enf.errors == 0, enf.last_error
        enf.stop()
        reader.files.close()  # a run's descriptors (4 per offline cgroup on v1 for the disk limits)
    return out


def collection(tree: DiskTree, on: bool, passes: int) -> dict[str, float]:
    names = {"node", "pods", "tiers", "containers", "psi", "network"} | ({"disk", "disk_devices"} if on else set())
    source = CgroupPodSource(tree.layout, tree.model, 3600.0)
    sampler = Sampler(tree.layout, tree.model, source, WindowStore(), collectors=frozenset(names))
    try:
        return timed(lambda i: sampler.sample(), passes)
    finally:
        sampler.close()


def pass_cost(pods: int, passes: int) -> dict[str, dict[str, float]]:
    tree = DiskTree("cgroupfs")
    try:
        with tempfile.TemporaryDirectory() as tmp, loop_device(tmp, 64) as (dev, majmin):
            samples = {p.uid: p for p in pods_of(tree, pods)}
            disk = DiskSample(os.path.basename(dev), majmin, 0.1, DiskRates(0.0, 0.0, 0.0, 0.0))
            return {
                "enforcement, disk off": enforcement(tree, samples, disk, False, passes),
                "enforcement, disk on": enforcement(tree, samples, disk, True, passes),
                "collection, disk off": collection(tree, False, passes),
                "collection, disk on": collection(tree, True, passes),
            }
    finally:
        tree.cleanup()


def held(runs: int) -> tuple[list[float], list[float]]:
    """dd's rate over the limit, offline and online, for each run."""
    tree = DiskTree("cgroupfs")
    try:
        with tempfile.TemporaryDirectory() as tmp, loop_device(tmp, 128) as (dev, majmin):
            uid, path, (off,) = tree.pod("burstable")
            _, _, (on,) = tree.pod("burstable")
            meta = PodMeta(uid, "default", "batch", "offline", cpu_request_cores=0.5)
            pod = PodSample(
                meta, "burstable", path, 0.1, 0, 0, 0, 0, 0.0, (ContainerSample("c", off, 0.1, 0, 0, 0, 0.0),)
            )
            disk = DiskSample(os.path.basename(dev), majmin, 0.1, DiskRates(0.0, 0.0, 0.0, 0.0))
            qos = {"enabled": True, "write_bps": LIMIT, "include_devices": (disk.name,)}
            config = AgentConfig(enforcement=EnforcementConfig(ledger_file="", disk=qos))  # type: ignore[arg-type]
            reader = CgroupReader(tree.layout)
            enf = Enforcer(tree.layout, tree.model, reader, config.enforcement, lambda: (2.0, 8 * GI),
                           registered=strategies(config, detect_facts(tree.layout, tree.model, reader)))  # fmt: skip
            node = NodeSample(2.0, 1.5, 8 * GI, 2 * GI, 0)
            enf.on_snapshot(Snapshot(1, time.monotonic(), time.time(), node, {}, {uid: pod}, (), 0.0, disks=(disk,)))
            assert enf.errors == 0, enf.last_error
            try:
                offline = [dd(tree, off, dev, 12, 0) / LIMIT for _ in range(runs)]
                online = [dd(tree, on, dev, 12, 64) / LIMIT for _ in range(runs)]
            finally:
                enf.stop()
                reader.files.close()
            return offline, online
    finally:
        tree.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=250)
    ap.add_argument("--passes", type=int, default=60)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dd-runs", type=int, default=5)
    args = ap.parse_args()
    runs = [pass_cost(args.pods, args.passes) for _ in range(args.repeat)]
    for what in runs[0]:
        for key in runs[0][what]:
            values = [r[what][key] for r in runs]
            print(f"   {what} ({args.pods} pods, half offline) {key}: median {statistics.median(values):.2f} "
                  f"(runs {', '.join(f'{v:.2f}' for v in values)})")  # fmt: skip
    offline, online = held(args.dd_runs)
    for name, values in (("offline (held)", offline), ("online", online)):
        print(f"   dd rate / {LIMIT // MIB} MiB/s limit, {name}: median {statistics.median(values):.2f} "
              f"(min {min(values):.2f}, max {max(values):.2f}, {len(values)} runs)")  # fmt: skip


if __name__ == "__main__":
    main()
