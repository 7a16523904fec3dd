"""/metrics on a fixed snapshot, against the bytes today's exporter renders for it (tests/golden/).

The snapshot and its windows are built from constants only (no clock, no host), so a render is deterministic:
a family renamed, reordered, re-labelled or re-documented changes the bytes. A family may be added; then
`COLO_UPDATE_GOLDEN=1` rewrites the files and the diff shows only additions.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.snapshot import (
    CollectorRun,
    ContainerSample,
    InterfaceSample,
    NetworkRates,
    NodeSample,
    PodMeta,
    PodSample,
    Pressure,
    Snapshot,
    TierSample,
)
from agent.view import AgentView
from agent.windows.store import SeriesKey, WindowStore
from exporter.encoding import Rendered
from exporter.snapshot_metrics import ColoCollector

GOLDEN = Path(__file__).resolve().parent / "golden"
TICKS = 120


def _pod(uid: str, ns: str | None, qos: str, cls: str, cpu: float | None, ws: int, containers: int) -> PodSample:
    labels = {"quota.scheduling.koordinator.sh/name": "team-q"} if ns == "prod" else {}
    meta = PodMeta(uid, ns, None if ns is None else f"pod-{uid}", cls, labels)  # type: ignore[arg-type]
    cs = tuple(
        ContainerSample(f"{uid}-c{i}", f"/kubepods/pod{uid}/c{i}", None if cpu is None else cpu / (i + 2),
                        ws // (i + 2), ws // 4, ws // 2, 0.25 if i == 0 else None)
        for i in range(containers)
    )  # fmt: skip
    pressure = {"cpu": Pressure(0.125, None), "memory": Pressure(0.0, 0.0)} if qos != "BestEffort" else {}
    sample = PodSample(meta, qos, f"/kubepods/pod{uid}", cpu, ws, ws // 2, ws + 10, 100, 0.5, cs, pressure)
    if cls == "offline":  # collectors.pod_network (off by default) read it
        sample.network = NetworkRates(1.5e3, 2.5e5)
    return sample


def fixed_view() -> tuple[AgentView, Snapshot]:
    """A node with a standalone pod, two namespaces (one pod with a koordinator quota label), containers,
    pressure, tiers, a physical and a virtual interface, every collector's run, and TICKS samples of windows."""
    view = AgentView(WindowStore(), interval=1.0, node_name="node-golden")
    pods = [
        _pod("u1", "prod", "Guaranteed", "online", 1.5, 2 << 30, 2),
        _pod("u2", "batch", "BestEffort", "offline", 0.75, 1 << 30, 1),
        _pod("u3", None, "Burstable", "online", None, 3 << 20, 0),
        _pod("u4", "prod", "burstable", "online", 0.25, 5 << 20, 1),
    ]
    node = NodeSample(8.0, 2.5, 16 << 30, 5 << 30, 1 << 30,
                      {"cpu": Pressure(0.2, None), "io": Pressure(0.1, 0.05)})  # fmt: skip
    tiers = {
        "guaranteed": TierSample("guaranteed", "/kubepods", 1.5, 2 << 30),
        "burstable": TierSample("burstable", "/kubepods/burstable", 0.25, 8 << 20),
        "besteffort": TierSample("besteffort", "/kubepods/besteffort", None, 1 << 30),
    }
    runs = tuple(
        CollectorRun(name, name != "psi", 0.001 * (i + 1))
        for i, name in enumerate(("node", "tiers", "pods", "containers", "psi", "network", "pod_network"))
    )
    snap = Snapshot(0, 0.0, 0.0, node, {}, {}, (), 0.0)
    for i in range(TICKS):
        snap = Snapshot(
            seq=i + 1, mono=1000.0 + i, wall=1.7e9 + i, node=node, tiers=tiers, pods={p.uid: p for p in pods},
            interfaces=(InterfaceSample("eth0", True, 1e3, 2.5e3), InterfaceSample("veth1", False, 1.0, 1.0)),
            duration_seconds=0.0125, collectors=runs,
        )  # fmt: skip
        samples: list[tuple[SeriesKey, float]] = [(("node", "", "cpu"), 0.25 + (i % 7) / 100),
                                                  (("node", "", "memory"), 0.3125)]  # fmt: skip
        for p in pods:
            if p.cpu_cores is not None:
                samples.append((("pod", p.uid, "cpu"), p.cpu_cores + (i % 5) / 8))
            samples.append((("pod", p.uid, "memory"), float(p.memory_working_set_bytes)))
        with view.windows_lock:
            view.windows.add_many(snap.mono, samples)
        view.publish(snap)
    return view, snap


def render(openmetrics: bool) -> bytes:
    view, snap = fixed_view()
    collector = ColoCollector(view)
    collector.render_seconds = 0.0075
    return Rendered(snap.seq, snap.mono, collector.collect_snapshot(snap)).encode(openmetrics)


@pytest.mark.parametrize(("openmetrics", "name"), [(False, "metrics.txt"), (True, "metrics.openmetrics.txt")])
def test_metrics_are_byte_identical_to_the_golden_render(openmetrics: bool, name: str) -> None:
    body = render(openmetrics)
    path = GOLDEN / name
    if os.environ.get("COLO_UPDATE_GOLDEN") == "1":
        path.write_bytes(body)
    assert body == path.read_bytes()


def test_the_render_is_deterministic() -> None:
    assert render(False) == render(False)
