"""Builders shared by the exporter tests: snapshots from agent.snapshot's dataclasses, a real WindowStore.

(No tests here; the name keeps it among the exporter's test files.)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

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
from agent.windows.store import WindowStore

QUOTA = "quota.scheduling.koordinator.sh/name"


def container(
    cid: str, cpu: float | None = 0.1, ws: int = 100, anon: int = 60, thr: float | None = 0.05
) -> ContainerSample:
    return ContainerSample(
        id=cid,
        cgroup=f"/kubepods/{cid}",
        cpu_cores=cpu,
        memory_working_set_bytes=ws,
        memory_anon_bytes=anon,
        memory_usage_bytes=ws + 10,
        cpu_throttled_ratio=thr,
    )


def pod(
    uid: str,
    namespace: str | None = "default",
    name: str | None = None,
    *,
    qos: str = "Burstable",
    pod_class: str = "online",
    cpu: float | None = 0.5,
    ws: int = 1000,
    anon: int = 600,
    throttled: float | None = 0.1,
    labels: dict[str, str] | None = None,
    containers: tuple[ContainerSample, ...] | None = None,
    pressure: dict[str, Pressure] | None = None,
) -> PodSample:
    meta = PodMeta(
        uid=uid,
        namespace=namespace,
        name=name if name is not None or namespace is None else f"pod-{uid}",
        pod_class=pod_class,  # type: ignore[arg-type]
        labels=labels or {},
    )
    return PodSample(
        meta=meta,
        qos=qos,
        cgroup=f"/kubepods/pod{uid}",
        cpu_cores=cpu,
        memory_working_set_bytes=ws,
        memory_anon_bytes=anon,
        memory_usage_bytes=ws + 100,
        memory_file_bytes=50,
        cpu_throttled_ratio=throttled,
        containers=containers if containers is not None else (container(f"{uid}-c0"), container(f"{uid}-c1")),
        pressure=pressure if pressure is not None else {"cpu": Pressure(0.25, 0.125), "memory": Pressure(0.0, None)},
    )


def node_sample(cpu: float | None = 2.0, used: int = 4 << 30) -> NodeSample:
    return NodeSample(
        cpu_capacity_cores=8.0,
        cpu_cores=cpu,
        memory_total_bytes=16 << 30,
        memory_used_bytes=used,
        memory_page_cache_bytes=1 << 30,
        pressure={"cpu": Pressure(0.5, None), "io": Pressure(0.25, 0.125)},
    )


def snapshot(seq: int, mono: float, pods: list[PodSample], node: NodeSample | None = None) -> Snapshot:
    return Snapshot(
        seq=seq,
        mono=mono,
        wall=1_700_000_000.0 + seq,
        node=node or node_sample(),
        tiers={
            "burstable": TierSample("burstable", "/kubepods/burstable", 1.5, 2000),
            "besteffort": TierSample("besteffort", "/kubepods/besteffort", None, 500),
        },
        pods={p.uid: p for p in pods},
        interfaces=(
            InterfaceSample("eth0", True, 1000.0, 2000.0),
            InterfaceSample("eth1", True, 10.0, 20.0),
            InterfaceSample("cni0", False, 5.0, 5.0),
        ),
        duration_seconds=0.0125,
    )


def make_view(interval: float = 1.0, node_name: str | None = "node-a") -> AgentView:
    return AgentView(WindowStore(), interval=interval, node_name=node_name)


def feed(view: AgentView, snap: Snapshot, *, publish: bool = True) -> None:
    """What the sampler does per tick: add the node and pod samples to the windows, then publish."""
    samples = []
    if snap.node.cpu_usage_ratio is not None:
        samples.append((("node", "", "cpu"), snap.node.cpu_usage_ratio))
    samples.append((("node", "", "memory"), snap.node.memory_usage_ratio))
    for p in snap.pods.values():
        if p.cpu_cores is not None:
            samples.append((("pod", p.uid, "cpu"), p.cpu_cores))
        samples.append((("pod", p.uid, "memory"), float(p.memory_working_set_bytes)))
    with view.windows_lock:
        view.windows.add_many(snap.mono, samples)
    if publish:
        view.publish(snap)


@dataclass
class Clock:
    """A monotonic clock the test moves by hand."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Parsed:
    """Samples of a text exposition: name -> list of (labels, value)."""

    samples: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)

    def values(self, name: str) -> list[float]:
        return [v for _, v in self.samples.get(name, [])]

    def one(self, name: str, **labels: str) -> float:
        found = [v for lab, v in self.samples.get(name, []) if all(lab.get(k) == x for k, x in labels.items())]
        assert len(found) == 1, (name, labels, found)
        return found[0]

    def label_sets(self, name: str) -> list[dict[str, str]]:
        return [lab for lab, _ in self.samples.get(name, [])]


def parse(text: str) -> Parsed:
    """Parse with prometheus-client's parser (raises on invalid exposition)."""
    out = Parsed()
    for fam in text_string_to_metric_families(text):
        out.types[fam.name] = fam.type
        for s in fam.samples:
            out.samples.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.005)


def ticks(start: float, n: int, step: float = 1.0) -> Iterator[float]:
    return (start + i * step for i in range(n))
