"""`colo-agent` entry point: configuration errors exit 2, everything else runs until SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Sequence

from agent.config import ConfigError, load_config
from cgroup import CgroupError


def wants_cluster(standalone: bool, kubeconfig: str | None) -> bool:
    """A kubeconfig was given, or we run in a pod (the in-cluster service environment is set)."""
    return not standalone and bool(kubeconfig or os.environ.get("KUBERNETES_SERVICE_HOST"))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = load_config(argv)
    except ConfigError as exc:
        print(f"colo-agent: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    from agent.runtime import Agent, serve

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
        agent = Agent(config, in_cluster=in_cluster)
    except (CgroupError, ValueError) as exc:
        print(f"colo-agent: cannot read this host's cgroups: {exc}", file=sys.stderr)
        return 1
    if kube is not None:
        from agent.cluster import ClusterLink

        agent.services.append(ClusterLink(agent, kube))
    else:
        logging.getLogger("colo.agent").info("no cluster configuration: running standalone")
    host, port = config.listen_address(in_cluster)
    asyncio.run(serve(agent, host, port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
