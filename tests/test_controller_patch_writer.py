"""AnnotationWriter against the fake API server: a leader's patch lands while the lease is ours, or never."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from controller.metrics import ControllerMetrics
from controller.patch_writer import AnnotationWriter
from kube import Kube
from testsupport.kubeapi.fixtures import kube, kube_api  # noqa: F401
from testsupport.kubeapi.server import FakeKubeAPI


class Lease:
    """What the writer asks the elector: how long the lease is still ours (settable from the test)."""

    def __init__(self, left: float) -> None:
        self.left = left

    def __call__(self) -> float:
        return self.left


@pytest.fixture
def writers() -> Iterator[list[AnnotationWriter]]:
    started: list[AnnotationWriter] = []
    yield started
    for w in started:
        w.stop()


def _writer(
    kube: Kube,  # noqa: F811
    lease: Lease,
    started: list[AnnotationWriter],
    metrics: ControllerMetrics | None = None,
    **kwargs: Any,
) -> AnnotationWriter:
    kwargs.setdefault("qps", 1000)
    kwargs.setdefault("burst", 1000)
    metrics = metrics or ControllerMetrics()
    w = AnnotationWriter(kube.patch_node_annotations, workers=1, metrics=metrics, lease_time_left=lease, **kwargs)
    w.start()
    started.append(w)
    return w


def _count(metrics: ControllerMetrics, result: str) -> float:
    return metrics.registry.get_sample_value("colo_controller_node_patches_total", {"result": result}) or 0.0


def _annotations(api: FakeKubeAPI, name: str) -> dict[str, str]:
    node = api.get("nodes", None, name)
    assert node is not None
    return dict(node["metadata"].get("annotations") or {})


def test_leadership_is_checked_right_before_sending(
    kube: Kube,  # noqa: F811
    kube_api: FakeKubeAPI,  # noqa: F811
    writers: list[AnnotationWriter],
) -> None:
    for name in ("n1", "n2"):
        kube_api.put("nodes", {"metadata": {"name": name}})
    lease = Lease(15.0)

    def lose_lease(node: str, patch: Mapping[str, str], updated: dict[str, Any]) -> None:
        lease.left = 0.0  # the lease moves on while n2's patch waits for a token

    # burst 1 at 5 qps: n2 waits 0.2 s for its token after n1 went out
    metrics = ControllerMetrics()
    w = _writer(kube, lease, writers, metrics, qps=5, burst=1, on_written=lose_lease)
    w.submit("n1", {"colo.io/x": "1"})
    w.submit("n2", {"colo.io/x": "1"})
    assert w.wait_idle(5)
    assert [r.path for r in kube_api.requests_for("PATCH")] == ["/api/v1/nodes/n1"]
    assert (_count(metrics, "ok"), _count(metrics, "not_leader")) == (1, 1)
    assert "colo.io/x" not in _annotations(kube_api, "n2")


def test_a_leaders_patch_gets_a_deadline_inside_the_lease(
    kube: Kube,  # noqa: F811
    kube_api: FakeKubeAPI,  # noqa: F811
    writers: list[AnnotationWriter],
) -> None:
    kube_api.put("nodes", {"metadata": {"name": "n1"}})
    lease = Lease(0.5)
    metrics = ControllerMetrics()
    w = _writer(kube, lease, writers, metrics, request_timeout=10.0)
    w.submit("n1", {"colo.io/x": "1"})
    assert w.wait_idle(5)
    (sent,) = kube_api.requests_for("PATCH")
    assert sent.query["timeout"] == "100ms"  # 80 % of the 0.5 s left, over urllib3's 4 possible sends

    # The API server is slower than the lease leaves us: the patch must fail, not land later.
    kube_api.inject("PATCH", "/nodes/n1", status=None, delay=3.0)
    started = time.monotonic()
    w.submit("n1", {"colo.io/x": "2"})
    assert w.wait_idle(5)
    assert time.monotonic() - started < 3.0  # gave up (at the lease's deadline) before the server answered
    assert _count(metrics, "error") == 1
    time.sleep(max(0.0, started + 3.2 - time.monotonic()))  # past the server's delay
    assert _annotations(kube_api, "n1")["colo.io/x"] == "1"

    lease.left = 0.04  # too little to be worth a try
    w.submit("n1", {"colo.io/x": "3"})
    assert w.wait_idle(5)
    assert _count(metrics, "not_leader") == 1 and len(kube_api.requests_for("PATCH")) == 2


def test_without_leader_election_the_client_timeout_applies(
    kube: Kube,  # noqa: F811
    kube_api: FakeKubeAPI,  # noqa: F811
    writers: list[AnnotationWriter],
) -> None:
    kube_api.put("nodes", {"metadata": {"name": "n1"}})
    w = _writer(kube, Lease(float("inf")), writers)
    w.submit("n1", {"colo.io/x": "1"})
    assert w.wait_idle(5)
    (sent,) = kube_api.requests_for("PATCH")
    assert "timeout" not in sent.query
    assert _annotations(kube_api, "n1") == {"colo.io/x": "1"}
