"""Kube against the fake API server, through the real kubernetes client and real HTTP."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kube import ApiError, Kube
from kube.client import CONFLICT_RETRIES
from testsupport.kubeapi.server import FakeKubeAPI

pytest_plugins = ["testsupport.kubeapi.fixtures"]


def _pod(name: str, node: str = "n1", ns: str = "default", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "labels": dict(labels)},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running"},
    }


def _node(name: str = "n1", **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": dict(annotations), "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]},
        "status": {"capacity": {"cpu": "8"}, "allocatable": {"cpu": "7800m"}},
    }


# ---- connecting -----------------------------------------------------------------------------------


def test_connect_is_standalone_without_kubeconfig_or_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert Kube.connect() is None


def test_connect_through_kubeconfig_sends_the_token(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube.list("nodes")
    (req,) = kube_api.requests_for("GET", "^/api/v1/nodes$")
    assert req.headers["authorization"] == "Bearer colo-test-token"
    assert req.headers["accept"] == "application/json"


def test_writes_name_their_field_manager(kube: Kube, kube_api: FakeKubeAPI, tmp_path: Path) -> None:
    """Each write carries the program's fieldManager (and its User-Agent), so the Node's managedFields and the
    audit log say which program wrote what; reads carry none. Without a name, the client's default
    (OpenAPI-Generator) is what the server records."""
    kube_api.put("nodes", _node())
    named = Kube.connect(kube_api.kubeconfig(tmp_path / "named"), field_manager="colo-test")
    assert named is not None
    try:
        named.patch_node_annotations("n1", {"a": "1"})
        named.patch_node_extended_resources("n1", {"kubernetes.io/batch-cpu": "100"})
        named.set_node_taint("n1", "k", "", "NoSchedule", present=True)
        named.create_event(kind="Node", name="n1", namespace="", uid=None, reason="Tested", message="field manager",
                           event_type="Normal", component="colo-test")  # fmt: skip
        named.get_node("n1")
    finally:
        named.close()
    writes = [r for r in kube_api.requests if r.method in ("PATCH", "POST", "PUT")]
    assert len(writes) == 4 and all(r.query.get("fieldManager") == "colo-test" for r in writes)
    assert all(r.headers["user-agent"].startswith("colo-test/") for r in kube_api.requests)
    assert all("fieldManager" not in r.query for r in kube_api.requests if r.method == "GET")
    managed = {
        (e["manager"], e.get("subresource", "")) for e in kube_api.get("nodes", None, "n1")["metadata"]["managedFields"]
    }
    assert managed == {("colo-test", ""), ("colo-test", "status")}

    kube.patch_node_annotations("n1", {"b": "2"})  # the fixture's client names no manager
    assert kube_api.requests[-1].query.get("fieldManager") is None
    managers = [e["manager"] for e in kube_api.get("nodes", None, "n1")["metadata"]["managedFields"]]
    assert managers[-1] == "OpenAPI-Generator"


def test_wrong_token_is_401(kube_api: FakeKubeAPI, tmp_path: Path) -> None:
    path = kube_api.kubeconfig(tmp_path / "kc")
    kube_api.token = "another-token"
    client = Kube.connect(path)
    assert client is not None
    with pytest.raises(ApiError) as err:
        client.list("pods")
    assert (err.value.status, err.value.reason) == (401, "Unauthorized")


# ---- list -----------------------------------------------------------------------------------------


@pytest.fixture
def pods(kube_api: FakeKubeAPI) -> None:
    kube_api.put("pods", _pod("web-1", "n1", app="web", tier="a"))
    kube_api.put("pods", _pod("web-2", "n2", app="web", tier="b", gpu="true"))
    kube_api.put("pods", _pod("db-1", "n1", app="db", tier="c"))
    kube_api.put("pods", _pod("sys-1", "n1", "kube-system", app="dns"))


@pytest.mark.usefixtures("pods")
@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", {"web-1", "web-2"}),
        ("app==web", {"web-1", "web-2"}),
        ("app!=web", {"db-1", "sys-1"}),
        ("tier in (a, c)", {"web-1", "db-1"}),
        ("tier notin (a,c)", {"web-2", "sys-1"}),
        ("gpu", {"web-2"}),
        ("!gpu", {"web-1", "db-1", "sys-1"}),
        ("app=web,tier in (b,c),gpu", {"web-2"}),
    ],
)
def test_list_label_selector(kube: Kube, selector: str, expected: set[str]) -> None:
    items, _ = kube.list("pods", label_selector=selector)
    assert {p["metadata"]["name"] for p in items} == expected


@pytest.mark.usefixtures("pods")
def test_list_field_selector_namespace_and_resource_version(kube: Kube, kube_api: FakeKubeAPI) -> None:
    items, rv = kube.list("pods", field_selector="spec.nodeName=n1")
    assert {p["metadata"]["name"] for p in items} == {"web-1", "db-1", "sys-1"}
    assert rv == str(kube_api.resource_version)
    (req,) = kube_api.requests_for("GET", "^/api/v1/pods$")
    assert req.query["fieldSelector"] == "spec.nodeName=n1"

    items, _ = kube.list("pods", namespace="default", field_selector="spec.nodeName=n1,metadata.name!=db-1")
    assert [p["metadata"]["name"] for p in items] == ["web-1"]
    assert kube_api.requests_for("GET", "^/api/v1/namespaces/default/pods$")
    # List items come without kind/apiVersion from the server; Kube fills them in.
    assert (items[0]["kind"], items[0]["apiVersion"]) == ("Pod", "v1")


def test_list_rejects_what_a_real_server_rejects(kube: Kube) -> None:
    with pytest.raises(ApiError) as err:
        kube.list("pods", field_selector="spec.containers=x")
    assert (err.value.status, err.value.reason) == (400, "BadRequest")
    with pytest.raises(ApiError) as err:
        kube.list("pods", label_selector="app in ()")
    assert err.value.status == 400


def test_list_other_kinds(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("endpointslices", {"metadata": {"name": "svc-abc", "namespace": "prod"}, "addressType": "IPv4"})
    kube_api.put("nodes", _node("n1"))
    slices, _ = kube.list("endpointslices", namespace="prod")
    assert [s["metadata"]["name"] for s in slices] == ["svc-abc"]
    assert kube_api.requests_for("GET", "^/apis/discovery.k8s.io/v1/namespaces/prod/endpointslices$")
    nodes, _ = kube.list("nodes", field_selector="metadata.name=n1")
    assert [n["metadata"]["name"] for n in nodes] == ["n1"]


def test_list_with_compacted_resource_version_is_410(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("nodes", _node("n1"))
    kube_api.put("nodes", _node("n2"))
    kube_api.compact()
    with pytest.raises(ApiError) as err:
        kube.list("nodes", resource_version="1")
    assert (err.value.status, err.value.reason) == (410, "Expired")


def test_list_pages_with_limit_and_continue(kube: Kube, kube_api: FakeKubeAPI) -> None:
    for i in range(7):
        kube_api.put("pods", _pod(f"p{i}", ns="ns-a" if i % 2 else "ns-b"))
    kube_api.put("pods", _pod("elsewhere", node="n2"))
    items, rv = kube.list("pods", field_selector="spec.nodeName=n1", page_size=3)
    assert sorted(p["metadata"]["name"] for p in items) == [f"p{i}" for i in range(7)]
    assert rv == str(kube_api.resource_version)
    pages = kube_api.requests_for("GET", "^/api/v1/pods$")
    assert [r.query.get("limit") for r in pages] == ["3", "3", "3"]
    assert "continue" not in pages[0].query and all(r.query["continue"] for r in pages[1:])
    assert all(r.query["fieldSelector"] == "spec.nodeName=n1" for r in pages)
    assert all("resourceVersion" not in r.query for r in pages[1:])  # the token carries the snapshot
    # The default page size is client-go's 500: one request here.
    kube.list("pods")
    assert kube_api.requests_for("GET", "^/api/v1/pods$")[-1].query["limit"] == "500"


def test_paged_list_is_one_snapshot_and_transformed_page_by_page(kube: Kube, kube_api: FakeKubeAPI) -> None:
    for name in ("a", "b", "c", "d", "e"):
        kube_api.put("pods", _pod(name))
    listed_at = kube_api.resource_version
    seen: list[str] = []

    def keep(pod: dict[str, Any]) -> dict[str, Any] | None:
        name = pod["metadata"]["name"]
        if not seen:  # while the first page is being handled, the collection changes under us
            kube_api.put("pods", _pod("a0"))
            kube_api.put("pods", _pod("e", app="changed"))
            kube_api.delete("pods", "default", "d")
        seen.append(name)
        return None if name == "b" else {"metadata": {"name": name, "rv": pod["metadata"]["resourceVersion"]}}

    items, rv = kube.list("pods", page_size=2, transform=keep)
    assert seen == ["a", "b", "c", "d", "e"]  # as of the first page: no a0, d still there
    assert [p["metadata"]["name"] for p in items] == ["a", "c", "d", "e"]  # b dropped by the transform
    assert int(items[-1]["metadata"]["rv"]) <= listed_at  # e as it was, not the later change
    assert rv == str(listed_at)


def test_expired_continue_token_is_410(kube: Kube, kube_api: FakeKubeAPI) -> None:
    for name in ("a", "b", "c"):
        kube_api.put("pods", _pod(name))

    def compact_once(pod: dict[str, Any]) -> dict[str, Any]:
        kube_api.put("pods", _pod("late"))
        kube_api.compact()  # the first page's snapshot is gone before the second page is asked for
        return pod

    with pytest.raises(ApiError) as err:
        kube.list("pods", page_size=2, transform=compact_once)
    assert (err.value.status, err.value.reason) == (410, "Expired")


def test_fake_server_refuses_a_resource_version_with_continue(kube: Kube, kube_api: FakeKubeAPI) -> None:
    """As the real server does: the continue token alone says which snapshot to read."""
    for name in ("a", "b"):
        kube_api.put("pods", _pod(name))
    kube.list("pods", page_size=1)
    token = kube_api.requests_for("GET", "^/api/v1/pods$")[1].query["continue"]
    with pytest.raises(ApiError) as err:
        kube._call("GET", "/api/v1/pods", query=[("continue", token), ("resourceVersion", "5")])
    assert err.value.status == 400 and "continue" in err.value.message
    with pytest.raises(ApiError) as err:
        kube._call("GET", "/api/v1/pods", query=[("continue", "garbage")])
    assert err.value.status == 400


# ---- watch ----------------------------------------------------------------------------------------


def test_watch_streams_changes_then_bookmarks(kube: Kube, kube_api: FakeKubeAPI) -> None:
    _, rv = kube.list("pods")
    kube_api.put("pods", _pod("a"))
    changed = _pod("a")
    changed["metadata"]["labels"] = {"x": "y"}
    kube_api.put("pods", changed)
    kube_api.delete("pods", "default", "a")
    kube_api.put("nodes", _node("n1"))  # another kind: invisible, but moves the bookmark on

    stream = kube.watch("pods", resource_version=rv, timeout_seconds=5)
    try:
        events = [next(stream) for _ in range(3)]
        assert [t for t, _ in events] == ["ADDED", "MODIFIED", "DELETED"]
        assert [int(o["metadata"]["resourceVersion"]) for _, o in events] == [int(rv) + 1, int(rv) + 2, int(rv) + 3]
        etype, bookmark = next(stream)
        assert etype == "BOOKMARK"
        assert bookmark["metadata"]["resourceVersion"] == str(kube_api.resource_version)
    finally:
        stream.close()
    (req,) = kube_api.requests_for("GET", "^/api/v1/pods$", watch=True)
    assert req.query["resourceVersion"] == rv
    assert req.query["allowWatchBookmarks"] == "true"
    assert req.query["timeoutSeconds"] == "5"


def test_watch_with_selector_sees_objects_enter_and_leave(kube: Kube, kube_api: FakeKubeAPI) -> None:
    _, rv = kube.list("pods")
    kube_api.put("pods", _pod("p", node=""))  # pending: not on n1 yet
    kube_api.put("pods", _pod("p", node="n1"))  # scheduled to n1: enters the selection
    kube_api.put("pods", _pod("p", node="n2"))  # (not realistic, but) leaves it
    stream = kube.watch("pods", resource_version=rv, field_selector="spec.nodeName=n1", timeout_seconds=5)
    try:
        assert [next(stream)[0], next(stream)[0]] == ["ADDED", "DELETED"]
    finally:
        stream.close()


def test_watch_ends_cleanly_at_its_timeout(kube: Kube) -> None:
    _, rv = kube.list("nodes")
    stream = kube.watch("nodes", resource_version=rv, timeout_seconds=1, allow_bookmarks=False)
    started = time.monotonic()
    assert list(stream) == []
    assert time.monotonic() - started < 30  # ended by the server at its timeout, not left hanging


def test_watch_from_compacted_version_raises_410(kube: Kube, kube_api: FakeKubeAPI) -> None:
    _, rv = kube.list("nodes")
    kube_api.put("nodes", _node("n1"))
    kube_api.put("nodes", _node("n2"))
    kube_api.compact()
    stream = kube.watch("nodes", resource_version=rv, timeout_seconds=5)
    with pytest.raises(ApiError) as err:
        next(stream)
    assert (err.value.status, err.value.reason) == (410, "Expired")
    assert "too old resource version" in err.value.message


def test_watch_cut_by_the_network_raises_status_0(kube: Kube, kube_api: FakeKubeAPI) -> None:
    _, rv = kube.list("nodes")
    stream = kube.watch("nodes", resource_version=rv, timeout_seconds=30, allow_bookmarks=False)
    threading.Timer(0.2, kube_api.drop_watches).start()
    with pytest.raises(ApiError) as err:
        next(stream)
    assert err.value.status == 0


def test_watch_close_from_another_thread_unblocks_the_reader(kube: Kube) -> None:
    _, rv = kube.list("nodes")
    stream = kube.watch("nodes", resource_version=rv, timeout_seconds=30, allow_bookmarks=False)
    threading.Timer(0.2, stream.close).start()
    started = time.monotonic()
    assert list(stream) == []
    assert time.monotonic() - started < 30  # unblocked long before the watch's own 30 s end


# ---- nodes ----------------------------------------------------------------------------------------


def test_get_node_and_not_found(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("nodes", _node("n1"))
    assert kube.get_node("n1")["metadata"]["name"] == "n1"
    with pytest.raises(ApiError) as err:
        kube.get_node("missing")
    e = err.value
    assert (e.status, e.reason, e.message) == (404, "NotFound", 'nodes "missing" not found')
    assert e.body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'nodes "missing" not found',
        "reason": "NotFound",
        "details": {"name": "missing", "kind": "nodes"},
        "code": 404,
    }


def test_patch_node_annotations_touches_only_ours(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("nodes", _node("n1", **{"other.io/owner": "someone", "colo.io/old": "x"}))
    node = kube.patch_node_annotations("n1", {"colo.io/level": "high", "colo.io/old": None})
    assert node["metadata"]["annotations"] == {"other.io/owner": "someone", "colo.io/level": "high"}
    stored = kube_api.get("nodes", None, "n1")
    assert stored is not None
    assert stored["metadata"]["annotations"] == {"other.io/owner": "someone", "colo.io/level": "high"}
    assert stored["metadata"]["labels"] == {"kubernetes.io/hostname": "n1"}
    assert stored["spec"]["taints"]  # untouched
    (req,) = kube_api.requests_for("PATCH")
    assert req.path == "/api/v1/nodes/n1"
    assert req.content_type == "application/merge-patch+json"
    assert req.body == {"metadata": {"annotations": {"colo.io/level": "high", "colo.io/old": None}}}


def test_patch_with_a_timeout_lands_in_time_or_not_at_all(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("nodes", _node("n1"))
    kube.patch_node_annotations("n1", {"colo.io/a": "1"}, timeout=2.0)
    (req,) = kube_api.requests_for("PATCH")
    assert req.query["timeout"] == "500ms"  # 2 s shared by the 4 sends urllib3 may make (3 connect retries)

    kube_api.inject("PATCH", "/nodes/n1", status=None, delay=2.0)  # an API server too slow for the deadline
    started = time.monotonic()
    with pytest.raises(ApiError):
        kube.patch_node_annotations("n1", {"colo.io/a": "2"}, timeout=0.4)
    assert time.monotonic() - started < 2.0  # gave up before the server would have answered
    time.sleep(2.2)  # past the delay: the server gave up at its deadline (504) instead of applying it
    stored = kube_api.get("nodes", None, "n1")
    assert stored is not None and stored["metadata"]["annotations"]["colo.io/a"] == "1"


def test_patch_node_labels(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("nodes", _node("n1"))
    node = kube.patch_node_labels("n1", {"colo.io/enabled": "true", "kubernetes.io/hostname": None})
    assert node["metadata"]["labels"] == {"colo.io/enabled": "true"}


def test_patch_node_extended_resources_goes_to_status(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("nodes", _node("n1"))
    node = kube.patch_node_extended_resources(
        "n1", {"kubernetes.io/batch-cpu": "3500", "kubernetes.io/batch-memory": "1Gi"}
    )
    assert node["status"]["capacity"] == {
        "cpu": "8",
        "kubernetes.io/batch-cpu": "3500",
        "kubernetes.io/batch-memory": "1Gi",
    }
    assert node["status"]["allocatable"]["kubernetes.io/batch-cpu"] == "3500"
    assert node["status"]["allocatable"]["cpu"] == "7800m"
    (req,) = kube_api.requests_for("PATCH")
    assert req.path == "/api/v1/nodes/n1/status"

    node = kube.patch_node_extended_resources("n1", {"kubernetes.io/batch-memory": None})
    assert "kubernetes.io/batch-memory" not in node["status"]["capacity"]
    assert "kubernetes.io/batch-memory" not in node["status"]["allocatable"]
    assert node["status"]["capacity"]["kubernetes.io/batch-cpu"] == "3500"


def test_status_written_to_the_node_itself_is_ignored_like_a_real_server(kube: Kube, kube_api: FakeKubeAPI) -> None:
    """Guards the fake's fidelity: without the status subresource an extended resource never appears."""
    kube_api.put("nodes", _node("n1"))
    node = kube._call(
        "PATCH",
        "/api/v1/nodes/n1",
        body={"status": {"capacity": {"kubernetes.io/batch-cpu": "1"}}},
        content_type="application/merge-patch+json",
    )
    assert "kubernetes.io/batch-cpu" not in node["status"]["capacity"]


def _taints(kube_api: FakeKubeAPI, node: str = "n1") -> list[dict[str, Any]]:
    obj = kube_api.get("nodes", None, node)
    assert obj is not None
    return list(obj["spec"].get("taints") or [])


def test_set_node_taint_add_update_remove(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("nodes", _node("n1"))
    foreign = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}

    kube.set_node_taint("n1", "colo.io/pressure", "cpu", "NoSchedule", True)
    assert _taints(kube_api) == [foreign, {"key": "colo.io/pressure", "effect": "NoSchedule", "value": "cpu"}]
    patch = kube_api.requests_for("PATCH")[-1]
    assert patch.content_type == "application/json-patch+json"
    assert patch.body[0]["op"] == "test" and patch.body[0]["path"] == "/metadata/resourceVersion"

    kube.set_node_taint("n1", "colo.io/pressure", "cpu", "NoSchedule", True)  # already so: no write
    assert len(kube_api.requests_for("PATCH")) == 1

    kube.set_node_taint("n1", "colo.io/pressure", "memory", "NoSchedule", True)
    assert _taints(kube_api)[1]["value"] == "memory" and len(_taints(kube_api)) == 2

    kube.set_node_taint("n1", "colo.io/pressure", "", "NoSchedule", False)
    assert _taints(kube_api) == [foreign]
    kube.set_node_taint("n1", "colo.io/pressure", "", "NoSchedule", False)  # already absent: no write
    assert len(kube_api.requests_for("PATCH")) == 3


def test_set_node_taint_retries_after_409(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("nodes", _node("n1"))
    fault = kube_api.inject("PATCH", "/nodes/n1$", status=409)
    kube.set_node_taint("n1", "colo.io/evicting", "", "NoExecute", True)
    assert fault.hits == 1
    assert len(kube_api.requests_for("PATCH")) == 2
    assert len(kube_api.requests_for("GET", "/nodes/n1$")) == 2  # re-read before the retry
    (added,) = [t for t in _taints(kube_api) if t["key"] == "colo.io/evicting"]
    assert added["effect"] == "NoExecute" and "timeAdded" in added


def test_set_node_taint_keeps_a_concurrent_writers_taint(kube: Kube, kube_api: FakeKubeAPI) -> None:
    """Someone writes the node between our read and our patch: the resourceVersion test fails (422),
    we re-read and retry, and their taint survives."""
    node = _node("n1")
    node["spec"]["taints"] = []
    kube_api.put("nodes", node)
    kube_api.inject("PATCH", "/nodes/n1$", status=None, delay=0.5)
    worker = threading.Thread(target=kube.set_node_taint, args=("n1", "colo.io/a", "", "NoSchedule", True))
    worker.start()
    deadline = time.monotonic() + 5
    while not kube_api.requests_for("PATCH") and time.monotonic() < deadline:
        time.sleep(0.01)
    theirs = _node("n1")
    theirs["spec"]["taints"] = [{"key": "kubectl/cordon", "effect": "NoSchedule"}]
    kube_api.put("nodes", theirs)  # lands while our PATCH is held up
    worker.join(10)
    assert {t["key"] for t in _taints(kube_api)} == {"kubectl/cordon", "colo.io/a"}
    assert len(kube_api.requests_for("PATCH")) == 2


def test_set_node_taint_gives_up_after_bounded_conflicts(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("nodes", _node("n1"))
    kube_api.inject("PATCH", status=409, times=None)
    with pytest.raises(ApiError) as err:
        kube.set_node_taint("n1", "colo.io/a", "", "NoSchedule", True)
    assert err.value.status == 409
    assert len(kube_api.requests_for("PATCH")) == CONFLICT_RETRIES


# ---- eviction -------------------------------------------------------------------------------------


def test_evict_pod_evicted_blocked_gone(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("pods", _pod("batch-1", ns="jobs"))
    kube_api.put("pods", _pod("web-1", ns="prod"))
    kube_api.block_eviction("prod", "web-1", pdb="web-pdb")

    assert kube.evict_pod("jobs", "batch-1") == "evicted"
    assert kube_api.get("pods", "jobs", "batch-1") is None
    req = kube_api.requests_for("POST")[-1]
    assert req.path == "/api/v1/namespaces/jobs/pods/batch-1/eviction"
    assert req.body["apiVersion"] == "policy/v1" and req.body["kind"] == "Eviction"
    assert req.body["metadata"] == {"name": "batch-1", "namespace": "jobs"}

    assert kube.evict_pod("prod", "web-1") == "blocked"
    assert kube_api.get("pods", "prod", "web-1") is not None
    assert kube.evict_pod("jobs", "batch-1") == "gone"


def test_evict_pod_blocked_answer_is_the_real_status(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("pods", _pod("web-1"))
    kube_api.block_eviction("default", "web-1", pdb="web-pdb")
    with pytest.raises(ApiError) as err:
        kube._call(
            "POST",
            "/api/v1/namespaces/default/pods/web-1/eviction",
            body={"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-1"}},
        )
    assert err.value.status == 429
    assert err.value.reason == "TooManyRequests"
    assert err.value.message == "Cannot evict pod as it would violate the pod's disruption budget."
    assert err.value.body is not None
    assert err.value.body["details"]["causes"][0]["reason"] == "DisruptionBudget"


def test_evict_pod_dry_run_keeps_the_pod(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("pods", _pod("batch-1"))
    assert kube.evict_pod("default", "batch-1", dry_run=True) == "evicted"
    assert kube_api.get("pods", "default", "batch-1") is not None
    req = kube_api.requests_for("POST")[-1]
    assert req.query["dryRun"] == "All"
    assert req.body["deleteOptions"] == {"dryRun": ["All"]}


def test_evict_pod_other_errors_raise(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("pods", _pod("batch-1"))
    kube_api.inject("POST", "/eviction$", status=500)
    with pytest.raises(ApiError) as err:
        kube.evict_pod("default", "batch-1")
    assert (err.value.status, err.value.reason) == (500, "InternalError")
    assert kube_api.get("pods", "default", "batch-1") is not None


# ---- events ---------------------------------------------------------------------------------------


def test_create_event_about_a_pod(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube.create_event(
        kind="Pod",
        name="batch-1",
        namespace="jobs",
        uid="uid-1",
        reason="ColoEvicted",
        message="evicted to protect online pods",
        event_type="Warning",
        component="colo-agent",
    )
    (event,) = kube_api.objects("events")
    assert event["metadata"]["namespace"] == "jobs"
    assert event["metadata"]["name"].startswith("batch-1.")
    assert event["involvedObject"] == {
        "kind": "Pod",
        "name": "batch-1",
        "namespace": "jobs",
        "uid": "uid-1",
        "apiVersion": "v1",
    }
    assert (event["reason"], event["type"], event["count"]) == ("ColoEvicted", "Warning", 1)
    assert event["source"] == {"component": "colo-agent"}
    assert event["firstTimestamp"] == event["lastTimestamp"]
    assert kube_api.requests_for("POST", "^/api/v1/namespaces/jobs/events$")


def test_create_event_about_a_node_lands_in_default(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube.create_event(
        kind="Node",
        name="n1",
        namespace="",
        uid=None,
        reason="ColoPressure",
        message="x" * 5000,
        event_type="Normal",
        component="colo-agent",
    )
    (event,) = kube_api.objects("events")
    assert event["metadata"]["namespace"] == "default"
    assert event["involvedObject"] == {"kind": "Node", "name": "n1", "apiVersion": "v1"}
    assert len(event["message"]) == 1024


# ---- leases ---------------------------------------------------------------------------------------


def test_lease_crud_and_conflicts(kube: Kube) -> None:
    assert kube.get_lease("colo", "controller") is None
    body = {"metadata": {"name": "controller", "namespace": "colo"}, "spec": {"holderIdentity": "a"}}
    created = kube.create_lease("colo", body)
    assert created["apiVersion"] == "coordination.k8s.io/v1"
    with pytest.raises(ApiError) as err:
        kube.create_lease("colo", body)
    assert (err.value.status, err.value.reason) == (409, "AlreadyExists")

    fresh = dict(created, spec={"holderIdentity": "b"})
    replaced = kube.replace_lease("colo", "controller", fresh)
    assert replaced["spec"]["holderIdentity"] == "b"
    with pytest.raises(ApiError) as err:
        kube.replace_lease("colo", "controller", fresh)  # created's resourceVersion is stale now
    assert (err.value.status, err.value.reason) == (409, "Conflict")
    assert "the object has been modified" in err.value.message
    lease = kube.get_lease("colo", "controller")
    assert lease is not None and lease["spec"]["holderIdentity"] == "b"


# ---- transport failures ---------------------------------------------------------------------------


def test_429_carries_retry_after(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.inject("GET", "/nodes", status=429, retry_after=2)
    with pytest.raises(ApiError) as err:
        kube.list("nodes")
    assert (err.value.status, err.value.reason, err.value.retry_after) == (429, "TooManyRequests", 2.0)


def test_dropped_connection_is_status_0(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("pods", _pod("p"))
    kube_api.inject("POST", drop=True)  # POSTs are not retried by urllib3, so Kube sees the drop
    with pytest.raises(ApiError) as err:
        kube.evict_pod("default", "p")
    assert err.value.status == 0
    assert kube_api.get("pods", "default", "p") is not None


def test_server_down_is_status_0(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.stop()
    with pytest.raises(ApiError) as err:
        kube.get_node("n1")
    assert err.value.status == 0
    kube_api.start()
    kube_api.put("nodes", _node("n1"))
    assert kube.get_node("n1")["metadata"]["name"] == "n1"


def test_slow_server_times_out(kube_api: FakeKubeAPI, tmp_path: Path) -> None:
    client = Kube.connect(kube_api.kubeconfig(tmp_path / "kc"), request_timeout=0.3)
    assert client is not None
    kube_api.inject("GET", status=None, delay=2.0, times=10)
    started = time.monotonic()
    with pytest.raises(ApiError) as err:
        client.list("nodes")
    assert err.value.status == 0
    assert time.monotonic() - started < 2.0  # gave up before the server answered (one transport retry)


# ---- the fake server's own semantics (what the code above relies on) --------------------------------


def test_fake_json_patch_failed_test_is_422_like_the_real_server(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("nodes", _node("n1"))
    with pytest.raises(ApiError) as err:
        kube._call(
            "PATCH",
            "/api/v1/nodes/n1",
            body=[{"op": "test", "path": "/metadata/resourceVersion", "value": "0"}],
            content_type="application/json-patch+json",
        )
    assert (err.value.status, err.value.reason) == (422, "Invalid")


def test_fake_strategic_merge_patch_replaces_lists(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("nodes", _node("n1"))
    node = kube._call(
        "PATCH",
        "/api/v1/nodes/n1",
        body={"metadata": {"labels": {"a": "b"}}, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}},
        content_type="application/strategic-merge-patch+json",
    )
    assert node["metadata"]["labels"] == {"kubernetes.io/hostname": "n1", "a": "b"}
    assert node["spec"]["taints"] == [{"key": "k", "effect": "NoSchedule"}]


def test_fake_noop_patch_does_not_bump_resource_version(kube: Kube, kube_api: FakeKubeAPI) -> None:
    kube_api.put("nodes", _node("n1", a="1"))
    before = kube_api.resource_version
    kube.patch_node_annotations("n1", {"a": "1"})
    assert kube_api.resource_version == before


def test_fake_discovery_endpoints(kube: Kube) -> None:
    assert kube._call("GET", "/version")["major"] == "1"
    assert "v1" in kube._call("GET", "/api")["versions"]
    groups = {g["name"] for g in kube._call("GET", "/apis")["groups"]}
    assert {"coordination.k8s.io", "discovery.k8s.io", "policy"} <= groups
    with pytest.raises(ApiError) as err:
        kube._call("GET", "/apis/coordination.k8s.io/v1/pods")
    assert err.value.status == 404


def test_kube_loads_only_the_parts_of_the_client_it_uses() -> None:
    """The agent's memory: `import kube` must not run the client's package __init__ files (dynamic, stream,
    watch, informer, utils, the kubeconfig loader with oauthlib), yet the full client stays reachable."""
    code = (
        "import sys, kube\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('kubernetes', 'oauthlib', 'websocket')))))\n"
        "from kubernetes.client import CoreV1Api\n"
        "print(CoreV1Api.__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    loaded = set(out[0].split())
    assert "kubernetes.client.api_client" in loaded
    heavy = {"kubernetes.dynamic", "kubernetes.stream", "kubernetes.watch", "kubernetes.informer",
             "kubernetes.utils.create_from_yaml", "kubernetes.config.kube_config", "oauthlib", "websocket"}  # fmt: skip
    assert not loaded & heavy
    assert out[1] == "CoreV1Api"


def test_a_kubeconfig_loads_without_the_oidc_refresh_libraries(kube_api: FakeKubeAPI, tmp_path: Path) -> None:
    """The kubeconfig loader's oauthlib and requests-oauthlib (~4.6 MiB, for refreshing an `oidc` token) stay
    out of the process until used; what the loader took from them then resolves to the real thing."""
    path = kube_api.kubeconfig(tmp_path / "kc")
    code = (
        "import sys\n"
        "from kube import Kube\n"
        f"kube = Kube.connect({str(path)!r})\n"
        "assert kube is not None\n"
        "print(len(kube.list('nodes')[0]))\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('oauthlib', 'requests_oauthlib')))))\n"
        "from kubernetes.config import kube_config\n"
        "print(kube_config.OAuth2Session.__name__, sys.modules['requests_oauthlib'].OAuth2Session.__module__)\n"
        "print(kube_config.oauthlib.oauth2.rfc6749.errors.InvalidClientIdError.__name__)\n"
        "print(type(sys.modules['requests_oauthlib']).__name__, type(sys.modules['oauthlib']).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "0"
    assert out[1] == ""
    assert out[2].split() == ["OAuth2Session", "requests_oauthlib.oauth2_session"]
    assert out[3] == "InvalidClientIdError"
    assert out[4] == "module module"  # the real modules, not the stand-ins
