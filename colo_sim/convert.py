"""`colo-sim convert`: a trace (CSV or Parquet) or a Prometheus pull written as a Parquet dataset partitioned by
node (`colo_sim.parquet_trace`), the input a replay streams node by node.

    colo-sim convert --trace FILE --to DIR
    colo-sim convert --prometheus URL [--since 7d] [--step 5m] [--concurrency 4] --to DIR

The rows are the usable ones, checked as a replay checks them (the skipped ones are counted on stderr and not
written), times in seconds. A pod with a node goes to `DIR/node=NAME/`, an unplaced one to the null
partition. A Prometheus pull is written node by node as each node's queries answer, with the pull's range
and each node's allocatable in `DIR/_colo_sim.json`; run the same command again after an interruption and it
reads only the nodes not yet written (`colo_sim.prometheus_pull`).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence

import numpy as np

from colo_sim.columns import Intake, Pods
from colo_sim.trace import TraceError
from common.cli import EXIT_CONFIG, OneLineParser

PROG = "colo-sim convert"


def build_parser() -> OneLineParser:
    from colo_sim.arguments import duration, prometheus_duration, whole
    from colo_sim.trace import HEADERS

    p = OneLineParser(
        prog=PROG,
        description="Write a trace or a Prometheus pull as a Parquet dataset partitioned by node (docs/simulation.md).",
    )
    p.add_argument("--trace", metavar="FILE", help="a CSV trace (gzip or plain) or a Parquet file or dataset")
    p.add_argument("--format", choices=sorted(HEADERS), help="the CSV trace's schema (default: from the header)")
    p.add_argument("--prometheus", metavar="URL", help="pull the cluster's samples from this Prometheus")
    p.add_argument(
        "--since",
        type=prometheus_duration,
        default=7 * 86400.0,
        metavar="DURATION",
        help="with --prometheus: how far back from now (default: 7d)",
    )
    p.add_argument("--step", type=duration, metavar="DURATION", help="with --prometheus: the step (default: 300 s)")
    p.add_argument(
        "--concurrency", type=whole, default=4, metavar="N", help="with --prometheus: nodes pulled at once (default: 4)"
    )
    p.add_argument("--to", required=True, metavar="DIR", help="the dataset's directory (or an object store URL)")
    return p


def convert_main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(list(argv))

    def fail(message: str) -> int:
        print(f"{PROG}: {message}", file=sys.stderr)
        return EXIT_CONFIG

    if (args.trace is None) == (args.prometheus is None):
        return fail("give exactly one input: --trace FILE or --prometheus URL")
    try:
        if args.prometheus is not None:
            from colo_sim.prometheus import DEFAULT_STEP_S, PrometheusError
            from colo_sim.prometheus_pull import pull_to_dataset

            try:
                written = pull_to_dataset(
                    args.prometheus,
                    args.since,
                    args.step or DEFAULT_STEP_S,
                    args.to,
                    args.concurrency,
                    progress=_progress,
                )
            except PrometheusError as exc:
                return fail(str(exc))
            resumed = f" ({written.resumed} nodes already there)" if written.resumed else ""
            print(
                f"{PROG}: {written.rows} rows of {written.nodes} nodes written to {args.to}{resumed}", file=sys.stderr
            )
            return 0
        rows, nodes, skipped, warnings = convert_trace(args.trace, args.format, args.to)
    except TraceError as exc:
        return fail(str(exc))
    for warning in warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(skipped.items()))
    print(
        f"{PROG}: {rows} rows of {nodes} nodes written to {args.to}"
        + (f"; skipped rows: {reasons}" if reasons else ""),
        file=sys.stderr,
    )
    return 0


def _progress(done: int, total: int) -> None:
    from colo_sim.report import Progress

    Progress(label="pulling")(done, total)


def convert_trace(path: str, fmt: str | None, target: str) -> tuple[int, int, dict[str, int], list[str]]:
    """Write the usable rows of the trace at `path` as a dataset at `target`; (rows, nodes, skipped, warnings)."""
    from colo_sim.parquet_trace import arrow_batches, file_batches, filesystem, is_parquet, write_node
    from colo_sim.trace import LONG_HEADER, no_row_reasons

    if is_parquet(path):
        from colo_sim.parquet_trace import open_dataset

        pods = Pods()
        intake = Intake(pods, keep=True)
        skipped: Counter[str] = Counter()
        dataset, fs_in, _ = open_dataset(path)
        files = sorted(f.path for f in dataset.get_fragments())
        for batch in arrow_batches(file_batches(fs_in, files, LONG_HEADER), pods, skipped):
            intake.add(batch)
        intake.skipped.update(skipped)
        if intake.summary.samples == 0:
            raise TraceError(f"{path}: no usable row ({no_row_reasons(dict(intake.skipped))})")
    else:
        from colo_sim.csv_arrow import read_csv

        pods, intake = read_csv(path, fmt, fast=True)  # type: ignore[arg-type]
    rows = intake.rows()
    node_names = sorted({node for node, _ in pods.names})
    index = {n: i for i, n in enumerate(node_names)}
    node_of = np.array([index[node] for node, _ in pods.names], np.int64)[rows.code]
    order = np.argsort(node_of, kind="stable")
    grouped = rows.take(order)
    bounds = [0, *np.cumsum(np.bincount(node_of, minlength=len(node_names))).tolist()]
    fs, root = filesystem(target)
    written = 0
    for i, node in enumerate(node_names):
        part = grouped.take(slice(bounds[i], bounds[i + 1]))  # type: ignore[arg-type]
        written += write_node(fs, root, node, part, pods.names, "part-00000")
    return written, len([n for n in node_names if n]), dict(intake.skipped), intake.warnings
