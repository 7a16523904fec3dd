"""`colo-agent` entry point. Start-up order: configuration, kubeconfig, the listening socket, the host's
cgroups (agent/main.py's composition root), then serving and sampling (colo_agent/serve.py). Every
configuration, address, permission and kubeconfig problem is one line on stderr naming its flag, variable or
key, exit code 2; a host whose cgroups cannot be read exits 1."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agent.config import ENV_PREFIX, ConfigError, build_parser, load_config
from agent.main import build_agent, settle_state_file, wants_cluster, warn_without_kubepods
from cgroup import CgroupError
from common import logs
from common.config import origin
from common.listen import bind

if TYPE_CHECKING:
    from kube import Kube

log = logging.getLogger("colo.agent")

#: The name the agent writes under (the Node's managedFields, the API server's audit log).
FIELD_MANAGER = "colo-agent"


def connect(kubeconfig: str | None) -> Kube | None:
    """The agent's API client (kubeconfig, else in-cluster), writing as `FIELD_MANAGER`; None: standalone."""
    from kube import Kube  # the client and its transport cost ~8 MiB of RSS: only loaded when a cluster is there

    return Kube.connect(kubeconfig, field_manager=FIELD_MANAGER)


def _fail(message: str, code: int) -> int:
    print(f"colo-agent: {message}", file=sys.stderr)
    return code


def _origin(key: str, flag: str, argv: Sequence[str] | None) -> str:
    """Which flag, variable or file key set `key` (for the one-line error)."""
    args = build_parser().parse_args(argv)
    path = args.config or os.environ.get("COLO_CONFIG")
    return origin(key, flag, getattr(args, key), os.environ, ENV_PREFIX, path)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = load_config(argv)
    except ConfigError as exc:
        return _fail(f"invalid configuration: {exc}", 2)
    if build_parser().parse_args(argv).check:
        print(config.model_dump_json(indent=2))
        return 0
    logs.setup(config.log_level, config.log_format)
    from serving import uvicorn_package

    uvicorn_package.install()  # before the web stack imports uvicorn: not its command line nor supervisors
    from colo_agent.serve import build_server, serve  # the web stack: not loaded for --help or a bad flag

    kube = None
    if wants_cluster(config.standalone, config.kubeconfig):
        try:
            kube = connect(config.kubeconfig)
        except Exception as exc:  # a broken kubeconfig is a configuration error
            where = f"--kubeconfig {config.kubeconfig}" if config.kubeconfig else "in-cluster configuration"
            return _fail(f"{where}: {' '.join(str(exc).split()) or type(exc).__name__}", 2)
    in_cluster = kube is not None
    if in_cluster and not config.node_name:
        return _fail("in a cluster the node name is required: set NODE_NAME or --node-name", 2)
    in_pod = in_cluster and not config.kubeconfig  # the DaemonSet: in-cluster configuration
    try:
        config = settle_state_file(config, in_pod, os.environ, lambda: _origin("state_file", "--state-file", argv))
    except ConfigError as exc:
        return _fail(str(exc), 2)
    host, port = config.listen_address(in_cluster)
    try:
        sock = bind(host, port, _origin("listen", "--listen", argv))
    except ConfigError as exc:
        return _fail(str(exc), 2)
    try:
        agent = build_agent(config, kube=kube)
    except ConfigError as exc:  # e.g. an enforcement ledger of a newer colo-agent: never misread
        sock.close()
        return _fail(str(exc), 2)
    except (CgroupError, ValueError, OSError) as exc:
        sock.close()
        return _fail(f"cannot read this host's cgroups under host_root {config.host_root}: {exc}", 1)
    warn_without_kubepods(agent)
    if kube is None:
        log.info("no cluster configuration: running standalone")
    try:
        app, server = build_server(agent, sock, kube)
    except (OSError, ValueError) as exc:  # certificate files, or authentication without a cluster
        sock.close()
        return _fail(f"serving: {exc}", 2)
    return 0 if asyncio.run(serve(agent, app, server, sock)) else 1


if __name__ == "__main__":
    sys.exit(main())
