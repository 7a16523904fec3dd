"""LatestNodes: our own PATCH responses bridge the informer's lag, and never hide a newer informer object."""

from __future__ import annotations

from typing import Any

from controller.latest import LatestNodes, newer


def node(name: str, rv: str, **anns: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv, "annotations": dict(anns)}}


def test_newer() -> None:
    assert newer("10", "9") is True  # integers, not strings
    assert newer("9", "10") is False
    assert newer("9", "9") is False
    assert newer("abc", "9") is None
    assert newer("", "9") is None


def test_integer_versions() -> None:
    seen: list[str] = []
    latest = LatestNodes(on_change=lambda n: seen.append(n["metadata"]["resourceVersion"]))
    old = node("n1", "9")
    latest.observed(old)
    mine = node("n1", "12", a="1")
    latest.wrote(mine)
    assert latest.get(old) is mine  # the informer lags: plan from our patch
    assert latest.ahead_of_informer() == 1
    latest.observed(node("n1", "10"))  # a lagging event from before our patch changes nothing
    assert latest.get(node("n1", "10")) is mine
    assert latest.get(node("n1", "13")) == node("n1", "13")  # a newer informer snapshot wins at once
    caught_up = node("n1", "12", a="1")
    latest.observed(caught_up)
    assert latest.ahead_of_informer() == 0
    assert latest.get(caught_up) is caught_up
    assert latest.get(node("n1", "9")) is caught_up  # a snapshot taken before the informer's last event
    latest.wrote(node("n1", "11"))  # a late response older than what the informer showed is ignored
    assert latest.ahead_of_informer() == 0
    assert seen == ["9", "12", "12"]  # the board never went back to an older version


def test_opaque_versions_wait_for_our_own_version() -> None:
    latest = LatestNodes()
    latest.observed(node("n1", "x"))
    mine = node("n1", "z")
    latest.wrote(mine)
    assert latest.get(node("n1", "x")) is mine
    latest.observed(node("n1", "y"))  # cannot be ordered: assume the watch has not reached us yet
    assert latest.get(node("n1", "y")) is mine
    caught_up = node("n1", "z")
    latest.observed(caught_up)
    assert latest.ahead_of_informer() == 0
    assert latest.get(node("n1", "y")) is caught_up  # the informer's latest event, whatever the snapshot


def test_delete_reset_and_unknown_nodes() -> None:
    latest = LatestNodes()
    latest.wrote(node("ghost", "5"))  # not (or no longer) known to the informer: ignored
    assert latest.ahead_of_informer() == 0
    latest.observed(node("n1", "1"))
    latest.wrote(node("n1", "2"))
    latest.deleted("n1")
    assert latest.get(node("n1", "1")) == node("n1", "1")
    latest.observed(node("n1", "3"))
    latest.wrote(node("n1", "4"))
    assert latest.ahead_of_informer() == 1
    latest.reset(lambda: [node("n1", "3")])
    assert latest.ahead_of_informer() == 0
    assert latest.get(node("n1", "3")) == node("n1", "3")
