"""The log rules as pure decisions: a decision is logged when it changes, a repeated failure at most once
per period with a count of what was held back, and JSON lines for log pipelines."""

from __future__ import annotations

import io
import json
import logging

import pytest

from agent.cluster.node_writer import Changes, NodePublisher
from common.logs import JsonFormatter, OnChange, Repeats, repeated, setup
from kube import Kube


def test_a_decision_is_logged_when_it_changes_not_every_interval() -> None:
    seen = OnChange()
    intents = [{"cpu": "5500"}] * 5 + [{"cpu": "6000"}] * 3 + [{"cpu": "5500"}]
    logged = [i for i, intent in enumerate(intents) if seen.changed("patch", intent)]
    assert logged == [0, 5, 8]
    assert seen.changed("other node", {"cpu": "5500"}), "subjects are independent"
    seen.forget("patch")
    assert seen.changed("patch", {"cpu": "5500"}), "a forgotten subject's next value is news"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_repeated_failures_are_rate_limited_with_a_count() -> None:
    clock = Clock()
    repeats = Repeats(period=60.0, clock=clock)
    decisions = []
    for _ in range(130):  # one failure per second for 130 s
        decisions.append(repeats.occurred("patch"))
        clock.now += 1.0
    logged = [(second, held) for second, held in enumerate(decisions) if held is not None]
    assert logged == [(0, 0), (60, 59), (120, 59)]
    assert repeated(0) == "" and "59 more" in repeated(59)
    assert repeats.ended("patch") == 130, "the end of the streak counts every occurrence"
    assert repeats.ended("patch") is None, "nothing failing any more"
    assert repeats.occurred("patch") == 0, "a new streak is logged at once"


def test_streaks_are_per_subject() -> None:
    clock = Clock()
    repeats = Repeats(period=60.0, clock=clock)
    assert repeats.occurred(("evict", "a")) == 0
    assert repeats.occurred(("evict", "b")) == 0
    assert repeats.occurred(("evict", "a")) is None


def test_json_lines_for_log_pipelines() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    setup("info", "json", stream)
    try:
        logging.getLogger("colo.test").info("would patch node %s", "n1")
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("colo.test").exception("failed")
        logging.getLogger("colo.test").debug("below the level")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(d["level"], d["logger"], d["message"]) for d in lines] == [
        ("info", "colo.test", "would patch node n1"),
        ("error", "colo.test", "failed"),
    ]
    assert lines[0]["time"].endswith("Z") and "ValueError: boom" in lines[1]["exception"]
    assert isinstance(JsonFormatter().format(logging.makeLogRecord({"msg": "x"})), str)


class SameIntent:
    """An annotation owner whose intention stays the same until told otherwise (a dry run never writes it,
    so the node never catches up and the publisher sees the same changes every period)."""

    name = "test"

    def __init__(self) -> None:
        self.value = "5500"

    def changes(self, node: dict[str, object], now: float) -> Changes:
        return Changes(annotations={"volcano.sh/oversubscription-cpu": self.value})

    def committed(self, changes: Changes, now: float) -> None:
        pass


def test_dry_run_logs_would_patch_node_once_per_intention(kube: Kube, caplog: pytest.LogCaptureFixture) -> None:
    owner = SameIntent()
    node = {"metadata": {"name": "n1", "annotations": {}}}
    publisher = NodePublisher(kube, "n1", lambda: node, [owner], dry_run=True)
    with caplog.at_level(logging.INFO, logger="agent.cluster.node_writer"):
        for _ in range(10):
            assert publisher.run_once()
        owner.value = "6000"
        for _ in range(10):
            assert publisher.run_once()
    lines = [r.getMessage() for r in caplog.records if "would patch node" in r.getMessage()]
    assert len(lines) == 2 and "5500" in lines[0] and "6000" in lines[1]
    assert publisher.writes == 0


def test_repeats_is_false_while_nothing_fails() -> None:
    repeats = Repeats()
    assert not repeats
    repeats.occurred("pod-a")
    assert repeats
    repeats.ended("pod-a")
    assert not repeats
