"""Benchmark network QoS (root; namespaces this script makes, TEST-NET-1 addresses inside them only):

1. throughput held against the limit: an offline "pod" (real v1 cgroup, own namespace, tbf written by the real
   enforcement stage) and an online one each send a bounded stream to a sink namespace; the receiving end's
   rate over the limit, median and spread (min-max) over `--runs`, and the online pod's rate for comparison;
2. the pass cost with the network part on: `--pods` pods (half offline) each with a process in a namespace of
   its own (a veth pair inside it, no traffic), the collection pass with and without `collectors.pod_network`
   (CPU time, passes 20 ms apart), and the enforcement pass with and without the net_egress strategy (the
   first pass, which writes every tbf, and the steady passes, which check the limits on the pods' turns).

Run as root: `.venv/bin/python -m bench.net_egress [--runs 5] [--pods 250] [--passes 60]`.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator

from agent.config_sections.enforcement import EnforcementConfig
from agent.config_sections.pod_qos import NetworkQosConfig
from agent.enforce.stage import Enforcer
from agent.enforce.strategies.net_egress import NetEgress
from agent.sense.pod_source import CgroupPodSource
from agent.sense.sampler import Sampler
from agent.snapshot import NodeSample, PodMeta, PodSample, Snapshot
from agent.windows.store import WindowStore
from bench.agent_overhead import percentile
from cgroup import CgroupReader
from testsupport.cgtree import V1Tree, end_processes
from testsupport.netns import PAUSE, SENDER, in_cgroup_and_netns, ip, kernel_facts, namespaces

GI = 1 << 30
LIMIT = 1_000_000  # bytes/s
SENT = 3_000_000


def _procs(tree: V1Tree, cg: str) -> list[str]:
    return [f"{tree.layout.dir(c, cg)}/cgroup.procs" for c in tree.controllers()]


def _sample(uid: str, cg: str, cls: str) -> PodSample:
    meta = PodMeta(uid, "default", f"pod-{uid[:8]}", cls, cpu_request_cores=0.1)  # type: ignore[arg-type]
    return PodSample(meta, "besteffort" if cls == "offline" else "burstable", cg, 0.0, 0, 0, 0, 0, None, ())


def _snap(seq: int, pods: list[PodSample]) -> Snapshot:
    return Snapshot(seq, float(seq), 0.0, NodeSample(2.0, 0.1, 8 * GI, GI, 0), {}, {p.uid: p for p in pods}, (), 0.0)


def _next_pass(enf: Enforcer, seq: Iterator[int], pods: list[PodSample]) -> None:
    enf.on_snapshot(_snap(next(seq), pods))


def _enforcer(tree: V1Tree, ledger: str, qos: NetworkQosConfig | None) -> Enforcer:
    from testsupport.strategies import default_strategies

    config = EnforcementConfig(ledger_file=ledger)
    chosen = [*default_strategies(tree.layout, tree.model, config), *([NetEgress(qos)] if qos else [])]
    return Enforcer(tree.layout, tree.model, CgroupReader(tree.layout), config, lambda: (2.0, 8 * GI),
                    registered=chosen)  # fmt: skip


def throughput(runs: int) -> tuple[list[float], list[float]]:
    """(offline rate / limit, online rate / limit) of each run, at the receiving end."""
    held: list[float] = []
    free: list[float] = []
    tree = V1Tree("cgroupfs")
    try:
        with namespaces() as nets, tempfile.TemporaryDirectory() as tmp:
            off, on = nets.pod(), nets.pod()
            nets.start_sink()
            off_uid, off_cg, _ = tree.pod("besteffort")
            on_uid, on_cg, _ = tree.pod("burstable")
            for cg, pod in ((off_cg, off), (on_cg, on)):
                tree.procs.append(in_cgroup_and_netns(_procs(tree, cg), pod.ns, PAUSE))
            qos = NetworkQosConfig(enabled=True, offline_egress_bytes_per_second=LIMIT)
            enf = _enforcer(tree, f"{tmp}/ledger.json", qos)
            enf.on_snapshot(_snap(1, [_sample(off_uid, off_cg, "offline"), _sample(on_uid, on_cg, "online")]))
            try:
                for _ in range(runs):
                    for cg, pod, out in ((off_cg, off, held), (on_cg, on, free)):
                        sender = in_cgroup_and_netns(_procs(tree, cg), pod.ns, SENDER, pod.peer, str(SENT))
                        got = nets.received()
                        sender.wait(120)
                        end_processes([sender])
                        out.append(got["bytes"] / max(got["seconds"], 1e-6) / LIMIT)
            finally:
                enf.stop()
    finally:
        tree.cleanup()
    return held, free


def cpu_ms(fn: Callable[[], object], passes: int, gap: float = 0.02) -> list[float]:
    out = []
    for _ in range(passes):
        time.sleep(gap)
        start = time.thread_time()
        fn()
        out.append((time.thread_time() - start) * 1e3)
    return out


def pass_cost(pods: int, passes: int) -> dict[str, list[float]]:
    tree = V1Tree("cgroupfs")
    tag = f"colonetb{int(time.time()) % 100000}"
    made: list[str] = []
    samples: list[PodSample] = []
    try:
        for i in range(pods):
            ns = f"{tag}p{i}"
            ip("netns", "add", ns)
            made.append(ns)
            ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")  # both ends inside
            ip("-n", ns, "link", "set", "eth0", "up")
            cls = "offline" if i % 2 else "online"
            uid, cg, _ = tree.pod("besteffort" if cls == "offline" else "burstable")
            sleeper = ["ip", "netns", "exec", ns, "sleep", "3600"]
            files = _procs(tree, cg)

            def enter(files: list[str] = files) -> None:
                import os

                for f in files:
                    with open(f, "w") as fh:
                        fh.write(str(os.getpid()))

            tree.procs.append(subprocess.Popen(sleeper, preexec_fn=enter))
            samples.append(_sample(uid, cg, cls))
        out: dict[str, list[float]] = {}
        source = CgroupPodSource(tree.layout, tree.model, 1e9)
        for name, chosen in (("collect", None), ("collect+pod_network", "pod_network")):
            base = frozenset({"node", "pods", "tiers", "containers", "psi", "network"})
            sampler = Sampler(tree.layout, tree.model, source, WindowStore(),
                              collectors=base | ({chosen} if chosen else set()))  # fmt: skip
            for _ in range(3):
                sampler.sample()
            out[name] = cpu_ms(sampler.sample, passes)
            sampler.close()
        with tempfile.TemporaryDirectory() as tmp:
            for name, qos in (("enforce", None), ("enforce+net_egress", NetworkQosConfig(enabled=True))):
                enf = _enforcer(tree, f"{tmp}/{name}.json", qos)
                seq = iter(range(1, 10**6))
                start = time.thread_time()
                wall = time.perf_counter()
                enf.on_snapshot(_snap(next(seq), samples))
                out[f"{name} first pass"] = [(time.thread_time() - start) * 1e3]
                out[f"{name} first pass wall"] = [(time.perf_counter() - wall) * 1e3]
                out[name] = cpu_ms(functools.partial(_next_pass, enf, seq, samples), passes)
                walls = []
                for _ in range(passes):
                    w = time.perf_counter()
                    enf.on_snapshot(_snap(next(seq), samples))
                    walls.append((time.perf_counter() - w) * 1e3)
                out[f"{name} wall"] = walls
                enf.stop()
        return out
    finally:
        tree.cleanup()
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def show(name: str, xs: list[float], unit: str) -> None:
    if len(xs) == 1:
        print(f"   {name:32s} {xs[0]:9.2f} {unit}")
        return
    xs = sorted(xs)
    print(f"   {name:32s} median {statistics.median(xs):8.3f} {unit}  p10 {percentile(xs, 0.1):8.3f}  "
          f"p90 {percentile(xs, 0.9):8.3f}  min {xs[0]:8.3f}  max {xs[-1]:8.3f}  (n={len(xs)})")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--pods", type=int, default=250)
    ap.add_argument("--passes", type=int, default=60)
    args = ap.parse_args()
    why = kernel_facts()
    if why is not None:
        print(f"   skipped: {why}")
        return
    held, free = throughput(args.runs)
    print(f"   throughput at the receiving end, limit {LIMIT} B/s, {SENT} bytes per stream:")
    show("offline rate / limit", held, "x")
    show("online rate / limit", free, "x")
    print(f"   pass cost, {args.pods} pods (half offline), each in its own namespace:")
    for name, xs in pass_cost(args.pods, args.passes).items():
        show(name, xs, "ms")


if __name__ == "__main__":
    main()
