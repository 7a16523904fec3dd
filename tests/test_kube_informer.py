"""Informer against the fake API server: sync, resume, relist, backoff and outages."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kube import Informer, Kube
from testsupport.kubeapi.server import FakeKubeAPI

pytest_plugins = ["testsupport.kubeapi.fixtures"]

WAIT = 5.0  # generous: only failures ever wait this long


def _pod(name: str, node: str = "n1", ns: str = "default", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "labels": dict(labels)},
        "spec": {"nodeName": node},
        "status": {"phase": "Running"},
    }


def eventually(check: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


class Recorder:
    """Collects on_event calls from the informer thread."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def __call__(self, etype: str, obj: dict[str, Any]) -> None:
        with self._lock:
            self.events.append((etype, obj["metadata"]["name"]))

    def seen(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self.events)


@pytest.fixture
def make_informer(kube: Kube) -> Iterator[Callable[..., Informer]]:
    """Informers with test-sized timings, all stopped at the end."""
    started: list[Informer] = []

    def make(kind: str = "pods", **kwargs: Any) -> Informer:
        kwargs.setdefault("backoff_initial", 0.05)
        kwargs.setdefault("backoff_max", 0.2)
        kwargs.setdefault("watch_timeout", 30)
        informer = Informer(kube, kind, **kwargs)  # type: ignore[arg-type]
        informer.start()
        started.append(informer)
        assert informer.synced.wait(WAIT)
        return informer

    yield make
    for informer in started:
        informer.stop()


def _names(informer: Informer) -> set[str]:
    return {o["metadata"]["name"] for o in informer.items()}


def test_sync_then_follow_changes(kube_api: FakeKubeAPI, make_informer: Callable[..., Informer]) -> None:
    kube_api.put("pods", _pod("a"))
    kube_api.put("pods", _pod("b", ns="other"))
    rec = Recorder()
    informer = make_informer(on_event=rec)
    assert _names(informer) == {"a", "b"}
    assert sorted(rec.seen()) == [("ADDED", "a"), ("ADDED", "b")]
    assert informer.get("other/b") is not None
    assert informer.get("b") is None

    kube_api.put("pods", _pod("c"))
    kube_api.put("pods", _pod("a", app="changed"))
    kube_api.delete("pods", "other", "b")
    eventually(lambda: len(rec.seen()) == 5)
    assert rec.seen()[2:] == [("ADDED", "c"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert _names(informer) == {"a", "c"}
    a = informer.get("default/a")
    assert a is not None and a["metadata"]["labels"] == {"app": "changed"}
    assert informer.resource_version == str(kube_api.resource_version)
    assert informer.lists == 1


def test_cluster_scoped_keys_and_selectors(kube_api: FakeKubeAPI, make_informer: Callable[..., Informer]) -> None:
    kube_api.put("nodes", {"metadata": {"name": "n1"}})
    nodes = make_informer("nodes")
    assert nodes.get("n1") is not None

    rec = Recorder()
    mine = make_informer(field_selector="spec.nodeName=n1", on_event=rec)
    kube_api.put("pods", _pod("p", node="n2"))
    kube_api.put("pods", _pod("p", node="n1"))
    eventually(lambda: mine.get("default/p") is not None)
    kube_api.delete("pods", "default", "p")
    eventually(lambda: mine.get("default/p") is None)
    assert rec.seen() == [("ADDED", "p"), ("DELETED", "p")]


def test_resumes_watch_from_last_seen_version_after_a_drop(
    kube_api: FakeKubeAPI, make_informer: Callable[..., Informer]
) -> None:
    informer = make_informer(on_event=Recorder())
    kube_api.put("pods", _pod("a"))
    eventually(lambda: informer.get("default/a") is not None)
    seen_rv = informer.resource_version
    assert seen_rv == str(kube_api.resource_version)

    kube_api.drop_watches()
    eventually(lambda: len(kube_api.requests_for("GET", "/pods$", watch=True)) == 2)
    kube_api.put("pods", _pod("b"))
    eventually(lambda: informer.get("default/b") is not None)

    _, second = kube_api.requests_for("GET", "/pods$", watch=True)
    assert second.query["resourceVersion"] == seen_rv
    assert informer.lists == 1  # resumed, not relisted
    assert len(kube_api.requests_for("GET", "/pods$", watch=False)) == 1


def test_bookmarks_advance_the_resume_version(kube_api: FakeKubeAPI, make_informer: Callable[..., Informer]) -> None:
    informer = make_informer()
    listed_rv = informer.resource_version
    kube_api.put("nodes", {"metadata": {"name": "n1"}})  # not a pod: only a bookmark can tell us
    target = str(kube_api.resource_version)
    eventually(lambda: informer.resource_version == target)
    assert target != listed_rv

    kube_api.drop_watches()
    eventually(lambda: len(kube_api.requests_for("GET", "/pods$", watch=True)) == 2)
    assert kube_api.requests_for("GET", "/pods$", watch=True)[1].query["resourceVersion"] == target
    assert kube_api.requests_for("GET", "/pods$", watch=True)[0].query["allowWatchBookmarks"] == "true"


def test_relists_on_410_and_synthesizes_deletes(kube_api: FakeKubeAPI, make_informer: Callable[..., Informer]) -> None:
    kube_api.put("pods", _pod("stays"))
    kube_api.put("pods", _pod("goes"))
    rec = Recorder()
    informer = make_informer(on_event=rec)

    # History is compacted while our watch is down: resuming must fail with 410 and we must relist.
    kube_api.stop()
    kube_api.delete("pods", "default", "goes")
    kube_api.put("pods", _pod("new"))
    kube_api.put("pods", _pod("stays", app="v2"))
    compacted = kube_api.compact()
    kube_api.start()

    eventually(lambda: _names(informer) == {"stays", "new"})
    assert informer.lists == 2
    assert sorted(rec.seen()[2:]) == [("ADDED", "new"), ("DELETED", "goes"), ("MODIFIED", "stays")]
    watches = kube_api.requests_for("GET", "/pods$", watch=True)
    assert any(int(w.query["resourceVersion"]) < compacted for w in watches)  # the one answered 410
    stays = informer.get("default/stays")
    assert stays is not None and stays["metadata"]["labels"] == {"app": "v2"}


def test_injected_410_on_watch_relists(kube_api: FakeKubeAPI, make_informer: Callable[..., Informer]) -> None:
    informer = make_informer()
    kube_api.inject("GET", "/pods$", status=410, watch=True)
    kube_api.drop_watches()
    eventually(lambda: informer.lists == 2)
    assert informer.synced.is_set()


def test_outage_without_compaction_resumes_and_converges(
    kube_api: FakeKubeAPI, make_informer: Callable[..., Informer]
) -> None:
    kube_api.put("pods", _pod("a"))
    informer = make_informer()
    kube_api.stop()
    kube_api.put("pods", _pod("b"))
    kube_api.delete("pods", "default", "a")
    eventually(lambda: informer.last_error is not None)  # it noticed the outage
    time.sleep(0.3)  # a few failed reconnects with backoff
    kube_api.start()
    eventually(lambda: _names(informer) == {"b"})
    assert informer.lists == 1  # history was still there: the watch resumed, no relist needed
    eventually(lambda: informer.last_error is None)


def test_honours_retry_after_on_429(kube_api: FakeKubeAPI, kube: Kube) -> None:
    kube_api.inject("GET", "/pods$", status=429, retry_after=0.6, watch=False)
    informer = Informer(kube, "pods", backoff_initial=0.01, backoff_max=0.02, watch_timeout=30)
    informer.start()
    try:
        assert informer.synced.wait(WAIT)
        first, second = kube_api.requests_for("GET", "/pods$", watch=False)
        assert second.at - first.at >= 0.55  # only Retry-After can explain the wait: backoff is <= 20 ms
    finally:
        informer.stop()


def test_backs_off_exponentially_on_500_then_recovers(kube_api: FakeKubeAPI, kube: Kube) -> None:
    kube_api.put("pods", _pod("a"))
    fault = kube_api.inject("GET", "/pods$", status=500, times=3, watch=False)
    informer = Informer(kube, "pods", backoff_initial=0.1, backoff_max=1.0, watch_timeout=30, jitter=lambda: 1.0)
    informer.start()
    try:
        eventually(lambda: informer.last_error is not None)
        assert "500" in (informer.last_error or "")
        assert informer.synced.wait(WAIT)
        assert fault.hits == 3
        lists = kube_api.requests_for("GET", "/pods$", watch=False)
        assert len(lists) == 4
        gaps = [b.at - a.at for a, b in itertools.pairwise(lists)]
        for gap, expected in zip(gaps, [0.1, 0.2, 0.4], strict=True):
            assert gap >= expected * 0.9
        assert informer.get("default/a") is not None
        assert informer.last_error is None
    finally:
        informer.stop()


def test_handler_errors_do_not_kill_the_informer(kube_api: FakeKubeAPI, make_informer: Callable[..., Informer]) -> None:
    calls: list[str] = []

    def broken(etype: str, obj: dict[str, Any]) -> None:
        calls.append(obj["metadata"]["name"])
        raise RuntimeError("handler bug")

    informer = make_informer(on_event=broken)
    kube_api.put("pods", _pod("a"))
    kube_api.put("pods", _pod("b"))
    eventually(lambda: calls == ["a", "b"])
    assert _names(informer) == {"a", "b"}


def _slim_unless_ignored(pod: dict[str, Any]) -> dict[str, Any] | None:
    """Keeps name, namespace and resourceVersion (what the informer needs) plus the node; drops ignore=yes."""
    meta = pod["metadata"]
    if (meta.get("labels") or {}).get("ignore") == "yes":
        return None
    kept = {k: meta[k] for k in ("name", "namespace", "resourceVersion")}
    return {"metadata": kept, "spec": {"nodeName": pod["spec"]["nodeName"]}}


def test_transform_caches_only_what_it_keeps(kube_api: FakeKubeAPI, make_informer: Callable[..., Informer]) -> None:
    kube_api.put("pods", _pod("a"))
    kube_api.put("pods", _pod("skip", ignore="yes"))
    rec = Recorder()
    informer = make_informer(on_event=rec, transform=_slim_unless_ignored)
    assert _names(informer) == {"a"}
    listed = informer.get("default/a")
    assert listed is not None and set(listed) == {"metadata", "spec"} and "labels" not in listed["metadata"]

    kube_api.put("pods", _pod("b", node="n2"))  # watched objects are transformed too
    kube_api.put("pods", _pod("a", ignore="yes"))  # a leaves the set of interest: DELETED
    kube_api.put("pods", _pod("skip"))  # skip enters it: ADDED
    kube_api.delete("pods", "default", "b")
    eventually(lambda: len(rec.seen()) == 5)
    assert rec.seen() == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a"), ("ADDED", "skip"), ("DELETED", "b")]
    assert _names(informer) == {"skip"}
    stored = kube_api.get("pods", "default", "skip")
    assert stored is not None
    assert informer.get("default/skip") == {
        "metadata": {"name": "skip", "namespace": "default", "resourceVersion": stored["metadata"]["resourceVersion"]},
        "spec": {"nodeName": "n1"},
    }
    kube_api.delete("pods", "default", "a")  # gone while ignored: nothing to tell
    kube_api.put("pods", _pod("c"))
    eventually(lambda: informer.get("default/c") is not None)
    assert rec.seen()[5:] == [("ADDED", "c")]


def test_transform_on_relist_and_transform_errors(
    kube_api: FakeKubeAPI, make_informer: Callable[..., Informer]
) -> None:
    kube_api.put("pods", _pod("a"))
    kube_api.put("pods", _pod("b"))

    def keep(pod: dict[str, Any]) -> dict[str, Any] | None:
        if pod["metadata"]["name"] == "bad":
            raise ValueError("transform bug")
        return _slim_unless_ignored(pod)

    rec = Recorder()
    informer = make_informer(on_event=rec, transform=keep)
    kube_api.stop()
    kube_api.put("pods", _pod("a", ignore="yes"))
    kube_api.put("pods", _pod("bad"))
    kube_api.compact()
    kube_api.start()
    eventually(lambda: informer.lists == 2)
    assert _names(informer) == {"b"}  # a is left out after the relist; bad's transform failed: left out
    assert sorted(rec.seen()[2:]) == [("DELETED", "a")]
    assert informer.last_error is None  # a broken transform does not break the informer


def test_stop_is_prompt_even_mid_watch(kube: Kube, kube_api: FakeKubeAPI) -> None:
    informer = Informer(kube, "pods", watch_timeout=300)
    informer.start()
    assert informer.synced.wait(WAIT) and informer.is_alive()
    eventually(lambda: kube_api.open_watches() == 1)
    informer.stop(timeout=WAIT)
    assert not informer.is_alive()  # within WAIT, not at the watch's 300 s end


def test_an_outage_logs_once_per_change_with_a_count(
    kube_api: FakeKubeAPI, make_informer: Callable[..., Informer], caplog: pytest.LogCaptureFixture
) -> None:
    """Every failed attempt of an outage used to log a warning, plus three urllib3 "Retrying" lines."""
    kube_api.put("pods", _pod("a"))
    informer = make_informer()
    caplog.set_level(logging.INFO)
    kube_api.stop()
    eventually(lambda: informer._failures >= 4)
    kube_api.start()
    eventually(lambda: informer.last_error is None)
    kube_api.put("pods", _pod("b"))
    eventually(lambda: _names(informer) == {"a", "b"})
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len([w for w in warnings if w.startswith("informer pods failed")]) == 1, warnings
    assert not [w for w in warnings if w.startswith("Retrying")], warnings
    assert any(r.getMessage().startswith("informer pods works again after") for r in caplog.records)
