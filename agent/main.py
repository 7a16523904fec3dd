"""The agent's composition root: `build_agent` builds every part of the agent in dependency order, each given
what it needs. The `colo-agent` program (colo_agent/main.py) calls it and serves the result through the
exporter; nothing here imports the exporter (which reads the agent's types)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from agent.config import AgentConfig, ConfigError
from cgroup import Layout

if TYPE_CHECKING:
    from agent.runtime import Agent
    from agent.view import MetricSource
    from kube import Kube

log = logging.getLogger("colo.agent")


def wants_cluster(standalone: bool, kubeconfig: str | None) -> bool:
    """A kubeconfig was given, or we run in a pod (the in-cluster service environment is set)."""
    return not standalone and bool(kubeconfig or os.environ.get("KUBERNETES_SERVICE_HOST"))


def settle_state_file(
    config: AgentConfig, in_pod: bool, env: Mapping[str, str], origin: Callable[[], str]
) -> AgentConfig:
    """`config` with its state file decided (agent/config.py `state_file`). The per-user default directory
    is made (private, as XDG asks); a directory the user named is never made: a missing one is a
    ConfigError naming where the path came from (`origin()`)."""
    path = config.state_file_in(in_pod, env)
    if path and config.state_file is None and not in_pod:
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"state directory {os.path.dirname(path)}: {exc.strerror or exc}") from None
    elif path and config.state_file is not None:
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise ConfigError(
                f"{origin()}: {path}: directory {parent} does not exist (Colo makes no directory you did not "
                "name: create it, or give '' to keep no state)"
            )
    if path:
        log.info("window state: %s (read at start, saved every %gs and at stop)", path, config.state_save_seconds)
    return config.model_copy(update={"state_file": path})


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
    from common.buildinfo import build_info
    from common.process import OwnProcess

    process = OwnProcess()
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
    from agent.sense.collectors.containers import CONTAINER_EVERY
    from agent.sense.collectors.pods import ONLINE_POD_EVERY
    from agent.sense.sampler import CgroupPodSource, PodSource, Sampler
    from agent.view import AgentView
    from cgroup import CgroupReader

    host = Host.detect(config, layout)
    windows = load_windows_for(config, host.node_name)
    view = AgentView(windows, config.interval, host.node_name)
    reader = CgroupReader(host.layout)
    own = {"process": process_metrics()}
    source: PodSource
    if kube is not None:
        from agent.cluster.link import ClusterLink
        from agent.enforce.stage import detect_facts
        from agent.enforce.strategies.registry import strategies

        facts = detect_facts(host.layout, host.model, reader)
        registered = strategies(config, facts)  # one list, built once
        link = ClusterLink(config, host, view, reader, kube, registered=registered, facts=facts,
                           backoff_initial=backoff_initial, backoff_max=backoff_max)  # fmt: skip
        source, stages, services = link.source, [link.stage], [link]
        view.install(node_sections=link.node_sections(), metric_sources={**link.metric_sources(), **own},
                     cluster_synced=link.pods.synced.is_set)  # fmt: skip
    else:
        source, stages, services = CgroupPodSource(host.layout, host.model, config.discovery_seconds), [], []
        # the JSON contract has these keys everywhere
        standalone = {"enabled": False, "reason": "standalone: no cluster, nothing published or enforced"}
        view.install(node_sections={"oversubscription": lambda: dict(standalone),
                                    "enforcement": lambda: dict(standalone), "qos": lambda: dict(standalone)},
                     metric_sources=own)  # fmt: skip
    sampler = Sampler(
        host.layout, host.model, source, windows, host_root=config.host_root, reader=reader,
        container_stat_every=config.container_memory_detail_every,
        # containers are read every pass only while quota burst decides on them each second
        container_every=1 if kube is not None and config.qos.quota_burst.enabled else CONTAINER_EVERY,
        # online pods are read every pass only while a 1 s decision reads them one by one: quota burst (their
        # throttling) and the disk QoS (their I/O); otherwise the kubepods root gives their sum each pass, and
        # their own readings come no further apart than the windows' max gap (no hole in their windows)
        online_every=1 if kube is not None and (config.qos.quota_burst.enabled or config.enforcement.disk.enabled)
        else max(1, min(ONLINE_POD_EVERY, int(windows.max_gap / config.interval))),
        collectors=config.collectors.enabled(),
        # memory QoS (v2, in a cluster) is what reads pods' memory limits from the sample
        pod_memory_limits=kube is not None and host.layout.is_v2 and config.qos.memory.enabled,
    )  # fmt: skip
    return Agent(config, host, windows, view, reader, sampler, stages=stages, services=services,
                 in_cluster=kube is not None)  # fmt: skip
