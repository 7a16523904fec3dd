"""kubelet re-admits every running pod when it restarts, against status.allocatable: each pod's requests must fit
in the allocatable minus the requests of the pods admitted before it (the scheduler framework's
`noderesources` fit, which kubelet runs in its admission). `kubernetes.io/batch-*` are prefixed-native
scalar resources: kubelet does not drop them from a pod when the node lacks them (it does so only for
extended resources proper), so a missing one counts as 0 and the pod is rejected ("OutOfkubernetes.io/
batch-cpu") and killed.

Every state the agent can be in is driven through its publishing path (a synthetic pass, the publisher, the
official client, the tests' API server); then the node's published status is run through that arithmetic.
The promise (issue 22): every running batch pod is re-admitted, in every state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from agent.capacity.owner import OversubscriptionOwner
from agent.cluster.node_writer import NodePublisher
from agent.config_sections.lending import OversubscriptionConfig
from agent.node_state import BatchRequests, batch_requests
from agent.snapshot import PodMeta
from kube import Kube
from kube.quantity import parse_quantity
from tests.test_batch_capacity import batch_meta
from tests.test_batch_status import LABEL, Node
from testsupport.k8sobjects import NODE, node
from testsupport.kubeapi.server import FakeKubeAPI

GI = 1 << 30
BATCH = ("kubernetes.io/batch-cpu", "kubernetes.io/batch-memory")


def kubelet_admits(allocatable: dict[str, int], pods: list[dict[str, int]]) -> list[bool]:
    """kubelet's admission at its restart, pod by pod in order: a pod is admitted when each resource it
    requests (> 0) fits in allocatable − Σ requests of the pods admitted before it; a rejected pod adds
    nothing. A resource the node does not advertise counts as 0."""
    used: dict[str, int] = {}
    out = []
    for requests in pods:
        fits = all(q <= allocatable.get(r, 0) - used.get(r, 0) for r, q in requests.items() if q > 0)
        if fits:
            for r, q in requests.items():
                used[r] = used.get(r, 0) + q
        out.append(fits)
    return out


def requests_of(meta: PodMeta) -> dict[str, int]:
    assert meta.batch is not None
    return {BATCH[0]: meta.batch.cpu_request_milli, BATCH[1]: meta.batch.memory_request_bytes}


@dataclass
class Kubelet(Node):
    """The agent's publishing half with two batch pods on the node: spark runs (it has a cgroup), flink is
    bound and starting (no cgroup yet; the scheduler and kubelet count it all the same)."""

    pods_known: bool = True

    def _owner(self, config: OversubscriptionConfig) -> OversubscriptionOwner:
        self.meta = batch_meta("spark", 1000, 2 * GI)
        self.others = [batch_meta("flink", 1500, 3 * GI)]

        def requests() -> BatchRequests | None:
            if not self.pods_known:
                return None
            return batch_requests([self.meta, *self.others] if self.batch_running else [])

        return OversubscriptionOwner(self.view, config, evicting=lambda: self.evicting, batch_requests=requests)

    def publish_only(self, advance: float) -> None:
        """A publisher round with no sampling pass before it."""
        self.now += advance
        assert NodePublisher(self.kube, NODE, self.node, [self.owner], clock=lambda: self.now).run_once()

    def allocatable(self) -> dict[str, int]:
        st = self.node()["status"]["allocatable"]
        return {k: int(parse_quantity(v)) for k, v in st.items() if k in BATCH}

    def running(self) -> list[dict[str, int]]:
        return [requests_of(m) for m in (self.meta, *self.others)] if self.batch_running else []


def computing(n: Kubelet) -> None:
    n.round(advance=1.0)


def online_rose(n: Kubelet) -> None:
    """Online usage rose: capacity (1.2 cores) fell below what batch pods request (2.5)."""
    n.restart(OversubscriptionConfig(cpu_reclaim_ratio=0.2, pressure_margin_percent=100))
    n.round(advance=1.0)


def evicting(n: Kubelet) -> None:
    n.evicting = True
    n.round(advance=1.0)


def stalled(n: Kubelet) -> None:
    n.publish_only(advance=30.0)  # no pass for 30 intervals


def no_pass_yet(n: Kubelet) -> None:
    """The agent restarted: its first publisher round comes before its first pass."""
    n.restart(n.config)
    n.publish_only(advance=1.0)


def restarted_without_history(n: Kubelet) -> None:
    """The agent restarted with its window state lost: pods count their whole request for 5 minutes (0)."""
    n.restart(n.config)
    n.view.windows = type(n.view.windows)()
    n.view.windows_lock = n.view.windows.lock
    n.round(advance=1.0)


def pod_list_not_synced(n: Kubelet) -> None:
    """Restarted and computing, its pod list not listed yet: what the node carries is held."""
    n.restart(OversubscriptionConfig(cpu_reclaim_ratio=0.2, pressure_margin_percent=100))
    n.pods_known = False
    n.round(advance=1.0)


def no_allocatable(n: Kubelet) -> None:
    obj = n.node()
    for f in ("capacity", "allocatable"):
        obj["status"][f].pop("cpu")
        obj["status"][f].pop("memory")
    n.api.put("nodes", obj)
    n.round(advance=1.0)


def shutting_down(n: Kubelet) -> None:
    n.owner.withdraw()
    n.publish_only(advance=1.0)


def types_cpu_only(n: Kubelet) -> None:
    obj = n.node()
    obj["metadata"]["annotations"]["volcano.sh/oversubscription-types"] = "cpu"
    n.api.put("nodes", obj)
    n.round(advance=1.0)


def label_removed(n: Kubelet) -> None:
    obj = n.node()
    obj["metadata"]["labels"] = {}
    n.api.put("nodes", obj)
    n.round(advance=1.0)


def extended_resources_false(n: Kubelet) -> None:
    n.restart(OversubscriptionConfig(extended_resources=False))
    n.round(advance=1.0)


STATES: dict[str, Callable[[Kubelet], None]] = {
    "computing": computing,
    "computing, capacity below allocated": online_rose,
    "evicting": evicting,
    "sampling stalled": stalled,
    "restarted, no pass yet": no_pass_yet,
    "restarted, no history (min_history)": restarted_without_history,
    "restarted, pod list not synced": pod_list_not_synced,
    "node has no allocatable": no_allocatable,
    "shutting down": shutting_down,
    "types: cpu only": types_cpu_only,
    "label removed": label_removed,
    "extended_resources: false": extended_resources_false,
}


@pytest.mark.parametrize("state", list(STATES))
def test_every_running_batch_pod_is_readmitted_in_every_state(state: str, kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("nodes", node(labels=LABEL))
    n = Kubelet(kube, kube_api)
    n.round()  # published once: 3 cores, 6 GiB; the pods hold 2.5 cores, 5 GiB
    STATES[state](n)
    allocatable = n.allocatable()
    admitted = kubelet_admits(allocatable, n.running())
    print(f"| {state} | {allocatable.get(BATCH[0])} | {allocatable.get(BATCH[1])} | "
          f"{n.annotations().get('volcano.sh/oversubscription-cpu')} | {n.owner.section().get('reason')} | "
          f"{admitted} |")  # fmt: skip
    assert all(admitted), f"{state}: kubelet would reject a running batch pod at its restart ({allocatable})"
    # ... and nothing new fits beyond what the published capacity allows
    free = {r: allocatable[r] - sum(p[r] for p in n.running()) for r in BATCH}
    assert all(v >= 0 for v in free.values())


def test_no_batch_pod_left_removes_them_when_switched_off(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("nodes", node(labels=LABEL))
    n = Kubelet(kube, kube_api)
    n.round()
    label_removed(n)
    assert n.allocatable() == {BATCH[0]: 2500, BATCH[1]: 5 * GI}
    n.batch_running = False
    n.round(advance=1.0)
    assert n.allocatable() == {}


def test_the_arithmetic_rejects_what_kubelet_rejects() -> None:
    """The table's admission check can fail: the issue's own case (capacity 0, a pod requesting 300m)."""
    assert kubelet_admits({BATCH[0]: 0}, [{BATCH[0]: 300}]) == [False]
    assert kubelet_admits({}, [{BATCH[0]: 300}]) == [False], "a missing kubernetes.io/ resource counts as 0"
    assert kubelet_admits({BATCH[0]: 500}, [{BATCH[0]: 300}, {BATCH[0]: 300}, {BATCH[0]: 200}]) == [True, False, True]
    assert kubelet_admits({BATCH[0]: 0}, [{BATCH[0]: 0, BATCH[1]: 0}]) == [True], "nothing requested: fits"
