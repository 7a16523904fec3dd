"""The agent's composition root: `build_agent` builds every part of the agent in dependency order, each given
what it needs. The `colo-agent` program (colo_agent/main.py) calls it and serves the result through the
exporter; nothing here imports the exporter (which reads the agent's types)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from agent.config import AgentConfig, ConfigError
from cgroup import Layout

if TYPE_CHECKING:
    from agent.pipeline import ClusterPipeline
    from agent.runtime import Agent, Host
    from agent.view import AgentView, MetricSource
    from cgroup import CgroupReader
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
    from agent.sense.pace import PassNeeds, pace
    from agent.sense.sampler import CgroupPodSource, PodSource, Sampler
    from agent.view import AgentView
    from cgroup import CgroupReader

    host = Host.detect(config, layout)
    windows = load_windows_for(config, host.node_name)
    view = AgentView(windows, config.interval, host.node_name)
    reader = CgroupReader(host.layout)
    own = {"process": process_metrics()}
    source: PodSource
    needs = PassNeeds()
    if kube is not None:
        pipeline = build_cluster_pipeline(
            config, host, view, reader, kube, backoff_initial=backoff_initial, backoff_max=backoff_max
        )
        source, stages, services = pipeline.cluster.source, [pipeline.stage], [pipeline]
        needs = pipeline.enforcer.reads
        view.install(
            node_sections=pipeline.node_sections(),
            metric_sources={**pipeline.metric_sources(), **own},
            cluster_synced=pipeline.cluster.pods.synced.is_set,
        )
    else:
        source, stages, services = CgroupPodSource(host.layout, host.model, config.discovery_seconds), [], []
        # the JSON contract has these keys everywhere
        standalone = {"enabled": False, "reason": "standalone: no cluster, nothing published or enforced"}
        view.install(
            node_sections={
                "oversubscription": lambda: dict(standalone),
                "enforcement": lambda: dict(standalone),
                "qos": lambda: dict(standalone),
            },
            metric_sources=own,
        )
    # the sampler's pace follows what the active strategies read each pass (their registrations say)
    every = pace(needs, windows.max_gap, config.interval)
    sampler = Sampler(
        host.layout,
        host.model,
        source,
        windows,
        host_root=config.host_root,
        reader=reader,
        container_stat_every=config.container_memory_detail_every,
        container_every=every.container_every,
        online_every=every.online_every,
        collectors=config.collectors.enabled(),
        pod_memory_limits=needs.pod_memory_limits,
    )
    return Agent(
        config, host, windows, view, reader, sampler, stages=stages, services=services, in_cluster=kube is not None
    )


def build_cluster_pipeline(
    config: AgentConfig,
    host: Host,
    view: AgentView,
    reader: CgroupReader,
    kube: Kube,
    *,
    backoff_initial: float,
    backoff_max: float,
) -> ClusterPipeline:
    """The cluster-mode stages, each built after what it reads: the API side, eviction, capacity (which reads
    eviction's state and watermarks), enforcement, and the Node's one writer over both owners."""
    from agent.capacity.owner import OversubscriptionOwner, oversubscription_enabled
    from agent.cluster.link import ClusterLink
    from agent.cluster.node_writer import NodePublisher
    from agent.enforce.stage import Enforcer, detect_facts
    from agent.enforce.strategies.registry import strategies
    from agent.evict.evictor import Evictor
    from agent.node_state import StateBuilder
    from agent.pipeline import ClusterPipeline
    from cgroup import CgroupWriter
    from kube.resources import node_allocatable

    enf, node = config.enforcement, host.node_name
    cluster = ClusterLink(config, host, kube, backoff_initial=backoff_initial, backoff_max=backoff_max)
    wake = threading.Event()  # the publisher's: set when the evicting state changes, a round runs now
    evictor = Evictor(
        kube,
        node,
        cluster.node_object,
        CgroupWriter(host.layout, reader),
        enf.eviction,
        api_healthy=cluster.api_healthy,
        health=cluster.health,
        oversubscribed=partial(
            oversubscription_enabled, enabled_on_all_nodes=config.oversubscription.enabled_on_all_nodes
        ),
        on_state_change=wake.set,
        dry_run=config.dry_run,
    )
    owner = OversubscriptionOwner(
        view,
        config.oversubscription,
        evicting=evictor.is_evicting,
        batch_requests=cluster.batch_requests,
        high_watermarks=lambda: evictor.watermarks.high,
    )
    # the downward API names the agent's own pod (the DaemonSet's POD_UID), which no strategy judges as a service
    facts = replace(detect_facts(host.layout, host.model, reader), own_pod_uid=os.environ.get("POD_UID", ""))
    enforcer = Enforcer(
        host.layout,
        host.model,
        reader,
        enf,
        lambda: node_allocatable(cluster.node_object() or {}),
        dry_run=config.dry_run,
        host_root=config.host_root,
        memory_high_watermark=lambda: float(evictor.watermarks.high["memory"]),
        registered=strategies(config, facts),  # one list, built once
        facts=facts,
    )
    if enforcer.ledger.problem:
        evictor.node_event("EnforcementLedgerCorrupt", enforcer.ledger.problem)
    publisher = NodePublisher(
        kube,
        node,
        cluster.node_object,
        [owner, evictor],
        period=config.interval,
        backoff_max=backoff_max,
        dry_run=config.dry_run,
        health=cluster.health,
        wake=wake,
    )
    return ClusterPipeline(cluster, owner, evictor, enforcer, publisher, StateBuilder(enf.eviction.smoothing_seconds))
