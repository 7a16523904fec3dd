"""Benchmark: throttling of a spiky online container with and without CFS burst, on the real v1 kernel.

Run as root: `.venv/bin/python -m bench.bench_cpu_burst [--rounds 10] [--spikes 5] [--burst-percent 100]`.
Two identical containers limited to 0.5 CPU (50 ms per 100 ms) run 150 ms CPU spikes every 600 ms at the
same moments; one has a burst of 100% of its quota (the default `burst_percent`). Rounds alternate which
one, so CPU placement and machine noise fall on both. Reported per spike: throttled time and throttled
periods from cpu.stat, median and spread (min–max) over the rounds.

Then the dynamic quota burst: a container limited to 0.5 CPU running a burner (it wants a whole CPU) is
driven pass by pass (0.5 s) by `plan_quota_burst` from its own cpu.stat, on a node the plan is told is idle;
reported: its throttled ratio (throttled periods / periods) and CPU at its own quota and at the highest
quota the plan gave it (a raise stops once it is no longer throttled).
"""

from __future__ import annotations

import argparse
import statistics
import time

from agent.config_sections.pod_qos import QuotaBurstConfig
from agent.enforce.stage import Enforcer
from agent.enforce.strategies.quota_burst import NodeCpu, QuietSince, plan_quota_burst
from cgroup import CgroupReader, CgroupWriter
from contract.annotations import ENABLE_QUOTA_BURST as ENABLE
from testsupport.cgtree import V1Tree
from testsupport.qos import Ctr, online_pod, qos_stage, qos_state
from testsupport.spiky import QUOTA_US, Throttling, make_spiky_pair, run_spikes


def _summary(name: str, rounds: list[Throttling], spikes: int) -> str:
    ms = [t.throttled_ms / spikes for t in rounds]
    nr = [t.nr_throttled / spikes for t in rounds]
    return (
        f"{name:>13}: throttled {statistics.median(ms):6.1f} ms/spike (min {min(ms):.1f}, max {max(ms):.1f}); "
        f"{statistics.median(nr):4.2f} throttled periods/spike (min {min(nr):.2f}, max {max(nr):.2f})"
    )


def _pod_of(cg: str) -> tuple[str, str]:
    pod = cg.rsplit("/", 1)[0]
    return pod.rsplit("/", 1)[1].removeprefix("pod"), pod


def quota_burst(tree: V1Tree, passes: int, stage: Enforcer | None = None) -> None:
    _, pod, (ctr,) = tree.pod("burstable")
    reader, writer = CgroupReader(tree.layout), CgroupWriter(tree.layout)
    for cg in (pod, ctr):
        writer.set_cpu_quota(cg, QUOTA_US)
    tree.start(ctr)
    cfg, idle = QuotaBurstConfig(enabled=True), NodeCpu(2.0, 0.1, False, False)
    quiet: dict[str, QuietSince] = {}
    prev, t_prev = reader.cpu(ctr), time.monotonic()
    ratios: dict[int, list[float]] = {}
    cores: dict[int, list[float]] = {}
    for i in range(passes):
        time.sleep(0.5)
        now, stat = time.monotonic(), reader.cpu(ctr)
        ratio = (stat.nr_throttled - prev.nr_throttled) / max(1, stat.nr_periods - prev.nr_periods)
        usage = (stat.usage_ns - prev.usage_ns) / 1e9 / (now - t_prev)
        quota = reader.cpu_settings(ctr).quota_us or QUOTA_US
        ratios.setdefault(quota, []).append(ratio)
        cores.setdefault(quota, []).append(usage)
        prev, t_prev = stat, now
        hold = i < passes // 3  # the first third at its own quota: the "without" figure
        if hold:
            continue
        if stage is not None:
            uid, _ = _pod_of(ctr)
            stage.on_state(qos_state([online_pod(uid, pod, [Ctr(ctr, 0.5, throttled=ratio, usage=usage)])], 0.1))
            continue
        c = (ctr, pod, QUOTA_US, quota, 100_000, ratio, usage)
        plan = plan_quota_burst(cfg, idle, [c], quiet, {pod: QUOTA_US}, now)
        quiet = plan.quiet
        target = plan.containers[ctr].quota_us
        if target > quota:
            writer.set_cpu_quota(pod, plan.pods[pod])
            writer.set_cpu_quota(ctr, target)
    print(f"quota burst, 0.5 CPU wanting 1: quotas {sorted(ratios)} µs per 100 ms")
    for name, q in (("own quota", QUOTA_US), (f"raised to {max(ratios) // 1000} ms", max(ratios))):
        r, u = ratios[q], cores[q]
        print(f"{name:>18}: throttled ratio median {statistics.median(r):.2f} (min {min(r):.2f}, max {max(r):.2f}); "
              f"{statistics.median(u):.2f} cores over {len(r)} passes")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--spikes", type=int, default=5)
    ap.add_argument("--burst-percent", type=int, default=100, help="burst as a percent of the quota (1-100)")
    ap.add_argument("--passes", type=int, default=30, help="dynamic quota burst passes (0.5 s each)")
    ap.add_argument("--through-agent", action="store_true", help="the agent's enforcement stage writes the values")
    args = ap.parse_args()
    tree = V1Tree("cgroupfs")
    try:
        a, b = make_spiky_pair(tree)
        writer = CgroupWriter(tree.layout)
        if not CgroupReader(tree.layout).supports_cpu_burst(a):
            print("   skipped: this kernel has no CFS burst")
            return
        stage = None
        if args.through_agent:
            stage = qos_stage(tree.layout, tree.model, "", cpu_burst={"burst_percent": args.burst_percent},
                              quota_burst={"enabled": True, "step_percent": 25})  # fmt: skip
        with_burst: list[Throttling] = []
        without: list[Throttling] = []
        for rnd in range(args.rounds):
            burst, plain = (a, b) if rnd % 2 == 0 else (b, a)
            if stage is None:
                writer.set_cpu_burst(burst, QUOTA_US * args.burst_percent // 100)
                writer.set_cpu_burst(plain, 0)
            else:
                pods = [online_pod(*_pod_of(cg), [Ctr(cg, 0.5)], annotations={ENABLE: str(cg == burst).lower()})
                        for cg in (a, b)]  # fmt: skip
                stage.on_state(qos_state(pods))
                assert CgroupReader(tree.layout).cpu_burst(burst) == QUOTA_US * args.burst_percent // 100
            got = run_spikes(tree, (burst, plain), count=args.spikes)
            with_burst.append(got[burst])
            without.append(got[plain])
        how = "the agent's enforcement stage" if stage else "direct writes"
        print(f"0.5 CPU, 150 ms spikes every 600 ms, {args.spikes} spikes x {args.rounds} rounds ({how})")
        print(_summary("without burst", without, args.spikes))
        print(_summary(f"burst {args.burst_percent}%", with_burst, args.spikes))
        if stage is not None:
            stage.stop()
        if args.passes > 0:
            quota_burst(tree, args.passes, stage)
        if stage is not None:
            stage.stop()
    finally:
        tree.cleanup()


if __name__ == "__main__":
    main()
