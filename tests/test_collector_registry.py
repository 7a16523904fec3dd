"""A new collector needs no line in the sampler, the exporter, the JSON API or the doc generator: this test
declares one (each pod's memory limit as its cgroup holds it, into `PodSample.memory_limit_bytes`, which the
pods collector leaves empty while memory QoS does not ask for it), with its family, its pod field and its
unit, registers it, takes real passes over a v1 tree and serves them: /metrics has its series, /api/v1/pods
its field, /api/v1/units its unit, and the reference pages' renderer its family. Nothing else in the agent
knows it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from starlette.testclient import TestClient

from agent.sense.collectors import enabled_from, names
from agent.sense.collectors.context import CollectorDeps, PassContext
from agent.sense.collectors.registry import KeepsNothing, in_metrics_order, register, unregister
from agent.sense.sampler import CgroupPodSource, Sampler
from agent.snapshot import PodSample
from agent.view import AgentView
from agent.windows.store import WindowStore
from cgroup import CgroupWriter
from common.exposition import LabelShapes
from common.families import Family, FamilyLines, PutLine
from exporter.app import close_app, create_app
from testsupport.cgtree import V1Tree

NAME = "memory_limit"
LIMIT = Family("colo_test_pod_memory_limit_bytes", "The pod cgroup's memory limit (a collector declared by a test).")
MI = 1 << 20


# -- the collector: one module's worth --------------------------------------------------------------------
class MemoryLimitCollector(KeepsNothing):
    def __init__(self, deps: CollectorDeps) -> None:
        self.reader = deps.reader

    def collect(self, ctx: PassContext) -> int | None:
        assert ctx.pod is not None
        return self.reader.memory_limit(ctx.pod.path)


def store(sample: PodSample, part: int | None) -> None:
    sample.memory_limit_bytes = part


def series(put: PutLine, lines: Sequence[FamilyLines], labels: LabelShapes, pod: PodSample) -> None:
    (limit,) = lines
    put(limit, labels.base, pod.memory_limit_bytes)


def fields(pod: PodSample) -> Mapping[str, Any]:
    return {"memory_limit_bytes": pod.memory_limit_bytes}


@pytest.fixture
def registered() -> Iterator[None]:
    register(
        NAME,
        False,
        MemoryLimitCollector,
        store=store,
        order=57,
        scope="pod",
        families=(LIMIT,),
        pod_series=series,
        pod_fields=fields,
        units={"memory_limit_bytes": "bytes"},
        example=256 * MI,
        what="Each pod cgroup's memory limit.",
    )
    try:
        yield
    finally:
        unregister(NAME)


@pytest.mark.cgroupv1
@pytest.mark.usefixtures("registered")
def test_a_registered_collector_is_sampled_served_and_documented_by_the_generic_machinery(
    v1tree_cgroupfs: V1Tree,
) -> None:
    tree = v1tree_cgroupfs
    limited_uid, limited, _ = tree.pod("burstable")
    free_uid, _, _ = tree.pod("besteffort")
    CgroupWriter(tree.layout).set_memory_limit(limited, 256 * MI)
    view = AgentView(WindowStore(), interval=1.0, node_name="node-a")
    source = CgroupPodSource(tree.layout, tree.model, 1e9)
    sampler = Sampler(
        tree.layout, tree.model, source, view.windows, collectors=enabled_from({}) | {NAME}, pod_memory_limits=False
    )
    app = create_app(view)
    try:
        sampler.sample()
        snap = sampler.sample()
        view.publish(snap)
        # sampled: its part in each pod's sample, through its store, timed like every collector
        assert snap.pods[limited_uid].memory_limit_bytes == 256 * MI
        assert snap.pods[free_uid].memory_limit_bytes is None  # unlimited
        assert {r.name: r.success for r in snap.collectors}[NAME] is True
        with TestClient(app) as client:
            # served: its family in /metrics, a sample for the limited pod, none for the unlimited one
            text = client.get("/metrics").text
            mine = [line for line in text.splitlines() if LIMIT.name in line]
            assert mine[:2] == [f"# HELP {LIMIT.name} {LIMIT.help}", f"# TYPE {LIMIT.name} gauge"]
            assert len(mine) == 3 and f'uid="{limited_uid}"' in mine[2]
            assert float(mine[2].rsplit(" ", 1)[1]) == 256 * MI
            # its field in each pod's entry, its unit in /api/v1/units
            pods = {p["uid"]: p for p in client.get("/api/v1/pods").json()}
            assert pods[limited_uid]["memory_limit_bytes"] == 256 * MI and pods[free_uid]["memory_limit_bytes"] is None
            assert client.get("/api/v1/units").json()["pods"]["memory_limit_bytes"] == "bytes"
    finally:
        close_app(app)
        sampler.close()
    # documented: the reference pages render its family from its example
    from tools.docgen import agent_families

    assert LIMIT.name in {fam.name for fam in agent_families()}


def test_every_declared_family_is_in_the_reference() -> None:
    """Each collector's families come from its registration, and docs/reference/metrics.md shows them all (a
    collector off by default shows through its `example`)."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "reference" / "metrics.md").read_text(encoding="utf-8")
    declared = [fam.name for spec in in_metrics_order() for fam in spec.families]
    assert len(declared) == len(set(declared)) > 20
    assert [name for name in declared if f"`{name}`" not in page] == []


def test_a_registration_says_where_its_part_goes() -> None:
    """A node collector names a Snapshot field; a pod collector stores through a function (typed, checked by
    mypy), never a field named by a string."""
    with pytest.raises(ValueError, match="must name a Snapshot field"):
        register("gpu", True, MemoryLimitCollector, fills="gpu", order=97)
    with pytest.raises(ValueError, match="through store="):
        register("gpu", True, MemoryLimitCollector, fills="memory_limit_bytes", order=97, scope="pod")
    with pytest.raises(ValueError, match="no declared family"):
        register("gpu", True, MemoryLimitCollector, store=store, order=97, scope="pod", pod_series=series)
    assert "gpu" not in names()
