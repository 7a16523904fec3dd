"""`colo-controller`: command line, start-up validation (exit 2 on a bad setting/policy) and HTTP server."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from controller.config import ControllerConfig, load_config, parse_listen
from controller.errors import ConfigError
from controller.policy import DynamicSchedulerPolicy, default_policy, load_policy

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_CONFIG = 2

log = logging.getLogger("controller")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="colo-controller",
        description="Poll Colo agents, write crane-compatible load annotations, serve a scheduler extender.",
    )
    p.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig (default: in-cluster service account)")
    p.add_argument("--config", metavar="FILE", help="controller settings (YAML); may name the policy file")
    p.add_argument("--policy", metavar="FILE", help="crane DynamicSchedulerPolicy (default: crane's default)")
    p.add_argument("--listen", metavar="HOST:PORT", help="extender, health and metrics (default 0.0.0.0:8090)")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"], help="default info")
    p.add_argument("--check", action="store_true", help="validate settings and policy, print them, and exit")
    return p


def load_settings(args: argparse.Namespace) -> tuple[ControllerConfig, DynamicSchedulerPolicy]:
    """Config file + flags, then the policy; ConfigError names the offending key."""
    if args.listen is not None:
        try:
            parse_listen(args.listen)
        except ValueError as err:
            raise ConfigError(f"--listen: {err}") from None
    cfg = load_config(
        args.config,
        {
            "kubeconfig": args.kubeconfig,
            "policy_file": args.policy,
            "listen": args.listen,
            "log_level": args.log_level,
        },
    )
    policy = load_policy(cfg.policy_file) if cfg.policy_file else default_policy()
    return cfg, policy


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code (also via SystemExit)."""
    args = build_parser().parse_args(argv)
    try:
        cfg, policy = load_settings(args)
    except ConfigError as err:
        print(f"colo-controller: invalid configuration: {err}", file=sys.stderr)
        return _exit(EXIT_CONFIG, argv)
    logging.basicConfig(
        level=cfg.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    if args.check:
        print(cfg.model_dump_json(indent=2))
        print(policy.model_dump_json(indent=2, by_alias=True))
        return _exit(EXIT_OK, argv)
    return _exit(serve(cfg, policy), argv)


def serve(cfg: ControllerConfig, policy: DynamicSchedulerPolicy) -> int:
    """Run until SIGTERM/SIGINT."""
    import uvicorn

    from controller.extender import create_app
    from controller.service import Controller
    from kube import Kube

    kube = Kube.connect(cfg.kubeconfig, request_timeout=cfg.kube_request_timeout)
    if kube is None:
        log.error("no --kubeconfig given and not running in a cluster (KUBERNETES_SERVICE_HOST unset)")
        return EXIT_RUNTIME
    controller = Controller(kube, cfg, policy)
    app = create_app(
        controller.extender,
        controller.metrics,
        ready=controller.ready,
        unhealthy=controller.unhealthy,
        max_body_bytes=cfg.extender.max_body_bytes,
        rebalance=controller.rebalance_document,
    )
    host, port = parse_listen(cfg.listen)
    server = uvicorn.Server(
        uvicorn.Config(app, host=host, port=port, log_level=cfg.log_level, access_log=False, lifespan="off")
    )
    controller.start()
    log.info(
        "colo-controller listening on %s:%d; %d metrics synced per policy; leader election %s",
        host,
        port,
        len(policy.spec.sync_policy),
        "on" if cfg.leader_election.enabled else "off",
    )
    try:
        server.run()
    finally:
        controller.stop()
        kube.close()
    return EXIT_OK if server.started else EXIT_RUNTIME


def _exit(code: int, argv: Sequence[str] | None) -> int:
    # As a console script (argv None) exit with the code; when called from tests just return it.
    if argv is None:
        sys.exit(code)
    return code


if __name__ == "__main__":
    main()
