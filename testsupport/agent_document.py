"""The agent's real `/api/v1/node` document, built by the agent's own code, for simulated agents.

`agent_view` runs a node with an online and an offline pod for 400 one-second ticks through a real
WindowStore and AgentView, with the sections a cluster agent attaches (a real OversubscriptionOwner on a
labelled Node, a real Enforcer's and Evictor's state); `node_document` is then exactly what
`exporter.api` serves for it. The controller's tests and benchmark answer with this document (its window
values set to what a test needs), never with a hand-made one, so a field the agent renames breaks them.
"""

from __future__ import annotations

import functools
import json
import tempfile
from collections.abc import Mapping
from typing import Any, cast

from agent.capacity.owner import OversubscriptionOwner
from agent.config_sections.enforcement import EnforcementConfig, EvictionConfig
from agent.config_sections.lending import OversubscriptionConfig
from agent.enforce import qos_report
from agent.enforce.stage import Enforcer
from agent.evict.evictor import Evictor
from agent.node_state import node_state
from agent.snapshot import (
    ContainerSample,
    InterfaceSample,
    NodeSample,
    PodMeta,
    PodSample,
    Pressure,
    Snapshot,
    TierSample,
)
from agent.view import AgentView
from agent.windows.store import WindowStore, online_key, system_key
from cgroup import CgroupReader, CgroupWriter, Layout, PathModel
from cgroup.layout import Mount
from contract.annotations import OVERSUBSCRIPTION_LABEL
from contract.windows import NODE_WINDOW_KEYS
from exporter.api import node_document, pods_document
from exporter.stats import WindowStatsCache
from kube import Kube
from kube.resources import node_allocatable
from testsupport.strategies import default_strategies

CPU_CORES = 8.0
MEMORY_BYTES = 16 << 30
TICKS = 400


def node_object(name: str) -> dict[str, Any]:
    """The Node the agent's oversubscription owner sees: labelled, 8 cores and 16 GiB allocatable."""
    return {
        "metadata": {"name": name, "labels": {OVERSUBSCRIPTION_LABEL: "true"}, "annotations": {}},
        "status": {"allocatable": {"cpu": "8", "memory": "16Gi"}},
    }


def _pod(uid: str, cls: str, qos: str, cpu: float, ws: int, request: tuple[float, int]) -> PodSample:
    containers = tuple(
        ContainerSample(f"{uid}-c{i}", f"/kubepods/pod{uid}/c{i}", cpu / 2, ws // 2, ws // 4, ws // 2, 0.1)
        for i in range(2)
    )
    meta = PodMeta(
        uid, "team-a", f"pod-{uid}", cast(Any, cls), {}, cpu_request_cores=request[0], memory_request_bytes=request[1]
    )
    pressure = {"cpu": Pressure(0.1, 0.05), "memory": Pressure(0.0, 0.0)}
    return PodSample(meta, qos, f"/kubepods/pod{uid}", cpu, ws, ws // 2, ws + 10, 100, 0.1, containers, pressure)


def agent_view(
    name: str = "node-a", cpu_ratio: float = 0.25, memory_ratio: float = 0.3125, *, oversubscribed: bool = True
) -> AgentView:
    """A view after TICKS one-second samples at constant node usage, with the cluster agent's sections (on a
    Node labelled for oversubscription unless `oversubscribed` is false)."""
    view = AgentView(WindowStore(), interval=1.0, node_name=name)
    used = int(MEMORY_BYTES * memory_ratio)
    for i in range(TICKS):
        pods = [
            _pod("u1", "online", "Burstable", 1.0, 2 << 30, (4.0, 4 << 30)),
            _pod("u2", "offline", "BestEffort", 0.5, 1 << 30, (0.0, 0)),
        ]
        node = NodeSample(CPU_CORES, CPU_CORES * cpu_ratio, MEMORY_BYTES, used, 1 << 30,
                          {"cpu": Pressure(0.2, None), "io": Pressure(0.1, 0.05)})  # fmt: skip
        snap = Snapshot(
            seq=i + 1, mono=1000.0 + i, wall=1.7e9 + i, node=node,
            tiers={"burstable": TierSample("burstable", "/kubepods/burstable", 1.0, 2 << 30)},
            pods={p.uid: p for p in pods},
            interfaces=(InterfaceSample("eth0", True, 1e3, 2e3), InterfaceSample("veth1", False, 1.0, 1.0)),
            duration_seconds=0.01,
        )  # fmt: skip
        samples = [(("node", "", "cpu"), cpu_ratio), (("node", "", "memory"), used / MEMORY_BYTES)]
        for p in pods:
            samples.append((("pod", p.uid, "cpu"), p.cpu_cores or 0.0))
            samples.append((("pod", p.uid, "memory"), float(p.memory_working_set_bytes)))
        # the capacity predictor's node series, as the sampler feeds them (agent.capacity.lendable)
        online = [p for p in pods if p.meta.pod_class != "offline"]
        cpu = {p.uid: p.cpu_cores or 0.0 for p in pods}
        mem = {p.uid: float(p.memory_working_set_bytes) for p in pods}
        samples += [(online_key("cpu"), sum(cpu[p.uid] for p in online)),
                    (online_key("memory"), sum(mem[p.uid] for p in online)),
                    (system_key("cpu"), max(0.0, (node.cpu_cores or 0.0) - sum(cpu.values()))),
                    (system_key("memory"), max(0.0, used - sum(mem.values())))]  # fmt: skip
        with view.windows_lock:
            view.windows.add_many(snap.mono, samples)
        view.publish(snap)
    _attach_cluster_sections(view, name, oversubscribed)
    return view


def _attach_cluster_sections(view: AgentView, name: str, oversubscribed: bool) -> None:
    """What agent.pipeline.ClusterPipeline attaches: capacity, enforcement and eviction state (nothing is written:
    the owner only computes, the enforcer and the evictor are never run against cgroups)."""
    node = node_object(name)
    if not oversubscribed:
        node["metadata"]["labels"] = {}
    snap = view.snapshot
    assert snap is not None
    owner = OversubscriptionOwner(view, OversubscriptionConfig(min_history_seconds=0))
    owner.on_state(node_state(snap, node_allocatable(node)), node)  # capacity: a stage of the pass
    owner.desired(node, snap.mono)
    layout = Layout("v2", {}, Mount(tempfile.gettempdir()))
    chosen = default_strategies(layout, PathModel("systemd", "/"), EnforcementConfig())
    enforcer = Enforcer(layout, PathModel("systemd", "/"), CgroupReader(layout), EnforcementConfig(ledger_file=""),
                        lambda: (CPU_CORES, MEMORY_BYTES), dry_run=True, registered=chosen)  # fmt: skip
    evictor = Evictor(cast(Kube, None), name, lambda: node, CgroupWriter(layout), EvictionConfig(),
                      api_healthy=lambda: True, dry_run=True)  # fmt: skip
    view.node_sections["oversubscription"] = owner.section
    view.node_sections["enforcement"] = lambda: {**enforcer.section(), "eviction": evictor.section()}
    view.node_sections["qos"] = lambda: qos_report.section(enforcer)


@functools.cache
def _template(oversubscribed: bool) -> str:
    view = agent_view("node-a", oversubscribed=oversubscribed)
    snap = view.snapshot
    assert snap is not None
    return json.dumps(node_document(view, snap, WindowStatsCache(view)), allow_nan=False)


def real_node_document(
    node: str | None = "node-a",
    usage: float | Mapping[str, float | None] | None = None,
    *,
    oversubscription: tuple[int, int] | None = None,
    oversubscribed: bool = True,
) -> dict[str, Any]:
    """The agent's document for `node` (`node_name` null: None), with every crane window set to `usage` (or
    per key from a mapping, absent keys null) and, if given, the published (cpu millicores, memory bytes);
    `oversubscribed=False`: the Node is not labelled, the agent publishes nothing."""
    doc: dict[str, Any] = json.loads(_template(oversubscribed))
    doc["node_name"] = node
    if usage is not None:
        per = usage if isinstance(usage, Mapping) else dict.fromkeys(NODE_WINDOW_KEYS, usage)
        for key in NODE_WINDOW_KEYS:
            doc["windows"][key]["value"] = per.get(key)
    if oversubscription is not None and oversubscribed:
        doc["oversubscription"]["cpu_millicores"], doc["oversubscription"]["memory_bytes"] = oversubscription
    return doc


def real_pods_document(name: str = "node-a") -> list[dict[str, Any]]:
    """The agent's /api/v1/pods document for the same view."""
    view = agent_view(name)
    snap = view.snapshot
    assert snap is not None
    return pods_document(view, snap, WindowStatsCache(view))
