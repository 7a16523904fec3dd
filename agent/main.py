"""`colo-agent` entry point. Start-up order: configuration, kubeconfig, the listening socket, the host's
cgroups, then sampling. Every configuration, address, permission and kubeconfig problem is one line on
stderr naming its flag, variable or key, exit code 2; a host whose cgroups cannot be read exits 1."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agent.config import ENV_PREFIX, AgentConfig, ConfigError, build_parser, load_config
from cgroup import CgroupError, Layout
from common import logs
from common.config import origin
from common.listen import bind

if TYPE_CHECKING:
    from agent.runtime import Agent
    from agent.view import MetricSource
    from kube import Kube

log = logging.getLogger("colo.agent")


def wants_cluster(standalone: bool, kubeconfig: str | None) -> bool:
    """A kubeconfig was given, or we run in a pod (the in-cluster service environment is set)."""
    return not standalone and bool(kubeconfig or os.environ.get("KUBERNETES_SERVICE_HOST"))


def _fail(message: str, code: int) -> int:
    print(f"colo-agent: {message}", file=sys.stderr)
    return code


def _listen_origin(argv: Sequence[str] | None) -> str:
    """Which flag, variable or file key set the listening address (for the one-line error)."""
    args = build_parser().parse_args(argv)
    path = args.config or os.environ.get("COLO_CONFIG")
    return origin("listen", "--listen", args.listen, os.environ, ENV_PREFIX, path)


def warn_without_kubepods(agent: Agent) -> None:
    """One warning when the cgroup root holds no kubepods: no pod will ever be found."""
    where = agent.layout.dir("cpu", agent.model.kubepods())
    if not os.path.isdir(where):
        log.warning(
            "no kubepods cgroup at %s (--cgroup-root %s, %s driver): no pods will be found; node figures only "
            "(KinD nodes need --cgroup-root /kubelet)",
            where,
            agent.config.cgroup_root,
            agent.driver.driver,
        )


def process_metrics() -> MetricSource:
    """`process_*` (the agent's own CPU, memory, open files) and `colo_build_info` next to the node's series."""
    from prometheus_client import ProcessCollector

    from common.buildinfo import build_info

    process = ProcessCollector(registry=None)
    return lambda: [*process.collect(), build_info("colo-agent")]


def build_agent(
    config: AgentConfig,
    *,
    kube: Kube | None = None,
    layout: Layout | None = None,
    backoff_initial: float = 0.5,
    backoff_max: float = 30.0,
) -> Agent:
    """The composition root: every part of the agent built in dependency order, each given what it needs.
    With `kube` the agent runs in a cluster (pods from the API server, capacity, eviction, enforcement);
    without, standalone (pods from the cgroup tree). Nothing is replaced or added after this returns."""
    from agent.runtime import Agent, Host, load_windows_for
    from agent.sampler import CgroupPodSource, PodSource, Sampler
    from agent.view import AgentView
    from cgroup import CgroupReader

    host = Host.detect(config, layout)
    windows = load_windows_for(config, host.node_name)
    view = AgentView(windows, config.interval, host.node_name)
    reader = CgroupReader(host.layout)
    own = {"process": process_metrics()}
    source: PodSource
    if kube is not None:
        from agent.cluster import ClusterLink
        from agent.enforcer import detect_facts
        from agent.strategies.registry import strategies

        registered = strategies(config, detect_facts(host.layout, host.model, reader))  # one list, built once
        link = ClusterLink(config, host, view, reader, kube, registered=registered, backoff_initial=backoff_initial,
                           backoff_max=backoff_max)  # fmt: skip
        source, stages, services = link.source, [link.stage], [link]
        view.install(node_sections=link.node_sections(), metric_sources={**link.metric_sources(), **own},
                     cluster_synced=link.pods.synced.is_set)  # fmt: skip
    else:
        source, stages, services = CgroupPodSource(host.layout, host.model, config.discovery_seconds), [], []
        # the JSON contract has these keys everywhere
        standalone = {"enabled": False, "reason": "standalone: no cluster, nothing published or enforced"}
        view.install(node_sections={"oversubscription": lambda: dict(standalone),
                                    "enforcement": lambda: dict(standalone)}, metric_sources=own)  # fmt: skip
    sampler = Sampler(
        host.layout, host.model, source, windows, host_root=config.host_root, reader=reader,
        container_stat_every=config.container_memory_detail_every,
        collectors=config.collectors.enabled(),
    )  # fmt: skip
    return Agent(config, host, windows, view, reader, sampler, stages=stages, services=services,
                 in_cluster=kube is not None)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = load_config(argv)
    except ConfigError as exc:
        return _fail(f"invalid configuration: {exc}", 2)
    logs.setup(config.log_level, config.log_format)
    from agent.runtime import build_server, serve

    kube = None
    if wants_cluster(config.standalone, config.kubeconfig):
        from kube import Kube  # the client and its transport cost ~8 MiB of RSS: only loaded when a cluster is there

        try:
            kube = Kube.connect(config.kubeconfig)
        except Exception as exc:  # a broken kubeconfig is a configuration error
            where = f"--kubeconfig {config.kubeconfig}" if config.kubeconfig else "in-cluster configuration"
            return _fail(f"{where}: {' '.join(str(exc).split()) or type(exc).__name__}", 2)
    in_cluster = kube is not None
    if in_cluster and not config.node_name:
        return _fail("in a cluster the node name is required: set NODE_NAME or --node-name", 2)
    host, port = config.listen_address(in_cluster)
    try:
        sock = bind(host, port, _listen_origin(argv))
    except ConfigError as exc:
        return _fail(str(exc), 2)
    try:
        agent = build_agent(config, kube=kube)
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
