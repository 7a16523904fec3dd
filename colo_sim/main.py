"""`colo-sim` entry point: replay a usage trace through Colo's own capacity code and its peers' formulas.

Every unusable input (a flag, the trace file, an agent configuration) is one line on stderr naming the
cause, exit code 2; `--help` and `--version` as in colo-agent and colo-controller. Definitions of every
figure: docs/simulation.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import sys
from collections.abc import Callable, Sequence

from agent.capacity.lendable import CapacityParams
from colo_sim.packing import NodeSize
from colo_sim.trace import HEADERS, TraceError, TraceRows, read_trace
from common.buildinfo import version_line
from common.cli import EXIT_CONFIG, OneLineParser

PROG = "colo-sim"

#: Sources of samples besides --trace, by the argparse destination of their flag: a source registers a reader
#: here and its flag in `build_parser` (`--prometheus URL` with `--since DURATION`).
SOURCES: dict[str, Callable[[argparse.Namespace], TraceRows]] = {}

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([smhd]?)\s*$")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration(text: str) -> float:
    """Seconds from '3600', '90s', '60m', '1h' or '1d'."""
    m = _DURATION.match(text)
    if not m or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive duration like 3600, 60m or 1h")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def instant(text: str) -> float:
    """Unix seconds from a number or an ISO 8601 date/time (UTC unless it names a zone)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither unix seconds nor an ISO 8601 time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp()


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return value


def fraction(text: str) -> float:
    value = positive(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not in (0, 1]")
    return value


def memory(text: str) -> float:
    from kube.resources import quantity  # the official client's quantity parser

    q = quantity(text)
    if q is None or not q > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive quantity like 256Gi")
    return float(q)


def prometheus_duration(text: str) -> float:
    from colo_sim.prometheus import PrometheusError, parse_duration

    try:
        return parse_duration(text)
    except PrometheusError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def from_prometheus(args: argparse.Namespace) -> TraceRows:
    """--prometheus URL --since D: the cluster's samples, one per --step (default 300 s)."""
    from colo_sim.prometheus import DEFAULT_STEP_S, PrometheusError, read_prometheus

    try:
        return TraceRows(read_prometheus(args.prometheus, args.prometheus_since, step_s=args.step or DEFAULT_STEP_S))
    except PrometheusError as exc:
        raise TraceError(str(exc)) from None


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
    p.add_argument("--node-cpu", type=positive, default=32.0, metavar="CORES",
                   help="size of a packed node, cores (default: 32)")  # fmt: skip
    p.add_argument("--node-memory", type=memory, default=float(256 << 30), metavar="QUANTITY",
                   help="size of a packed node (default: 256Gi)")  # fmt: skip
    p.add_argument("--pack-to", type=fraction, default=1.0, metavar="FRACTION",
                   help="requests on a packed node stay within this share of its size (default: 1.0)")  # fmt: skip
    p.add_argument("--horizon", type=duration, default=3600.0, metavar="DURATION",
                   help="the oracle's horizon H (default: 3600 s)")  # fmt: skip
    p.add_argument("--step", type=duration, metavar="DURATION",
                   help="trace step (default: the most common interval between a pod's samples)")  # fmt: skip
    p.add_argument("--from", dest="score_from", type=instant, metavar="TIME",
                   help="score node-steps from this time on (unix seconds or ISO 8601; policies still see "
                   "the trace from its start)")  # fmt: skip
    p.add_argument("--until", type=instant, metavar="TIME", help="score node-steps before this time")
    p.add_argument("--agent-config", metavar="FILE",
                   help="colo-agent YAML whose oversubscription section the colo policies use "
                   "(default: the agent's defaults)")  # fmt: skip
    p.add_argument("--prometheus", metavar="URL",
                   help="read the cluster's usage and requests from this Prometheus instead of a trace "
                   "(docs/simulation-prometheus.md)")  # fmt: skip
    p.add_argument("--since", dest="prometheus_since", type=prometheus_duration, default=7 * 86400.0,
                   metavar="DURATION", help="with --prometheus: how far back from now (default: 7d)")  # fmt: skip
    p.add_argument("--output", choices=("table", "json"), default="table", help="(default: table)")
    p.add_argument("--save", metavar="FILE",
                   help="also write the samples read (e.g. a Prometheus pull) as a long-format trace")  # fmt: skip
    p.add_argument("--plot", metavar="FILE.png",
                   help="draw the Pareto picture and one node over time (needs matplotlib: make sim)")  # fmt: skip
    return p


def colo_params(path: str | None) -> CapacityParams:
    """The colo policy's parameters: the agent's defaults, or the oversubscription section of `path`."""
    from agent.capacity.lendable import params_from
    from agent.config import load_config

    config = load_config(["--config", path] if path else [], env={})
    return params_from(config.oversubscription, config.enforcement.eviction.memory_high_watermark)


def main(argv: Sequence[str] | None = None) -> int:
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
    from common.config import ConfigError

    try:
        params = colo_params(args.agent_config)
    except ConfigError as exc:
        return fail(f"--agent-config: {exc}")
    try:
        rows = read_trace(args.trace, args.format) if args.trace is not None else SOURCES[chosen[0]](args)
    except TraceError as exc:
        return fail(str(exc))
    if args.save:
        from colo_sim.trace_writer import write_csv

        try:
            write_csv(rows.samples, args.save)
        except OSError as exc:
            return fail(f"--save {args.save}: {exc.strerror or exc}")
    from colo_sim.replay import Settings, replay
    from colo_sim.report import Progress, table

    settings = Settings(NodeSize(args.node_cpu, args.node_memory), args.pack_to, args.horizon, args.step,
                        args.score_from, args.until, params)  # fmt: skip
    result = replay(rows.samples, settings, rows.skipped, Progress())
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


if __name__ == "__main__":
    sys.exit(main())
