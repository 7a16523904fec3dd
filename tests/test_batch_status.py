"""kubernetes.io/batch-* in node status, through the agent's publisher, the official client and the tests' API
server: the values, the hysteresis, 0 while evicting, removal when switched off. The pass is synthetic (a
snapshot the test builds, a clock it moves), so every step is a decision, not a race."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.batch_capacity import batch_requests
from agent.config import OversubscriptionConfig
from agent.node_state import node_state
from agent.oversubscription import OversubscriptionOwner
from agent.publisher import NodePublisher
from agent.resources import node_allocatable
from agent.snapshot import NodeSample, PodSample, Snapshot
from agent.view import AgentView
from agent.windows import WindowStore
from kube import Kube
from tests.test_batch_capacity import batch_meta, online, sample
from testsupport.k8sobjects import NODE, node
from testsupport.kubeapi.server import FakeKubeAPI

GI = 1 << 30
BATCH_CPU, BATCH_MEMORY = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"
ANN_CPU, ANN_MEMORY = "volcano.sh/oversubscription-cpu", "volcano.sh/oversubscription-memory"
LABEL = {"volcano.sh/oversubscription": "true"}


PER_POD = OversubscriptionConfig(
    predictor="pod_peaks", peak_window="max_avg_1h", cpu_reclaim_ratio=0.8, memory_reclaim_ratio=0.75
)


@dataclass
class Node:
    """One agent's publishing half over a synthetic pass: an online pod that reclaims 3 cores and 6 GiB, and
    a batch pod whose working set the test sets (memory above its 2 GiB request comes off the allocatable)."""

    kube: Kube
    api: FakeKubeAPI
    # the per-pod rule (before issue 20) publishes one number for both models: these tables are about publishing
    config: OversubscriptionConfig = field(default_factory=lambda: PER_POD)
    evicting: bool = False
    now: float = 10_000.0

    def __post_init__(self) -> None:
        self.view = AgentView(WindowStore(), 1.0, NODE)
        self.web = online("web", 4.0, 8 * GI, 1.0, 2 * GI)
        for i in range(600):
            self.view.windows.add(("pod", "web", "cpu"), self.now - 599 + i, 1.0)
            self.view.windows.add(("pod", "web", "memory"), self.now - 599 + i, float(2 * GI))
        self.owner = self._owner(self.config)
        self.batch_ws = 2 * GI

    def _owner(self, config: OversubscriptionConfig) -> OversubscriptionOwner:
        self.meta = batch_meta("spark", 1000, 2 * GI)
        return OversubscriptionOwner(self.view, config, evicting=lambda: self.evicting,
                                     batch_requests=lambda: batch_requests([self.meta]))  # fmt: skip

    def restart(self, config: OversubscriptionConfig) -> None:
        """The agent restarted with another configuration."""
        self.owner = self._owner(config)

    def node(self) -> dict[str, Any]:
        obj = self.api.get("nodes", None, NODE)
        assert obj is not None
        return obj

    def round(self, advance: float = 1.0) -> None:
        """One sampling pass and one publisher round, `advance` seconds after the last."""
        self.now += advance
        pods: list[PodSample] = [self.web, sample(self.meta, 0.5, self.batch_ws)]
        mem = sum(p.memory_working_set_bytes for p in pods) + GI
        snap = Snapshot(1, self.now, 0.0, NodeSample(16.0, 2.5, 64 * GI, mem, 0), {}, {p.uid: p for p in pods}, (), 0)
        obj = self.node()
        self.owner.on_state(node_state(snap, node_allocatable(obj)), obj)
        self.view.publish(snap)
        publisher = NodePublisher(self.kube, NODE, self.node, [self.owner], clock=lambda: self.now)
        assert publisher.run_once()

    def status_writes(self) -> int:
        """Status patches the API server has received so far."""
        return len(self.api.requests_for("PATCH", rf"/api/v1/nodes/{NODE}/status$"))

    def status(self) -> dict[str, dict[str, str]]:
        """The batch resources in status.capacity and status.allocatable."""
        st = self.node()["status"]
        return {
            f: {k: v for k, v in st[f].items() if k.startswith("kubernetes.io/")} for f in ("capacity", "allocatable")
        }

    def annotations(self) -> dict[str, str]:
        return {k: v for k, v in self.node()["metadata"]["annotations"].items() if k.startswith("volcano.sh/")}


def both(cpu: int, memory: int) -> dict[str, dict[str, str]]:
    values = {BATCH_CPU: str(cpu), BATCH_MEMORY: str(memory)}
    return {"capacity": values, "allocatable": dict(values)}


def test_status_carries_the_batch_allocatable_by_default(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("nodes", node(labels=LABEL))
    n = Node(kube, kube_api)
    n.round()
    assert n.status() == both(3000, 6 * GI)
    assert n.annotations() == {ANN_CPU: "3000", ANN_MEMORY: str(6 * GI)}
    st = n.node()["status"]
    assert st["capacity"]["cpu"] == "16" and st["allocatable"]["memory"] == "64Gi", "kubelet's values untouched"
    patches = kube_api.requests_for("PATCH", rf"/api/v1/nodes/{NODE}/status$")
    assert len(patches) == 1 and set(patches[0].body) == {"status"}
    batch = n.owner.section()["batch"]
    assert (batch["cpu"]["allocated"], batch["cpu"]["free"]) == (1000, 2000)
    assert (batch["memory"]["allocated"], batch["memory"]["free"]) == (2 * GI, 4 * GI)


def test_status_follows_the_hysteresis_of_the_annotations(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("nodes", node(labels=LABEL))
    n = Node(kube, kube_api)
    n.round()
    assert n.status() == both(3000, 6 * GI)
    n.batch_ws = 2 * GI + GI // 5  # 0.2 GiB above its request: memory allocatable -3.3%, within update_fraction
    n.round(advance=1.0)
    assert n.status() == both(3000, 6 * GI), "a small move waits for update_interval_seconds"
    n.round(advance=60.0)
    assert n.status() == both(3000, 6 * GI - GI // 5) and n.annotations()[ANN_MEMORY] == str(6 * GI - GI // 5)
    n.batch_ws = 4 * GI  # 2 GiB above: -33%, written at once
    n.round(advance=1.0)
    assert n.status() == both(3000, 4 * GI)
    writes = n.status_writes()
    n.round(advance=1.0)
    assert n.status_writes() == writes, "no change, no write"


def test_a_status_the_api_server_wrote_in_its_own_form_is_not_rewritten(kube: Kube, kube_api: FakeKubeAPI) -> None:
    """The API server serializes quantities canonically (3000 as '3k'): the same value, no new write."""
    kube_api.put("nodes", node(labels=LABEL))
    n = Node(kube, kube_api)
    n.round()
    obj = n.node()
    for f in ("capacity", "allocatable"):
        obj["status"][f][BATCH_CPU] = "3k"
    kube_api.put("nodes", obj)
    writes = n.status_writes()
    n.round()
    assert n.status_writes() == writes


def test_zero_at_once_while_evicting_then_back(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("nodes", node(labels=LABEL))
    n = Node(kube, kube_api)
    n.round()
    n.evicting = True
    n.round(advance=1.0)
    assert n.status() == both(0, 0) and n.annotations() == {ANN_CPU: "0", ANN_MEMORY: "0"}
    batch = n.owner.section()["batch"]
    assert batch["cpu"]["free"] == -1000, "the batch pod still holds its request: over-allocated"
    n.evicting = False
    n.round(advance=1.0)
    assert n.status() == both(3000, 6 * GI)


def test_removed_when_the_key_is_set_false(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("nodes", node(labels=LABEL))
    n = Node(kube, kube_api)
    n.round()
    assert n.status() == both(3000, 6 * GI)
    n.restart(PER_POD.model_copy(update={"extended_resources": False}))
    n.round()
    assert n.status() == {"capacity": {}, "allocatable": {}}
    assert n.annotations() == {ANN_CPU: "3000", ANN_MEMORY: str(6 * GI)}, "the annotations stay"
    assert n.owner.section()["extended_resources"] is False
    writes = n.status_writes()
    n.round()
    assert n.status_writes() == writes, "removed once"


def test_removed_with_the_annotations_when_the_label_goes(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("nodes", node(labels=LABEL))
    n = Node(kube, kube_api)
    n.round()
    obj = n.node()
    obj["metadata"]["labels"] = {}
    kube_api.put("nodes", obj)
    n.round()
    assert n.status() == {"capacity": {}, "allocatable": {}} and n.annotations() == {}
    st = n.node()["status"]
    assert st["capacity"] == {"cpu": "16", "memory": "64Gi"} == st["allocatable"]


def test_zero_at_shutdown(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("nodes", node(labels=LABEL))
    n = Node(kube, kube_api)
    n.round()
    n.owner.withdraw()
    n.round()
    assert n.status() == both(0, 0) and n.annotations() == {ANN_CPU: "0", ANN_MEMORY: "0"}
