"""A synthetic busy fleet from the shared Bitbrains trace, and Colo's defaults against its peers on it (issue 32).

The shared trace (/work/shared/traces/bitbrains_rnd_dev.csv.gz: GWA-T-12 "Rnd", Shen, van Beek, Iosup, CCGrid
2015) is an idle fleet: a packed node's CPU is a few percent used. Whether the defaults, chosen on it, hold on a
busy fleet needs a busy trace, and none is at hand; this one is made from it.

**Construction.** Every VM's CPU and memory usage is multiplied by one factor per resource and level, `k_cpu` and
`k_memory`, and capped at what the VM provisioned: `used' = min(k × used, max(used, provisioned))` (a sample
already above its provisioned amount, as 1.85 % of the CPU samples are, is left as it was: scaling never lowers
a sample). Each factor is the one that brings the **median node's mean utilization** (Σ usage over the month /
steps / allocatable) to the level's target, found by bisection. Nodes are the ones colo-sim packs (first fit by
requests, `--pack-to` 1.0); requests do not change, so the idle and the busy fleets have the same nodes and the
same VMs on each. Times, gaps, requests and the VMs' shapes below the cap stay the trace's own: a busy VM is the
same VM doing k times the work, until it is saturated. The construction draws nothing at random: the same input
gives the same file byte for byte (there is no seed to choose).

**The node's shape and the levels.** The cap bounds what a level can reach: on colo-sim's default nodes (32
cores, 256 GiB) the median node with every sample at its cap uses 0.79 of its CPU but only 0.25 of its memory
(the VMs request 2.9 GiB a core, and are off part of the month). The default nodes here are 32 cores and 128 GiB
(`--node-memory 128`: still 22 nodes; with every sample capped the median node uses 0.78 of its CPU and 0.54 of
its memory), and the levels 0.5 and 0.75 (`--levels`). A target the cap makes unreachable (memory at 0.75) is
reported, not forced: the level then takes the factor that puts every sample at its cap.

Why this and not another: an additive load (a constant per VM) would make the busy fleet easier to predict, not
harder (a flat floor); drawing other VMs' series would mix shapes that never ran together; lifting the cap would
let a VM use more memory than it has. The cap keeps the scheduler's promise (a VM's usage stays within what it
was given) and is also what flattens peaks: at 0.75, two thirds of the CPU samples sit at their cap.

**Output.** Each level is written under `--dir` (default /tmp/colo-busy; never in the repository) as a CSV in
the trace's own `bitbrains` schema, which `colo-sim --trace FILE` reads as it is. Then (unless
`--generate-only`) the idle trace and every level are replayed node by node through colo-sim's own code
(`colo_sim.policies`: Colo's capacity code at the agent's defaults as colo-sim replays them, koordinator's and
Volcano's formulas, the peak oracle), one replay per level scored three ways as docs/simulation.md scores them:
the first half (until 2013-07-15 22:00 UTC), the second half, and the first hour of every node's life (its first
`H / step` steps from its first pod's sample). `--variant NAME:KEY=VALUE,...` replays Colo again with some of its
capacity parameters changed (`agent.capacity.params.CapacityParams`' fields, `margin=off` for no learned
margin), in the same replay.

Run: `.venv/bin/python -m bench.busy_fleet [--levels 0.5,0.75] [--node-memory 128] [--jobs 2] [--no-idle]
[--variant NAME:KEY=VALUE,...] [--violations NAME] [--json FILE]`. Not in `make bench`: about 20 s of CPU per
level and setting replayed (the whole run: about a minute of wall time with `--jobs 2`).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.capacity.lendable import CapacityParams
from colo_sim.measures import Part, Tally
from colo_sim.node_plan import NodeSpec, packed_nodes, plan_rows
from colo_sim.packing import NodeSize
from colo_sim.policies import colo, koordinator, oracle, volcano
from colo_sim.timeline import Timeline, infer_step, node_trace

TRACE = "/work/shared/traces/bitbrains_rnd_dev.csv.gz"
#: The shared trace's halves (docs/simulation.md): choose on the first, report on the second.
SPLIT = datetime.datetime(2013, 7, 15, 22, tzinfo=datetime.UTC).timestamp()
HORIZON_S = 3600.0
PACK_TO = 1.0
PEERS = ("koordinator", "volcano")
RESOURCES = ("cpu", "memory")
COLUMNS = ("vm", "unix_s", "cores", "cpu_prov_mhz", "cpu_used_mhz", "mem_prov_kb", "mem_used_kb")
#: The largest factor tried: beyond it every sample of this trace is at its cap.
K_MAX = 1e6

Floats = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Raw:
    """The trace's rows as columns (all of them: the file has no row colo-sim skips)."""

    vm: list[str]
    node: npt.NDArray[np.int64]  # each row's packed node, as colo-sim packs it
    nodes: int
    steps: int  # the grid's steps (one sample a VM a step)
    columns: dict[str, Floats]
    size: NodeSize


def read_raw(path: str, size: NodeSize) -> Raw:
    """The trace's columns and each row's node (colo-sim's packing of the same file)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from colo_sim.csv_arrow import read_csv

    pods, intake = read_csv(path, "bitbrains", fast=True)
    summary = intake.summary
    node_of_code = packed_nodes(pods, summary, size, PACK_TO)
    node_of_vm = {pods.names[c][1]: n for c, n in node_of_code.items()}
    steps = int((summary.t_end - summary.t0) // infer_step(summary.gaps)) + 1
    del intake
    types = {c: (pa.string() if c == "vm" else pa.float64()) for c in COLUMNS}
    table = pacsv.read_csv(
        pa.input_stream(path, compression="gzip"), convert_options=pacsv.ConvertOptions(column_types=types)
    )
    vm = [v.strip() for v in table.column("vm").to_pylist()]
    columns = {c: np.asarray(table.column(c).to_numpy(), np.float64) for c in COLUMNS[1:]}
    node = np.fromiter((node_of_vm[v] for v in vm), np.int64, len(vm))
    return Raw(vm, node, max(node_of_code.values()) + 1, steps, columns, size)


def scaled(used: Floats, provisioned: Floats, k: float) -> Floats:
    """k × used, capped at what was provisioned (a sample already above it is kept as it is)."""
    return np.minimum(k * used, np.maximum(used, provisioned))


def utilizations(raw: Raw, resource: str, k: float) -> Floats:
    """Each node's mean utilization over the month (Σ usage / steps / allocatable) at factor k."""
    c = raw.columns
    if resource == "cpu":  # cores, as colo-sim reads them: MHz / (provisioned MHz / cores)
        per_core = c["cpu_prov_mhz"] / c["cores"]
        usage = scaled(c["cpu_used_mhz"], c["cpu_prov_mhz"], k) / per_core
        alloc = raw.size.cpu_cores
    else:
        usage = scaled(c["mem_used_kb"], c["mem_prov_kb"], k) * 1024.0
        alloc = raw.size.memory_bytes
    sums = np.bincount(raw.node, weights=usage, minlength=raw.nodes)
    return np.asarray(sums / raw.steps / alloc, np.float64)


def calibrate(raw: Raw, resource: str, target: float) -> tuple[float, bool]:
    """(k, reached): the smallest factor that brings the median node to `target` (bisection on log k), or the
    largest that changes anything when the cap makes the target unreachable."""
    if float(np.median(utilizations(raw, resource, K_MAX))) < target:
        c = raw.columns
        used, prov = (
            (c["cpu_used_mhz"], c["cpu_prov_mhz"]) if resource == "cpu" else (c["mem_used_kb"], c["mem_prov_kb"])
        )
        positive = used > 0
        return float(np.max(prov[positive] / used[positive])), False
    lo, hi = 0.0, math.log(K_MAX)
    for _ in range(60):
        mid = (lo + hi) / 2
        if float(np.median(utilizations(raw, resource, math.exp(mid)))) < target:
            lo = mid
        else:
            hi = mid
    return math.exp(hi), True


def write_level(raw: Raw, k_cpu: float, k_memory: float, path: str) -> None:
    """The scaled trace as a gzip CSV in the bitbrains schema (written to a temporary name, then renamed)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    c = raw.columns
    table = pa.table(
        {
            "vm": pa.array(raw.vm, pa.string()),
            "unix_s": pa.array(c["unix_s"].astype(np.int64)),
            "cores": pa.array(c["cores"].astype(np.int64)),
            "cpu_prov_mhz": c["cpu_prov_mhz"],
            "cpu_used_mhz": scaled(c["cpu_used_mhz"], c["cpu_prov_mhz"], k_cpu),
            "mem_prov_kb": c["mem_prov_kb"],
            "mem_used_kb": scaled(c["mem_used_kb"], c["mem_prov_kb"], k_memory),
        }
    )
    partial = path + ".partial"
    with pa.CompressedOutputStream(partial, "gzip") as out:
        out.write((",".join(COLUMNS) + "\n").encode())  # (pyarrow quotes a header's names)
        pacsv.write_csv(table, out, pacsv.WriteOptions(include_header=False, quoting_style="none"))
    os.replace(partial, path)


def fleet_facts(raw: Raw, resource: str, k: float, reached: bool = True) -> dict[str, Any]:
    """What a level is: its factor, the nodes' mean utilization (p10, median, p90), the share of samples at
    their cap, and the nodes' requests as a share of allocatable (median: the cap's bound on utilization)."""
    c = raw.columns
    used, prov = (c["cpu_used_mhz"], c["cpu_prov_mhz"]) if resource == "cpu" else (c["mem_used_kb"], c["mem_prov_kb"])
    u = utilizations(raw, resource, k)
    capped = scaled(used, prov, k) >= prov
    return {
        "k": k,
        "target_reached": reached,
        "node_utilization_p10_median_p90": [float(np.percentile(u, q)) for q in (10, 50, 90)],
        "samples_at_cap": float(np.mean(capped)),
        "node_requests_median": float(np.median(utilizations(raw, resource, K_MAX))),
    }


def describe(f: dict[str, Any]) -> str:
    p10, med, p90 = f["node_utilization_p10_median_p90"]
    note = "" if f["target_reached"] else " (target unreachable under the cap: the factor that caps every sample)"
    return (
        f"k = {f['k']:.4g}{note}; node utilization p10 {p10:.3f}, median {med:.3f}, p90 {p90:.3f}; "
        f"samples at their cap {f['samples_at_cap']:.1%}; the median node's usage with every sample at its cap "
        f"{f['node_requests_median']:.3f}"
    )


# The replay: every policy on each node, scored on both halves and in the node's first hour.


@dataclass(frozen=True, slots=True)
class ScoreTask:
    spec: NodeSpec
    grid: Timeline
    lo: int
    mid: int
    hi: int
    runs: tuple[tuple[str, CapacityParams], ...]  # Colo's replays: (policy name, parameters)
    listed: str | None  # the policy whose violations are listed


@dataclass(frozen=True, slots=True)
class NodeScore:
    parts: dict[str, dict[str, tuple[Part, Part]]]  # policy -> resource -> (first half, second half)
    first_hour: dict[str, dict[str, int]]  # policy -> resource -> violations in the node's first hour
    violations: list[dict[str, Any]]  # the listed policy's, one per violating node-step


def score_node(task: ScoreTask) -> NodeScore:
    """One node's replay through every policy (a module-level function: it runs in a worker)."""
    names, rows = task.spec.rows.load()
    node = node_trace(task.spec.name, task.spec.size, [p for _, p in names], rows, task.grid)
    best = oracle.lend(node, task.grid, HORIZON_S)
    lent: dict[str, tuple[Any, Any]] = {"oracle": best}
    lent.update(colo.run_many(node, task.grid, [(params, (name, None)) for name, params in task.runs]))
    lent.update(koordinator.run(node, task.grid))
    lent.update(volcano.run(node, task.grid))
    width = oracle.width(HORIZON_S, task.grid.step)
    born = next((k for k, step in enumerate(node.present) if step), 0)
    young = range(max(born, task.lo), min(born + width, task.hi))
    parts: dict[str, dict[str, tuple[Part, Part]]] = {}
    first: dict[str, dict[str, int]] = {}
    listed: list[dict[str, Any]] = []
    for name, (cpu, memory) in lent.items():
        parts[name], first[name] = {}, {}
        for j, (resource, series) in enumerate(zip(RESOURCES, (cpu, memory), strict=True)):
            x, o = np.asarray(series, np.float64), np.asarray(best[j], np.float64)
            alloc = node.allocatable(resource)
            parts[name][resource] = (
                Tally.part(x, o, alloc, task.lo, task.mid),
                Tally.part(x, o, alloc, task.mid, task.hi),
            )
            first[name][resource] = int(sum(1 for k in young if x[k] > o[k]))
            if name == task.listed:
                listed += _violations(node.name, resource, x, o, node.sums(resource)[0], alloc, born, task)
    return NodeScore(parts, first, listed)


def _violations(
    node: str, resource: str, lent: Floats, best: Floats, usage: Sequence[float], alloc: float, born: int, t: ScoreTask
) -> list[dict[str, Any]]:
    """Each violating node-step, with what explains it: the usage now, the peak of the horizon, the highest
    usage the node had shown before (the last day, the last week)."""
    width = oracle.width(HORIZON_S, t.grid.step)
    per_day = round(86400 / t.grid.step)
    use = np.asarray(usage, np.float64)
    out = []
    for k in np.flatnonzero(lent[t.lo : t.hi] > best[t.lo : t.hi]).tolist():
        k += t.lo
        out.append(
            {
                "node": node,
                "resource": resource,
                "time": datetime.datetime.fromtimestamp(t.grid.time(k), datetime.UTC).strftime("%Y-%m-%d %H:%M"),
                "age_h": (k - born) * t.grid.step / 3600,
                "lent": float(lent[k]) / alloc,
                "oracle": float(best[k]) / alloc,
                "usage_now": float(use[k]) / alloc,
                "peak_ahead": float(use[k : k + width].max()) / alloc,
                "peak_day_before": float(use[max(0, k - per_day) : k + 1].max()) / alloc,
                "peak_week_before": float(use[max(0, k - 7 * per_day) : k + 1].max()) / alloc,
            }
        )
    return out


@dataclass(slots=True)
class Scores:
    halves: dict[str, dict[str, tuple[dict[str, float], dict[str, float]]]]  # policy -> resource -> both halves
    first_hour: dict[str, dict[str, int]]
    violations: list[dict[str, Any]]
    nodes: int
    node_steps: tuple[int, int]  # scored node-steps in each half
    first_hour_steps: int


def score(
    path: str, size: NodeSize, runs: Sequence[tuple[str, CapacityParams]], jobs: int, listed: str | None
) -> Scores:
    """Replay the trace at `path` as colo-sim reads it, node by node in `jobs` processes."""
    from colo_sim.csv_arrow import read_csv

    pods, intake = read_csv(path, "bitbrains", fast=True)
    plan = plan_rows(intake, pods, size, PACK_TO)
    del intake
    grid = plan.grid
    width = oracle.width(HORIZON_S, grid.step)
    lo, hi = 0, grid.steps - width + 1
    mid = min(hi, max(lo, math.ceil((SPLIT - grid.t0) / grid.step)))
    tasks = [ScoreTask(spec, grid, lo, mid, hi, tuple(runs), listed) for spec in plan.nodes]
    if jobs > 1:
        context = multiprocessing.get_context("forkserver")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            outcomes = list(pool.map(score_node, tasks))
    else:
        outcomes = [score_node(t) for t in tasks]
    policies = list(outcomes[0].parts)
    halves: dict[str, dict[str, tuple[dict[str, float], dict[str, float]]]] = {}
    first: dict[str, dict[str, int]] = {}
    for name in policies:
        halves[name], first[name] = {}, {}
        for r in RESOURCES:
            tallies = (Tally(), Tally())
            for outcome in outcomes:  # node order: the sums do not depend on which worker finished first
                for tally, part in zip(tallies, outcome.parts[name][r], strict=True):
                    tally.merge(part)
            halves[name][r] = (tallies[0].summary(grid.step, r), tallies[1].summary(grid.step, r))
            first[name][r] = sum(o.first_hour[name][r] for o in outcomes)
    young = sum(min(width, hi - lo) for _ in tasks)
    listing = [v for o in outcomes for v in o.violations]
    return Scores(halves, first, listing, len(tasks), ((mid - lo) * len(tasks), (hi - mid) * len(tasks)), young)


def variant(text: str, base: CapacityParams) -> tuple[str, CapacityParams]:
    """NAME:KEY=VALUE,... -> (NAME, base with those fields); `margin=off` for no learned margin."""
    name, _, settings = text.partition(":")
    if not name or not settings:
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME:KEY=VALUE[,KEY=VALUE...]")
    fields = {f.name: f for f in dataclasses.fields(CapacityParams)}
    changes: dict[str, Any] = {}
    for item in settings.split(","):
        key, _, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if key not in fields:
            raise argparse.ArgumentTypeError(f"{key!r}: not a capacity parameter (known: {', '.join(fields)})")
        if key == "margin":
            if value != "off":
                raise argparse.ArgumentTypeError("margin takes only 'off' (the learned margin's defaults are on)")
            changes[key] = None
            continue
        try:
            changes[key] = float(value)
        except ValueError:
            changes[key] = value
    return name, dataclasses.replace(base, **changes)


def percent(x: float) -> str:
    return f"{100 * x:.2f}"


def markdown(label: str, s: Scores) -> str:
    """One level's table: oracle_fraction / violation_rate (%) first half → second half, first-hour violations."""
    lines = [
        f"**{label}** ({s.nodes} nodes; {s.node_steps[0]} + {s.node_steps[1]} scored node-steps; "
        f"first hour: {s.first_hour_steps} node-steps)",
        "",
        "| policy | cpu | memory | first hour (cpu, memory) |",
        "| --- | --- | --- | --- |",
    ]
    for name, res in s.halves.items():
        cells = [
            " → ".join(f"{h['oracle_fraction']:.3f} / {percent(h['violation_rate'])}" for h in res[r])
            for r in RESOURCES
        ]
        lines.append(
            f"| {name} | {cells[0]} | {cells[1]} | {s.first_hour[name]['cpu']}, {s.first_hour[name]['memory']} |"
        )
    return "\n".join(lines)


def verdict(s: Scores, policy: str = "colo") -> list[str]:
    """Where `policy` does not Pareto-dominate a peer (worse on either axis), per half and resource, and where
    it violates more than the better peer in the nodes' first hour."""
    out = []
    for r in RESOURCES:
        for half in (0, 1):
            mine = s.halves[policy][r][half]
            for peer in PEERS:
                theirs = s.halves[peer][r][half]
                if (
                    mine["oracle_fraction"] < theirs["oracle_fraction"]
                    or mine["violation_rate"] > theirs["violation_rate"]
                ):
                    out.append(f"{r}, half {half + 1}: {policy} does not dominate {peer}")
        best_peer = min(s.first_hour[p][r] for p in PEERS)
        if s.first_hour[policy][r] > best_peer:
            out.append(f"{r}, first hour: {policy} {s.first_hour[policy][r]} violations, the better peer {best_peer}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.busy_fleet", description=__doc__.split("\n")[0])
    p.add_argument("--trace", default=TRACE)
    p.add_argument("--dir", default="/tmp/colo-busy", help="where the levels' traces are written")
    p.add_argument("--levels", default="0.5,0.75", help="target median node utilization of each level (cpu = memory)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--node-cpu", type=float, default=32.0, help="a packed node's cores (default: 32, as colo-sim)")
    p.add_argument(
        "--node-memory", type=float, default=128.0, help="a packed node's memory, GiB (default: 128; colo-sim's is 256)"
    )
    p.add_argument("--generate-only", action="store_true")
    p.add_argument("--no-idle", action="store_true", help="do not replay the unscaled trace")
    p.add_argument("--variant", action="append", default=[], metavar="NAME:KEY=VALUE,...")
    p.add_argument("--violations", metavar="POLICY", help="list this policy's violations (colo or a variant)")
    p.add_argument("--json", metavar="FILE", help="also write every figure as JSON")
    args = p.parse_args(argv)
    if not os.path.exists(args.trace):
        print(f"busy_fleet: {args.trace}: no such file", file=sys.stderr)
        return 2
    from colo_sim.main import colo_params

    defaults = colo_params(None)  # the agent's defaults as colo-sim replays them (the watermark's memory bound)
    try:
        levels = [float(x) for x in args.levels.split(",") if x.strip()]
        runs = [("colo", defaults), *(variant(v, defaults) for v in args.variant)]
    except (ValueError, argparse.ArgumentTypeError) as exc:
        print(f"busy_fleet: {exc}", file=sys.stderr)
        return 2
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    started = time.process_time()
    size = NodeSize(args.node_cpu, args.node_memory * (1 << 30))
    raw = read_raw(args.trace, size)
    os.makedirs(args.dir, exist_ok=True)
    traces: list[tuple[str, str]] = (
        []
        if args.no_idle
        else [
            (
                f"idle (the shared trace as it is; nodes of {args.node_cpu:g} cores, {args.node_memory:g} GiB)",
                args.trace,
            )
        ]
    )
    facts: dict[str, Any] = {"idle": {r: fleet_facts(raw, r, 1.0) for r in RESOURCES}}
    print(f"idle: {args.trace}")
    for r in RESOURCES:
        print(f"  {r}: {describe(facts['idle'][r])}")
    for level in levels:
        ks = {r: calibrate(raw, r, level) for r in RESOURCES}
        label = f"busy {level:.0%}"
        path = os.path.join(args.dir, f"busy-{round(100 * level)}.csv.gz")
        write_level(raw, ks["cpu"][0], ks["memory"][0], path)
        facts[label] = {"path": path, **{r: fleet_facts(raw, r, ks[r][0], ks[r][1]) for r in RESOURCES}}
        print(f"{label}: {path}")
        for r in RESOURCES:
            print(f"  {r}: {describe(facts[label][r])}")
        traces.append((label, path))
    del raw
    results: dict[str, Any] = {"facts": facts, "levels": {}}
    if not args.generate_only:
        for label, path in traces:
            s = score(path, size, runs, args.jobs, args.violations)
            print()
            print(markdown(label, s))
            for line in verdict(s):
                print(f"  - {line}")
            if args.violations:
                for v in s.violations:
                    print(
                        "    " + ", ".join(f"{k} {v[k]:.3f}" if isinstance(v[k], float) else f"{k} {v[k]}" for k in v)
                    )
            results["levels"][label] = dataclasses.asdict(s)
    print(
        f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
        f"this process's CPU {time.process_time() - started:.0f} s (workers not counted)"
    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
