"""The controller's two ways to run: in a cluster (informers, lease, writes) or standalone against agents
named on the command line (nothing written). Either way the listening socket is bound first, so a taken
port stops start-up before leader election or any write."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from fastapi import FastAPI

from common.buildinfo import version
from common.cli import EXIT_OK, EXIT_RUNTIME
from common.config import ConfigError
from common.listen import bind, split_host_port, url_of
from controller.config import ControllerConfig
from controller.policy import DynamicSchedulerPolicy
from controller.standalone import NodeReport, StandaloneController, cycle_document
from controller.standalone_view import CLEAR_SCREEN, Legend, plural, table
from serving.server import Server, make_server, secure

if TYPE_CHECKING:
    from controller.admission.settings import AdmissionSettings
    from kube import Kube

log = logging.getLogger("controller")

#: The name the controller writes under (the Node's managedFields, the API server's audit log).
FIELD_MANAGER = "colo-controller"


def _server(app: FastAPI, cfg: ControllerConfig, kube: Kube | None = None) -> Server:
    """serving.server.Server (no signal handling of its own: SIGTERM/SIGINT reach our handlers, so the
    controller stops cleanly, lease released, and exits 0) with the `serving` settings: bounded requests,
    TLS, reviewed bearer tokens (the extender's paths stay open: kube-scheduler sends no token).
    ConfigError when the certificate files cannot be loaded or authentication has no cluster."""
    from controller.extender import EXTENDER_PATHS

    level = "debug" if cfg.log_level == "debug" else "warning"
    host, port = split_host_port(cfg.listen_in(standalone=False))
    try:
        secure(app, cfg.serving, kube, open_paths=EXTENDER_PATHS)
        return make_server(app, host, port, cfg.serving, log_level=level)
    except (OSError, ValueError) as err:  # ssl.SSLError is an OSError
        raise ConfigError(f"serving: {err}") from None


def serves_tls(server: Server) -> bool:
    """Whether the server speaks https: it has a TLS context once TLS is loaded (the start-up line says which)."""
    return getattr(server.config, "ssl", None) is not None


def _listen(cfg: ControllerConfig, origin: str) -> socket.socket:
    host, port = split_host_port(cfg.listen_in(standalone=False))
    return bind(host, port, origin)


def connect(cfg: ControllerConfig) -> Kube:
    """The API client from --kubeconfig or the pod's service account; ConfigError (one line) otherwise."""
    from kube import Kube  # the official client is large: only load it when a cluster is wanted

    try:
        kube = Kube.connect(cfg.kubeconfig, request_timeout=cfg.kube_request_timeout, field_manager=FIELD_MANAGER)
    except Exception as err:  # the client raises ConfigException, OSError, ValueError...
        where = f"--kubeconfig {cfg.kubeconfig}" if cfg.kubeconfig else "in-cluster configuration"
        raise ConfigError(f"{where}: {' '.join(str(err).split()) or type(err).__name__}") from None
    if kube is None:
        raise ConfigError(
            "no cluster: give --kubeconfig, run in a pod, or try it without one: --agent NAME=URL (see --help)"
        )
    return kube


def _on_signals(server: Server, first: Callable[[], None] | None = None) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, _request_exit, server, sig, first)


def _request_exit(server: Server, sig: int, first: Callable[[], None] | None) -> None:
    if first is None:
        log.info("received %s, shutting down", signal.Signals(sig).name)
    else:  # hand leadership over before the server drains: the lease thread releases the Lease at once
        log.info("received %s: releasing leadership and shutting down", signal.Signals(sig).name)
        first()
    server.should_exit = True


def in_cluster(
    cfg: ControllerConfig,
    policy: DynamicSchedulerPolicy,
    *,
    listen_origin: str = "--listen",
    admission: AdmissionSettings | None = None,
) -> int:
    """Run until SIGTERM/SIGINT: kubeconfig, then the socket, then informers, lease and polling (and the
    admission webhook's HTTPS server when `admission` is given)."""
    from controller.extender import create_app
    from controller.service import Controller

    kube = connect(cfg)
    try:
        sock = _listen(cfg, listen_origin)
    except ConfigError:
        kube.close()
        raise
    try:
        controller = Controller(kube, cfg, policy)
        webhook = None
        if admission is not None:
            from controller.admission.server import AdmissionWebhook

            try:
                webhook = AdmissionWebhook(kube, admission, controller.metrics)
            except (OSError, ValueError) as err:  # ssl.SSLError is an OSError
                raise ConfigError(
                    f"admission webhook: certificate {admission.cert_file} / key {admission.key_file}: {err}"
                ) from None

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
            serving=cfg.serving,
            rebalance=controller.rebalance_document,
        )
        server = _server(app, cfg, kube)
    except (ConfigError, OSError) as err:
        kube.close()
        sock.close()
        if isinstance(err, ConfigError):
            raise
        raise ConfigError(f"agent.tls_ca_file: {err}") from None  # the agents' CA, loaded by the poller

    async def serve() -> None:
        _on_signals(server, controller.begin_stop)
        await server.serve(sockets=[sock])

    controller.start()
    if webhook is not None:
        webhook.start()
        log.info(
            "admission webhook on https://%s, %d profile(s)", webhook.settings.listen, len(webhook.settings.profiles)
        )
    log.info(
        "colo-controller %s listening on %s; %d metrics synced per policy; leader election %s",
        version(),
        url_of(sock, serves_tls(server)),
        len(policy.spec.sync_policy),
        "on" if cfg.leader_election.enabled else "off",
    )
    try:
        asyncio.run(serve())
    finally:
        if webhook is not None:
            webhook.stop()
        controller.stop()
        server.close()
        kube.close()
        sock.close()
    return EXIT_OK if server.started else EXIT_RUNTIME


def standalone(
    cfg: ControllerConfig,
    policy: DynamicSchedulerPolicy,
    targets: Mapping[str, str],
    *,
    output: str | None,
    once: bool,
    listen_origin: str = "--listen",
    wide: bool = False,
) -> int:
    """Poll `targets` every polling interval and show each cycle; serve HTTP unless `once`. Exit code 1 when
    no agent answered (in the one cycle with `once`, in any cycle otherwise)."""
    from controller.extender import create_app

    cfg = cfg.model_copy(update={"listen": cfg.listen_in(standalone=True)})
    sock = None if once else _listen(cfg, listen_origin)
    ctl = StandaloneController(targets, cfg, policy)
    show = _Display(
        output or ("table" if sys.stdout.isatty() else "json"),
        ctl.scorer.metric_names,
        Legend.of(policy.spec, cfg.polling.interval),
        wide=wide,
    )
    if once:
        show(asyncio.run(ctl.cycle()), time.time())
        return _answered(show)
    assert sock is not None
    app = create_app(
        ctl.extender,
        ctl.metrics,
        ready=lambda: ctl.cycles > 0,
        max_body_bytes=cfg.extender.max_body_bytes,
        serving=cfg.serving,
    )
    try:
        server = _server(app, cfg)
    except ConfigError:
        sock.close()
        raise

    async def run() -> None:
        _on_signals(server)
        http = asyncio.create_task(server.serve(sockets=[sock]))
        print(
            f"colo-controller: standalone, polling {len(targets)} agents every {cfg.polling.interval:g}s; "
            f"extender and metrics on {url_of(sock, serves_tls(server))}; nothing is written",
            file=sys.stderr,
            flush=True,
        )
        while not server.should_exit and not http.done():
            started = time.monotonic()
            show(await ctl.cycle(), time.time())
            while not server.should_exit and not http.done() and time.monotonic() - started < cfg.polling.interval:
                await asyncio.sleep(0.05)
        server.should_exit = True
        await http

    try:
        asyncio.run(run())
    finally:
        server.close()
        sock.close()
    return _answered(show)


def _answered(show: _Display) -> int:
    """EXIT_OK when some agent answered; else 1, with one line saying so (the table alone may have scrolled)."""
    if show.answered:
        return EXIT_OK
    print(f"colo-controller: no agent answered in {plural(show.cycles, 'cycle')}", file=sys.stderr)
    return 1


class _Display:
    """Writes each cycle to stdout: a JSON line, or the table (redrawn in place on a terminal)."""

    def __init__(self, output: str, metric_names: tuple[str, ...], legend: Legend, *, wide: bool = False) -> None:
        self.output = output
        self.metric_names = metric_names
        self.legend = legend
        self.wide = wide
        self.redraw = output == "table" and sys.stdout.isatty()
        self.cycles = 0
        self.answered = False  # some agent answered in some cycle

    def __call__(self, reports: Mapping[str, NodeReport], at: float) -> None:
        self.cycles += 1
        self.answered = self.answered or any(r.error is None for r in reports.values())
        if self.output == "json":
            text = json.dumps(cycle_document(reports, at), separators=(",", ":"))
        else:
            drawn = table(reports, self.metric_names, at, self.legend, cycle=self.cycles, wide=self.wide)
            text = (CLEAR_SCREEN if self.redraw else "") + drawn + "\n"
        print(text, flush=True)
