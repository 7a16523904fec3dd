"""`colo-controller`: command line, start-up validation (exit 2 on a bad setting/policy) and HTTP server."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from controller.admission.settings import AdmissionSettings, load_admission
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
    p.add_argument("--admission", metavar="FILE", help="admission webhook settings and colocation profiles (YAML)")
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
            "admission_file": args.admission,
        },
    )
    policy = load_policy(cfg.policy_file) if cfg.policy_file else default_policy()
    return cfg, policy


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code (also via SystemExit)."""
    args = build_parser().parse_args(argv)
    try:
        cfg, policy = load_settings(args)
        admission = load_admission(cfg.admission_file) if cfg.admission_file else None
    except ConfigError as err:
        print(f"colo-controller: invalid configuration: {err}", file=sys.stderr)
        return _exit(EXIT_CONFIG, argv)
    logging.basicConfig(
        level=cfg.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    if args.check:
        print(cfg.model_dump_json(indent=2))
        print(policy.model_dump_json(indent=2, by_alias=True))
        if admission is not None:
            print(admission.model_dump_json(indent=2, by_alias=True))
        return _exit(EXIT_OK, argv)
    return _exit(serve(cfg, policy, admission), argv)


def serve(cfg: ControllerConfig, policy: DynamicSchedulerPolicy, admission: AdmissionSettings | None = None) -> int:
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
    webhook = None
    if admission is not None:
        from controller.admission.server import AdmissionWebhook

        try:
            webhook = AdmissionWebhook(kube, admission, controller.metrics)
        except (OSError, ValueError) as err:  # ssl.SSLError is an OSError
            log.error("admission webhook: certificate %s / key %s: %s", admission.cert_file, admission.key_file, err)
            kube.close()
            return EXIT_RUNTIME

    def unhealthy() -> str | None:
        if webhook is not None and webhook.started and not webhook.alive():
            return "admission webhook server stopped"
        return controller.unhealthy()

    app = create_app(
        controller.extender,
        controller.metrics,
        ready=controller.ready,
        unhealthy=unhealthy,
        max_body_bytes=cfg.extender.max_body_bytes,
    )
    host, port = parse_listen(cfg.listen)
    server = uvicorn.Server(
        uvicorn.Config(app, host=host, port=port, log_level=cfg.log_level, access_log=False, lifespan="off")
    )
    controller.start()
    if webhook is not None:
        webhook.start()
        log.info(
            "admission webhook on https://%s with %d profile(s)",
            webhook.settings.listen,
            len(webhook.reviewer.settings.profiles),
        )
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
        if webhook is not None:
            webhook.stop()
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
