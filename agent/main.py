"""`colo-agent` entry point: configuration errors exit 2, everything else runs until SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agent.config import AgentConfig, ConfigError, load_config
from cgroup import CgroupError, Layout

if TYPE_CHECKING:
    from agent.runtime import Agent
    from kube import Kube


def wants_cluster(standalone: bool, kubeconfig: str | None) -> bool:
    """A kubeconfig was given, or we run in a pod (the in-cluster service environment is set)."""
    return not standalone and bool(kubeconfig or os.environ.get("KUBERNETES_SERVICE_HOST"))


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
    source: PodSource
    if kube is not None:
        from agent.cluster import ClusterLink

        link = ClusterLink(config, host, view, reader, kube, backoff_initial=backoff_initial, backoff_max=backoff_max)
        source, stages, services = link.source, [link.stage], [link]
        view.install(node_sections=link.node_sections(), metric_sources=link.metric_sources(),
                     cluster_synced=link.pods.synced.is_set)  # fmt: skip
    else:
        source, stages, services = CgroupPodSource(host.layout, host.model, config.discovery_seconds), [], []
        # the JSON contract has these keys everywhere
        standalone = {"enabled": False, "reason": "standalone: no cluster, nothing published or enforced"}
        view.install(node_sections={"oversubscription": lambda: dict(standalone),
                                    "enforcement": lambda: dict(standalone)}, metric_sources={})  # fmt: skip
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
        print(f"colo-agent: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    from agent.runtime import serve

    kube = None
    if wants_cluster(config.standalone, config.kubeconfig):
        from kube import Kube  # the client and its transport cost ~8 MiB of RSS: only loaded when a cluster is there

        try:
            kube = Kube.connect(config.kubeconfig)
        except Exception as exc:  # a broken kubeconfig is a configuration error
            print(f"colo-agent: kubeconfig: {exc}", file=sys.stderr)
            return 2
    in_cluster = kube is not None
    if in_cluster and not config.node_name:
        print("colo-agent: in a cluster the node name is required: set NODE_NAME or --node-name", file=sys.stderr)
        return 2
    try:
        agent = build_agent(config, kube=kube)
    except (CgroupError, ValueError) as exc:
        print(f"colo-agent: cannot read this host's cgroups: {exc}", file=sys.stderr)
        return 1
    if kube is None:
        logging.getLogger("colo.agent").info("no cluster configuration: running standalone")
    host, port = config.listen_address(in_cluster)
    asyncio.run(serve(agent, host, port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
