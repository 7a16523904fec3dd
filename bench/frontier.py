"""The lending frontier on the shared trace (issue 32): every predictor's oracle fraction against its violation
rate, per reclaim ratio, both halves and the first hour of every node's life — the tables and the plot of
docs/simulation.md's "Choosing the defaults by data", reproducible.

Shared trace only (/work/shared/traces/bitbrains_rnd_dev.csv.gz: Bitbrains GWA-T-12 "Rnd", Shen, van Beek,
Iosup, CCGrid 2015; read by path), packed as colo-sim packs it (32 cores, 256 GiB, `--pack-to` 1.0, horizon
3600 s), chosen on the first half (until 2013-07-15 22:00 UTC) and reported on the second. Each column is a
predictor with or without the learned margin; each row pairs a CPU ratio with a memory ratio (the two resources
are lent independently, so one replay gives both). Every setting is replayed through colo-sim's own code
(`colo_sim.policies.colo.run_many`: the agent's `resource_capacity` at every step, one window store per node)
with the agent's defaults otherwise, without the watermark's memory bound (the frontier shows what each ratio
would lend); the defaults themselves, with that bound, are replayed alongside as `colo`. Scoring, halves and
the first hour are `bench.busy_fleet`'s.

Run: `.venv/bin/python -m bench.frontier [--jobs 2] [--set KEY=VALUE,...] [--plot FILE.png] [--json FILE]`.
Not in `make bench`: about 7 minutes of CPU, 3–4 minutes of wall time with `--jobs 2` (35 settings and the
defaults on 22 nodes × 8,929 steps).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from agent.capacity.lendable import CapacityParams
from bench.busy_fleet import PEERS, TRACE, Scores, score, variant
from colo_sim.packing import NodeSize

#: (label, predictor, learned margin on)
COLUMNS = (
    ("node_peak", "node_peak", False),
    ("node_peak + margin", "node_peak", True),
    ("time_of_day + margin", "time_of_day", True),
    ("week_peak + margin", "week_peak", True),
    ("nsigma + margin", "nsigma", True),
)
CPU_RATIOS = (0.86, 0.90, 0.94, 0.96, 0.98, 0.99, 1.00)
MEMORY_RATIOS = (0.70, 0.75, 0.80, 0.85, 0.87, 0.90, 0.95)


def settings(base: CapacityParams) -> list[tuple[str, CapacityParams]]:
    """Every (column, row) setting, named `column@row`."""
    out = []
    for label, predictor, margin in COLUMNS:
        for i, (cpu, memory) in enumerate(zip(CPU_RATIOS, MEMORY_RATIOS, strict=True)):
            params = dataclasses.replace(
                base,
                predictor=predictor,
                cpu_reclaim_ratio=cpu,
                memory_reclaim_ratio=memory,
                memory_fill_limit=1.0,
                margin=base.margin if margin else None,
            )
            out.append((f"{label}@{i}", params))
    return out


def cell(s: Scores, name: str, resource: str) -> str:
    """`first fraction / rate % → second fraction / rate %`, and the first hour's violations when any."""
    halves = s.halves[name][resource]
    text = " → ".join(f"{h['oracle_fraction']:.3f} / {100 * h['violation_rate']:.2f}" for h in halves)
    young = s.first_hour[name][resource]
    return f"{text} ({young})" if young else text


def tables(s: Scores) -> str:
    lines = []
    for resource, ratios in (("cpu", CPU_RATIOS), ("memory", MEMORY_RATIOS)):
        lines += [
            "",
            f"| `{resource}_reclaim_ratio` | " + " | ".join(f"`{c[1]}`{' + margin' * c[2]}" for c in COLUMNS) + " |",
            "| ---: | " + " | ".join("---" for _ in COLUMNS) + " |",
        ]
        for i, ratio in enumerate(ratios):
            row = [cell(s, f"{label}@{i}", resource) for label, _, _ in COLUMNS]
            lines.append(f"| {ratio:.2f} | " + " | ".join(row) + " |")
    lines += ["", "| policy | cpu | memory |", "| --- | --- | --- |"]
    for name in ("colo", *PEERS):
        lines.append(f"| {name} | {cell(s, name, 'cpu')} | {cell(s, name, 'memory')} |")
    return "\n".join(lines)


def plot(s: Scores, path: str) -> None:
    """Oracle fraction against violation rate, per resource and half; the peers as squares, the default a star."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for i, (resource, ratios) in enumerate((("cpu", CPU_RATIOS), ("memory", MEMORY_RATIOS))):
        for half in (0, 1):
            ax = axes[i][half]
            for label, _, _ in COLUMNS:
                pts = [s.halves[f"{label}@{k}"][resource][half] for k in range(len(ratios))]
                ax.plot([100 * p["violation_rate"] for p in pts], [p["oracle_fraction"] for p in pts], "o-", ms=3,
                        label=label)  # fmt: skip
            for peer in PEERS:
                p = s.halves[peer][resource][half]
                ax.plot([100 * p["violation_rate"]], [p["oracle_fraction"]], "s", label=peer)
            p = s.halves["colo"][resource][half]  # the defaults, as replayed beside the settings
            ax.plot([100 * p["violation_rate"]], [p["oracle_fraction"]], "*", ms=14, color="black",
                    label="Colo's defaults")  # fmt: skip
            goal = (0.85, 0.5) if resource == "cpu" else (0.80, 0.1)
            ax.axhline(goal[0], color="grey", lw=0.5)
            ax.axvline(goal[1], color="grey", lw=0.5)
            ax.set_xscale("symlog", linthresh=0.01)
            ax.set_xlim(left=0)
            ax.set_title(f"{resource}, {('first', 'second')[half]} half of the shared trace")
            ax.set_xlabel("violation rate, % of node-steps")
            ax.set_ylabel("oracle fraction")
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.frontier", description=__doc__.split("\n")[0])
    p.add_argument("--trace", default=TRACE)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--set", metavar="KEY=VALUE,...", help="capacity parameters changed for every setting")
    p.add_argument("--plot", metavar="FILE.png")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    if not os.path.exists(args.trace):
        print(f"frontier: {args.trace}: no such file", file=sys.stderr)
        return 2
    from colo_sim.main import colo_params

    defaults = colo_params(None)
    try:
        base = variant(f"base:{args.set}", defaults)[1] if args.set else defaults
    except argparse.ArgumentTypeError as exc:
        print(f"frontier: {exc}", file=sys.stderr)
        return 2
    if args.plot:  # checked before minutes of replay, not after them
        if importlib.util.find_spec("matplotlib") is None:
            print("frontier: --plot needs matplotlib: make sim (the sim extra)", file=sys.stderr)
            return 2
        if not os.access(os.path.dirname(os.path.abspath(args.plot)), os.W_OK):
            print(f"frontier: --plot {args.plot}: its directory is not writable", file=sys.stderr)
            return 2
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    started = time.time()
    runs = [("colo", base), *settings(base)]
    s = score(args.trace, NodeSize(32.0, 256.0 * (1 << 30)), runs, args.jobs, None)
    print(tables(s))
    print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {time.time() - started:.0f} s wall")
    if args.plot:
        plot(s, args.plot)
        print(f"frontier: plot written to {os.path.abspath(args.plot)}", file=sys.stderr)
    if args.json:
        result: dict[str, Any] = dataclasses.asdict(s)
        result["settings"] = {name: dataclasses.asdict(params) for name, params in runs}
        with open(args.json, "w") as out:
            json.dump(result, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
