"""`colo-sim` entry point: replay a usage trace through Colo's own capacity code and its peers' formulas.

Every unusable input (a flag, the trace file, an agent configuration) is one line on stderr naming the
cause, exit code 2; `--help` and `--version` as in colo-agent and colo-controller. Definitions of every
figure: docs/simulation.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from agent.capacity.lendable import CapacityParams
from colo_sim.arguments import (
    MAX_SPAN_S,
    duration,
    fraction,
    instant,
    memory,
    policy_list,
    positive,
    prometheus_duration,
    whole,
)
from colo_sim.packing import NodeSize
from colo_sim.policies import POLICY_NAMES
from colo_sim.trace import HEADERS, Sample, TraceError, TraceRows
from common.buildinfo import version_line
from common.cli import EXIT_CONFIG, OneLineParser

if TYPE_CHECKING:
    from colo_sim.node_plan import Plan
    from colo_sim.replay import Settings

PROG = "colo-sim"

#: Sources of samples besides --trace, by the argparse destination of their flag: a source registers a reader
#: here and its flag in `build_parser` (`--prometheus URL` with `--since DURATION`).
SOURCES: dict[str, Callable[[argparse.Namespace], TraceRows]] = {}


def from_prometheus(args: argparse.Namespace) -> TraceRows:
    """--prometheus URL --since D: the cluster's samples, one per --step (default 300 s)."""
    from colo_sim.prometheus import DEFAULT_STEP_S, PrometheusError, read_allocatable, read_prometheus

    step = args.step or DEFAULT_STEP_S
    try:
        rows = TraceRows(read_prometheus(args.prometheus, args.prometheus_since, step_s=step))
    except PrometheusError as exc:
        raise TraceError(str(exc)) from None
    try:  # each node's own size; --node-cpu and --node-memory for the nodes without one
        found = read_allocatable(args.prometheus, args.prometheus_since, step_s=step)
        args.node_sizes = {node: NodeSize(cpu, memory) for node, (cpu, memory) in found.items()}
    except PrometheusError:
        args.node_sizes = {}
    return rows


SOURCES["prometheus"] = from_prometheus


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=PROG,
        description="Replay pods' usage through Colo's own capacity code (the agent's predictor) and its peers' "
        "formulas, node by node, and score each policy against a peak oracle that knows the future.",
        epilog="Definitions of every figure: docs/simulation.md.",
    )
    p.add_argument("--version", action="version", version=version_line(PROG))
    p.add_argument("--trace", metavar="FILE", help="CSV trace, gzip or plain (schemas: docs/simulation.md)")
    p.add_argument("--format", choices=sorted(HEADERS), help="the trace's schema (default: detected from the header)")
    p.add_argument(
        "--node-cpu", type=positive, default=32.0, metavar="CORES", help="size of a packed node, cores (default: 32)"
    )
    p.add_argument(
        "--node-memory",
        type=memory,
        default=float(256 << 30),
        metavar="QUANTITY",
        help="size of a packed node (default: 256Gi)",
    )
    p.add_argument(
        "--pack-to",
        type=fraction,
        default=1.0,
        metavar="FRACTION",
        help="requests on a packed node stay within this share of its size (default: 1.0)",
    )
    p.add_argument(
        "--horizon", type=duration, default=3600.0, metavar="DURATION", help="the oracle's horizon H (default: 3600 s)"
    )
    p.add_argument(
        "--step",
        type=duration,
        metavar="DURATION",
        help="trace step (default: the most common interval between a pod's samples)",
    )
    p.add_argument(
        "--from",
        dest="score_from",
        type=instant,
        metavar="TIME",
        help="score node-steps from this time on (unix seconds or ISO 8601; policies still see "
        "the trace from its start)",
    )
    p.add_argument("--until", type=instant, metavar="TIME", help="score node-steps before this time")
    p.add_argument(
        "--agent-config",
        metavar="FILE",
        help="colo-agent YAML whose oversubscription section the colo policies use (default: the agent's defaults)",
    )
    p.add_argument(
        "--prometheus",
        metavar="URL",
        help="read the cluster's usage and requests from this Prometheus instead of a trace "
        "(docs/simulation-prometheus.md)",
    )
    p.add_argument(
        "--since",
        dest="prometheus_since",
        type=prometheus_duration,
        default=7 * 86400.0,
        metavar="DURATION",
        help="with --prometheus: how far back from now (default: 7d)",
    )
    p.add_argument("--output", choices=("table", "json"), default="table", help="(default: table)")
    p.add_argument(
        "--save", metavar="FILE", help="also write the samples read (e.g. a Prometheus pull) as a long-format trace"
    )
    p.add_argument(
        "--plot", metavar="FILE.png", help="draw the Pareto picture and one node over time (needs matplotlib: make sim)"
    )
    p.add_argument(
        "--jobs", type=whole, metavar="N", help="replay nodes in N processes (default: the CPUs; one for a small trace)"
    )
    p.add_argument(
        "--cluster",
        metavar="ADDRESS",
        default=os.environ.get("DASK_SCHEDULER_ADDRESS"),
        help="replay nodes on the Dask cluster whose scheduler is at ADDRESS (tcp://host:8786; default: "
        "$DASK_SCHEDULER_ADDRESS); needs the fleet extra, and the trace at a path or URL the workers "
        "can read",
    )
    p.add_argument(
        "--policies",
        type=policy_list,
        default=POLICY_NAMES,
        metavar="LIST",
        help="replay and report only these policies, comma-separated (default: all: "
        f"{','.join(POLICY_NAMES)}); the paper's nsigma, percentile and max replay every pod's own windows, "
        "most of the replay's time",
    )
    p.add_argument(
        "--max-span",
        type=duration,
        default=MAX_SPAN_S,
        metavar="DURATION",
        help="refuse a trace whose times span more than this (default: 366d)",
    )
    return p


def colo_params(path: str | None) -> CapacityParams:
    """The colo policy's parameters: the agent's defaults, or the oversubscription section of `path`."""
    from agent.capacity.lendable import params_from
    from agent.config import load_config
    from common.config import ConfigError
    from common.plugins import check_registered

    config = load_config(["--config", path] if path else [], env={})
    try:
        check_registered(config)  # the predictors' names, from their registry
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return params_from(config.oversubscription, config.enforcement.eviction.memory_high_watermark)


#: Below this many samples the nodes are replayed in this process whatever --jobs says: starting processes
#: would cost more than they save.
SMALL_TRACE = 100_000


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    import importlib.util

    if importlib.util.find_spec("numpy") is None and not {"-h", "--help", "--version"} & set(argv):
        print(f"{PROG}: the replay needs numpy: make sim (the sim extra)", file=sys.stderr)
        return EXIT_CONFIG
    if argv[:1] == ["convert"]:
        from colo_sim.convert import convert_main

        return convert_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)

    def fail(message: str) -> int:
        print(f"{PROG}: {message}", file=sys.stderr)
        return EXIT_CONFIG

    chosen = [dest for dest in SOURCES if getattr(args, dest, None)]
    if args.trace is None and not chosen:
        return fail("no input: give --trace FILE" + "".join(f" or --{d.replace('_', '-')}" for d in SOURCES))
    if args.score_from is not None and args.until is not None and args.until <= args.score_from:
        return fail("--until must be after --from")
    if args.plot and "colo" not in args.policies:
        return fail("--plot draws the colo policy: add colo to --policies")
    if args.plot:
        problem = plot_problem(args.plot)
        if problem:
            return fail(problem)
    from common.config import ConfigError

    try:
        params = colo_params(args.agent_config)
    except ConfigError as exc:
        return fail(f"--agent-config: {exc}")
    from colo_sim.executors import ExecutorError, cpus, dask, local
    from colo_sim.replay import Settings, run_plan
    from colo_sim.report import Progress, table

    settings = Settings(
        NodeSize(args.node_cpu, args.node_memory),
        args.pack_to,
        args.horizon,
        args.step,
        args.score_from,
        args.until,
        params,
        args.max_span,
        args.policies,
    )
    try:
        plan = load_plan(args, settings, chosen)
    except TraceError as exc:
        return fail(str(exc))
    for warning in plan.warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    try:
        if args.cluster:
            executor = dask(args.cluster)
        else:
            jobs = args.jobs or cpus()
            executor = local(1 if plan.samples < SMALL_TRACE and args.jobs is None else min(jobs, len(plan.nodes)))
        result = run_plan(plan, settings, Progress(), bool(args.plot), executor)
    except (ExecutorError, TraceError) as exc:
        return fail(str(exc))
    if result.steps == 0:
        return fail("no node-step to score: the trace is shorter than the horizon, or --from/--until leave none")
    if args.plot:
        from colo_sim.plot import PlotError, plot

        try:
            plot(result, args.plot)
        except PlotError as exc:
            return fail(str(exc))
    if args.output == "json":
        print(json.dumps(result.as_json(), indent=1))
    else:
        print(table(result))
    return 0


def plot_problem(path: str) -> str | None:
    """Why --plot PATH could not be drawn after the replay (matplotlib missing, the path not writable), checked
    before it; None when it can."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return "--plot needs matplotlib: make sim"
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return f"--plot {path}: is a directory"
    if not os.path.isdir(folder):
        return f"--plot {path}: no such directory {folder}"
    if not os.access(path if os.path.exists(path) else folder, os.W_OK):
        return f"--plot {path}: not writable"
    return None


def load_plan(args: argparse.Namespace, settings: Settings, chosen: list[str]) -> Plan:
    """The plan of the input named on the command line (--trace or a source), after --save when asked."""
    from colo_sim.csv_arrow import read_csv
    from colo_sim.executors import cpus
    from colo_sim.node_plan import plan_rows
    from colo_sim.parquet_trace import is_parquet, plan_parquet
    from colo_sim.replay import plan_samples

    if args.trace is None:
        rows = SOURCES[chosen[0]](args)
        save(args.save, rows.samples)
        plan = plan_samples(rows.samples, settings, rows.skipped)
        sizes: dict[str, NodeSize] | None = getattr(args, "node_sizes", None)
        if sizes:
            plan.nodes = [dataclasses.replace(n, size=sizes.get(n.name, n.size)) for n in plan.nodes]
        return plan
    if is_parquet(args.trace):
        if args.format == "bitbrains":
            raise TraceError(f"{args.trace}: a Parquet trace is in the long format (colo-sim convert writes it)")
        plan = plan_parquet(args.trace, settings.node, settings.pack_to, settings.step_s, settings.max_span_s)
    else:
        # in parallel, the read is the part no other process shares: pyarrow's faster reader then, for more memory
        parallel = bool(args.cluster) or (args.jobs or cpus()) > 1
        pods, intake = read_csv(args.trace, args.format, fast=parallel)
        plan = plan_rows(intake, pods, settings.node, settings.pack_to, settings.step_s, settings.max_span_s)
    if args.save:
        save(args.save, plan_samples_of(plan))
    return plan


def save(path: str | None, samples: Iterable[Sample]) -> None:
    if not path:
        return
    from colo_sim.trace_writer import write_csv

    try:
        write_csv(samples, path)
    except OSError as exc:
        raise TraceError(f"--save {path}: {exc.strerror or exc}") from None


def plan_samples_of(plan: Plan) -> Iterator[Sample]:
    """The samples of a plan, node by node, each node's in input order (pods keep their own node names)."""
    for spec in plan.nodes:
        names, rows = spec.rows.load()
        columns = (
            rows.t.tolist(),
            rows.cpu_request.tolist(),
            rows.cpu_usage.tolist(),
            rows.memory_request.tolist(),
            rows.memory_usage.tolist(),
        )
        for c, t, creq, cuse, mreq, muse in zip(rows.code.tolist(), *columns, strict=True):
            node, pod = names[c]
            yield Sample(node, pod, t, creq, cuse, mreq, muse)


if __name__ == "__main__":
    sys.exit(main())
