"""Online/offline classification: every rule and every malformed value."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from contract.classify import Classifier, qos_level


def pod(
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    priority: Any = None,
    priority_class: str | None = None,
    uid: str = "u1",
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if priority is not None:
        spec["priority"] = priority
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": uid,
            "annotations": annotations or {},
            "labels": labels or {},
        },
        "spec": spec,
    }


Q = "volcano.sh/qos-level"


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (pod(), "online"),
        (pod({Q: "-1"}), "offline"),
        (pod({Q: "-7"}), "offline"),
        (pod({Q: " -3 "}), "offline"),
        (pod({Q: "0"}), "online"),
        (pod({Q: "7"}), "online"),
        (pod({Q: "BE"}), "offline"),
        (pod({Q: "LS"}), "online"),
        (pod({Q: "LC"}), "online"),
        (pod({Q: "HLS"}), "online"),
        # malformed: online
        (pod({Q: "-8"}), "online"),
        (pod({Q: "8"}), "online"),
        (pod({Q: "-1.5"}), "online"),
        (pod({Q: "be"}), "online"),
        (pod({Q: ""}), "online"),
        (pod({Q: "offline"}), "online"),
        (pod({Q: "0x-1"}), "online"),
        (pod({Q: "-0_1"}), "online"),  # int() reads this as -1
        (pod({Q: "-\u0661"}), "online"),  # Arabic-Indic one: int() reads -1
        (pod({Q: "-\uff11"}), "online"),  # fullwidth one
        (pod({Q: "\u00b2"}), "online"),  # superscript two
        (pod({Q: "+1"}), "online"),
        (pod({Q: "-" + "1" * 5000}), "online"),  # longer than int() parses
        (pod({Q: "-01"}), "offline"),
        # koordinator label
        (pod(labels={"koordinator.sh/qosClass": "BE"}), "offline"),
        (pod(labels={"koordinator.sh/qosClass": "LS"}), "online"),
        (pod(labels={"koordinator.sh/qosClass": "be"}), "online"),
        # priority class and priority
        (pod(priority_class="koord-batch"), "offline"),
        (pod(priority_class="koord-free"), "offline"),
        (pod(priority_class="koord-prod"), "online"),
        (pod(priority=-99999), "offline"),
        (pod(priority=-1), "offline"),
        (pod(priority=0), "online"),
        (pod(priority=1000), "online"),
        (pod(priority="-5"), "online"),  # not an integer in the API: ignored
        # critical pods are always online, whatever else they say
        (pod({Q: "-1"}, {"koordinator.sh/qosClass": "BE"}, 2_000_000_000, "koord-batch"), "online"),
        (pod({Q: "BE"}, priority=2_000_001_000), "online"),
        (pod({Q: "BE"}, priority=1_999_999_999), "offline"),
    ],
)
def test_classification_table(obj: dict[str, Any], expected: str) -> None:
    assert Classifier().classify(obj) == expected


def test_configurable_classes_and_threshold() -> None:
    c = Classifier(offline_priority_classes=["batch"], offline_priority_below=100)
    assert c.classify(pod(priority_class="batch")) == "offline"
    assert c.classify(pod(priority_class="koord-batch")) == "online"
    assert c.classify(pod(priority=99)) == "offline"
    assert c.classify(pod(priority=100)) == "online"


def test_malformed_value_warns_once_per_pod(caplog: pytest.LogCaptureFixture) -> None:
    c = Classifier()
    with caplog.at_level(logging.WARNING, logger="contract.classify"):
        for _ in range(3):
            c.classify(pod({Q: "high"}, uid="a"))
        c.classify(pod({Q: "99"}, uid="b"))
    warnings = [r for r in caplog.records if "volcano.sh/qos-level" in r.getMessage()]
    assert len(warnings) == 2


def test_qos_level_parser() -> None:
    assert [qos_level(v) for v in ("-0_1", "-\u0661", "-1 ", "-0")] == [None, None, -1, 0]
    assert [qos_level(v) for v in ("-7", "7", "BE", "LS", "LC", "HLS", "x", "-8", "1e1")] == [
        -7,
        7,
        -1,
        1,
        2,
        2,
        None,
        None,
        None,
    ]


@pytest.mark.parametrize(
    ("where", "field", "resource", "expected"),
    [
        ("containers", "requests", "kubernetes.io/batch-cpu", "offline"),
        ("containers", "limits", "kubernetes.io/batch-memory", "offline"),
        ("initContainers", "requests", "kubernetes.io/batch-memory", "offline"),
        ("containers", "requests", "cpu", "online"),
        ("containers", "limits", "kubernetes.io/batch-gpu", "online"),
    ],
)
def test_batch_resources_make_a_pod_offline(where: str, field: str, resource: str, expected: str) -> None:
    obj = pod()
    obj["spec"][where] = [{"name": "c", "resources": {field: {resource: "1"}}}]
    assert Classifier().classify(obj) == expected
    critical = pod(priority=2_000_000_000)
    critical["spec"][where] = obj["spec"][where]
    assert Classifier().classify(critical) == "online"  # system-critical pods stay online whatever they ask
