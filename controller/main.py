"""`colo-controller`: command line and start-up validation. Every configuration, address and kubeconfig
problem is one line on stderr naming the flag, variable or key, exit code 2; runtime failures exit 1."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence

from common import logs
from common.cli import EXIT_CONFIG, EXIT_OK, EXIT_RUNTIME, Flags
from common.config import ConfigError, origin
from controller.admission.settings import load_admission
from controller.config import ENV_PREFIX, ControllerConfig, load_config
from controller.policy import DynamicSchedulerPolicy, default_policy, load_policy

log = logging.getLogger("controller")


def build_flags() -> Flags:
    """colo-controller's flags; each help names its default and its COLO_CONTROLLER_* variable."""
    f = Flags(
        "colo-controller",
        "Poll Colo agents, write crane-compatible load annotations, serve a scheduler extender.",
        ENV_PREFIX,
        epilog=(
            "Without a cluster: colo-controller --agent node-a=http://127.0.0.2:9817 --agent ... polls those agents,\n"
            "shows the annotations and scores it would write, serves the same endpoints and writes nothing."
        ),
    )
    p = f.parser
    p.add_argument(
        "--config", metavar="FILE", help=f"settings YAML, or the ConfigMap holding it (env {ENV_PREFIX}CONFIG)"
    )
    f.add("--kubeconfig", "kubeconfig", "kubeconfig file", metavar="PATH", shown_default="in-cluster service account")
    f.add(
        "--policy", "policy_file", "crane DynamicSchedulerPolicy file", metavar="FILE", shown_default="crane's default"
    )
    f.add(
        "--listen",
        "listen",
        "extender, health and metrics address",
        metavar="HOST:PORT",
        shown_default="127.0.0.1:8090 standalone, 0.0.0.0:8090 in a cluster",
    )
    f.add(
        "--admission",
        "admission_file",
        "admission webhook settings and colocation profiles (YAML)",
        metavar="FILE",
        shown_default="none: no webhook",
    )
    f.add_logging()
    p.add_argument("--check", action="store_true", help="validate settings and policy, print them, and exit")
    p.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="standalone mode, no cluster: poll the agent of node NAME at URL (e.g. http://127.0.0.2:9817); repeat "
        "for more nodes; nothing is written",
    )
    p.add_argument(
        "--output",
        choices=["table", "json"],
        default=None,
        help="standalone: a live table, or one JSON object per cycle on stdout (default: table on a terminal, "
        "else json)",
    )
    p.add_argument("--once", action="store_true", help="standalone: run one cycle, print it and exit (no HTTP)")
    p.add_argument(
        "--purge-node-state",
        action="store_true",
        help="after an uninstall: remove Colo's annotations and taint from every node (of node_selector), set "
        "kubernetes.io/batch-* to what its running batch pods request (removed where none), print what was "
        "written, and exit (docs/uninstall.md)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="with --purge-node-state: print what would be removed, change nothing"
    )
    p.add_argument(
        "--follow",
        type=_follow_seconds,
        default=None,
        metavar="SECONDS",
        help="with --purge-node-state: then watch the pods and lower each node's kubernetes.io/batch-* as its "
        "remaining batch pods finish, until none is left (exit 0) or SECONDS have passed (exit 1)",
    )
    p.add_argument(
        "--wide",
        action="store_true",
        help="standalone table: whole status and capacity texts, wider than 100 columns",
    )
    for action in p._actions:
        if action.dest in f.flag_of:
            action.default = None  # unset flags must not override the file and the environment
    return f


def build_parser() -> argparse.ArgumentParser:
    return build_flags().parser


def load_settings(
    args: argparse.Namespace, flag_of: Mapping[str, str], env: Mapping[str, str]
) -> tuple[ControllerConfig, DynamicSchedulerPolicy]:
    """Config file, environment, flags, then the policy; ConfigError names the offending source."""
    values = vars(args)
    overrides = {key: (flag, values[key]) for key, flag in flag_of.items()}
    cfg = load_config(args.config or env.get(f"{ENV_PREFIX}CONFIG"), overrides, env)
    policy = load_policy(cfg.policy_file) if cfg.policy_file else default_policy()
    if (args.once or args.output or args.wide) and not args.agent:
        raise ConfigError("--once, --output and --wide are for standalone mode: add --agent NAME=URL")
    if args.purge_node_state and args.agent:
        raise ConfigError("--purge-node-state needs a cluster: it cannot be combined with --agent")
    if args.dry_run and not args.purge_node_state:
        raise ConfigError("--dry-run is for --purge-node-state")
    if args.follow is not None and (not args.purge_node_state or args.dry_run):
        raise ConfigError("--follow is for --purge-node-state, without --dry-run")
    return cfg, policy


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code (also via SystemExit)."""
    flags = build_flags()
    args = flags.parser.parse_args(argv)
    try:
        cfg, policy = load_settings(args, flags.flag_of, os.environ)
        admission = load_admission(cfg.admission_file) if cfg.admission_file else None
        targets = None
        if args.agent:
            from controller.standalone import parse_agents

            targets = parse_agents(args.agent, cfg.agent.path)
            if admission is not None:
                raise ConfigError("the admission webhook (--admission) needs a cluster; standalone mode has none")
    except ConfigError as err:
        print(f"colo-controller: invalid configuration: {err}", file=sys.stderr)
        return _exit(EXIT_CONFIG, argv)
    logs.setup(cfg.log_level, cfg.log_format)
    if args.check:
        print(cfg.model_dump_json(indent=2))
        print(policy.model_dump_json(indent=2, by_alias=True))
        if admission is not None:
            print(admission.model_dump_json(indent=2, by_alias=True))
        return _exit(EXIT_OK, argv)
    from controller import run

    if args.purge_node_state:
        return _exit(purge(cfg, policy, dry_run=args.dry_run, follow=args.follow), argv)
    config_path = args.config or os.environ.get(f"{ENV_PREFIX}CONFIG")
    listen = origin("listen", "--listen", args.listen, os.environ, ENV_PREFIX, config_path)
    try:
        if targets is not None:
            code = run.standalone(
                cfg, policy, targets, output=args.output, once=args.once, listen_origin=listen, wide=args.wide
            )
        else:
            code = run.in_cluster(cfg, policy, listen_origin=listen, admission=admission)
    except ConfigError as err:
        print(f"colo-controller: {err}", file=sys.stderr)
        code = EXIT_CONFIG
    return _exit(code, argv)


def _follow_seconds(value: str) -> float:
    """--follow's SECONDS: a positive number."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"--follow needs a positive number of seconds, got {value!r}")
    return seconds


def purge(cfg: ControllerConfig, policy: DynamicSchedulerPolicy, *, dry_run: bool, follow: float | None) -> int:
    """--purge-node-state: one line per node that carried something of Colo's, then a summary; with `follow`,
    one line per node each time its batch resources are lowered, until none is left."""
    from controller.purge import follow_batch_pods, purge_node_state
    from controller.run import connect

    try:
        kube = connect(cfg)
    except ConfigError as err:
        print(f"colo-controller: {err}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        try:
            metrics = [s.name for s in policy.spec.sync_policy]
            done, holds = purge_node_state(kube, metrics, label_selector=cfg.node_selector or None, dry_run=dry_run)
        except Exception as err:
            print(f"colo-controller: listing nodes failed: {' '.join(str(err).split())[:300]}", file=sys.stderr)
            return EXIT_RUNTIME
        for node in done:
            if node.carried or node.error:
                print(("(dry run) " if dry_run else "") + node.describe(), flush=True)
        failed = [n for n in done if n.error]
        carried = sum(1 for n in done if n.carried)
        verb = "carry" if dry_run else "carried"
        summary = f"{len(done)} nodes, {carried} {verb} Colo's state, {len(failed)} failed"
        kept = len(holds.nodes)
        if kept:
            summary += f"; {kept} keep batch resources their running batch pods request"
            if follow is None and not dry_run:
                summary += " (--follow SECONDS lowers them as those pods finish)"
        print(summary, flush=True)
        if follow is None or not kept:
            return EXIT_RUNTIME if failed else EXIT_OK
        print(f"following the batch pods of {kept} nodes for at most {follow:g}s", flush=True)
        left = follow_batch_pods(kube, holds, follow, lambda line: print(line, flush=True))
    finally:
        kube.close()
    if left:
        nodes = ", ".join(sorted(left))
        print(
            f"colo-controller: after {follow:g}s batch pods still run on {nodes}: their batch resources stay at "
            "what those pods request; run --purge-node-state --follow again",
            file=sys.stderr,
        )
        return EXIT_RUNTIME
    print("no node carries batch resources any more", flush=True)
    return EXIT_RUNTIME if failed else EXIT_OK


def _exit(code: int, argv: Sequence[str] | None) -> int:
    # As a console script (argv None) exit with the code; when called from tests just return it.
    if argv is None:
        sys.exit(code)
    return code


if __name__ == "__main__":
    main()
