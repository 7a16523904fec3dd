"""The colocation-profile webhook's decisions: AdmissionReviews as kube-apiserver sends them, the patch applied
with a real JSON-patch implementation, the result validated against the Kubernetes schema."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping
from typing import Any

import jsonpatch  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
from pydantic import ValidationError

from controller.admission.convert import BATCH_CPU, BATCH_MEMORY, PriorityClassInfo, convert_resources
from controller.admission.review import BadReview, Decision, Reviewer
from controller.admission.settings import AdmissionSettings, Profile
from testsupport.admission_reviews import body, container, pod, review

K8S_VERSION = "1.37"
Obj = dict[str, Any]

NAMESPACES: dict[str, dict[str, str]] = {
    "spark": {"kubernetes.io/metadata.name": "spark", "colo.io/colocation": "batch", "team": "data"},
    "ci": {"kubernetes.io/metadata.name": "ci", "colo.io/colocation": "ci"},
    "web": {"kubernetes.io/metadata.name": "web", "tier": "online"},
    "kube-system": {"kubernetes.io/metadata.name": "kube-system"},
}
PRIORITY_CLASSES = {
    "koord-batch": PriorityClassInfo(5999, None),
    "batch-never": PriorityClassInfo(100, "Never"),
    "too-high": PriorityClassInfo(2_000_000_000, None),
}


def settings(*profiles: Obj, **extra: Any) -> AdmissionSettings:
    return AdmissionSettings.model_validate({"profiles": list(profiles), **extra})


BATCH = {
    "name": "spark-batch",
    "namespaceSelector": {"matchLabels": {"colo.io/colocation": "batch"}},
    "selector": {"matchExpressions": [{"key": "spark-role", "operator": "In", "values": ["executor", "driver"]}]},
    "qos_level": "BE",
    "koordinator_qos_class": "BE",
    "priority_class_name": "koord-batch",
    "scheduler_name": "volcano",
    "batch_resources": True,
}


def reviewer(s: AdmissionSettings, namespaces: Mapping[str, dict[str, str]] = NAMESPACES) -> Reviewer:
    return Reviewer(s, namespaces.get, PRIORITY_CLASSES.get)


def decide(r: Reviewer, doc: Obj) -> tuple[Obj, Decision]:
    answer, decision = r.review(body(doc))
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    resp = answer["response"]
    assert resp["uid"] == doc["request"]["uid"] and resp["allowed"] is True
    return answer, decision


def patched(answer: Obj, obj: Obj) -> Obj:
    """The pod as the API server stores it: the base64 JSONPatch applied by a real RFC 6902 implementation."""
    resp = answer["response"]
    if "patch" not in resp:
        return copy.deepcopy(obj)
    assert resp["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(resp["patch"]))
    out: Obj = jsonpatch.apply_patch(obj, ops)
    return out


def validate(p: Obj) -> None:
    doc = copy.deepcopy(p)
    doc["metadata"].pop("creationTimestamp", None)  # null until the API server stores it
    doc["metadata"]["name"] = "spark-pi-exec-1"  # generateName is turned into a name after admission
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def resources(p: Obj, field: str = "containers", i: int = 0) -> Obj:
    res: Obj = p["spec"][field][i]["resources"]
    return res


def executor(**kw: Any) -> Obj:
    return pod(labels={"spark-role": "executor", "app": "spark-pi"}, **kw)


# ---------------------------------------------------------------------------------------------------------
# a matching pod, end to end


def test_a_matching_pod_is_converted_exactly_and_still_a_valid_pod() -> None:
    obj = executor(
        init_containers=[container("fetch", {"limits": {"cpu": "250m", "memory": "64Mi"},
                                             "requests": {"cpu": "250m", "memory": "64Mi"}})],
        containers=[
            container("executor", {"limits": {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "1Gi"},
                                   "requests": {"cpu": "1500m", "memory": "3Gi", "ephemeral-storage": "1Gi"}}),
            container("sidecar", {"limits": {"cpu": "100m"}, "requests": {"cpu": "100m"}}),
        ],
    )  # fmt: skip
    answer, decision = decide(reviewer(settings(BATCH)), review(obj))
    assert (decision.outcome, decision.profile) == ("patched", "spark-batch")
    out = patched(answer, obj)
    validate(out)
    assert out["metadata"]["annotations"] == {"volcano.sh/qos-level": "BE"}
    assert out["metadata"]["labels"] == {"spark-role": "executor", "app": "spark-pi", "koordinator.sh/qosClass": "BE"}
    spec = out["spec"]
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == (
        "koord-batch",
        5999,
        "PreemptLowerPriority",
    )
    assert spec["schedulerName"] == "volcano"
    assert resources(out, "initContainers") == {
        "limits": {BATCH_CPU: "250", BATCH_MEMORY: str(64 << 20)},
        "requests": {BATCH_CPU: "250", BATCH_MEMORY: str(64 << 20)},
    }
    assert resources(out) == {
        "limits": {"ephemeral-storage": "1Gi", BATCH_CPU: "2000", BATCH_MEMORY: str(4 << 30)},
        "requests": {"ephemeral-storage": "1Gi", BATCH_CPU: "1500", BATCH_MEMORY: str(3 << 30)},
    }
    assert resources(out, "containers", 1) == {"limits": {BATCH_CPU: "100"}, "requests": {BATCH_CPU: "100"}}
    # everything else is as it was
    for key in ("volumes", "tolerations", "serviceAccountName", "restartPolicy"):
        assert spec[key] == obj["spec"][key]


def test_an_already_converted_pod_is_not_patched_again() -> None:
    r = reviewer(settings(BATCH))
    obj = executor()
    answer, _ = decide(r, review(obj))
    once = patched(answer, obj)
    answer, decision = decide(r, review(once))
    assert decision.outcome == "unchanged" and "patch" not in answer["response"]


def test_a_dry_run_gets_the_same_patch_and_is_counted_as_one() -> None:
    r = reviewer(settings(BATCH))
    obj = executor()
    doc = review(obj)
    real, _ = decide(r, doc)
    doc["request"]["dryRun"] = True
    dry, decision = decide(r, doc)
    assert decision.dry_run and decision.outcome == "patched"
    assert dry["response"]["patch"] == real["response"]["patch"]


def test_the_class_preemption_policy_comes_with_the_class() -> None:
    profile = {"name": "p", "priority_class_name": "batch-never"}
    answer, _ = decide(reviewer(settings(profile)), review(executor()))
    spec = patched(answer, executor())["spec"]
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == ("batch-never", 100, "Never")


def test_a_profile_without_conversion_leaves_resources_alone() -> None:
    answer, _ = decide(reviewer(settings({"name": "mark", "qos_level": "-1"})), review(executor()))
    out = patched(answer, executor())
    assert out["spec"] == executor()["spec"] and out["metadata"]["annotations"] == {"volcano.sh/qos-level": "-1"}


# ---------------------------------------------------------------------------------------------------------
# the conversion table


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"requests": {"cpu": "100m"}}, {"requests": {BATCH_CPU: "100"}}),
        ({"requests": {"cpu": "1"}, "limits": {"cpu": "1.5"}}, {"requests": {BATCH_CPU: "1000"}, "limits": {BATCH_CPU: "1500"}}),
        ({"requests": {"cpu": "0.0001"}}, {"requests": {BATCH_CPU: "1"}}),  # 0.1m rounds up to 1m
        ({"requests": {"cpu": "2500u"}}, {"requests": {BATCH_CPU: "3"}}),
        ({"requests": {"cpu": "1e-3"}}, {"requests": {BATCH_CPU: "1"}}),
        ({"requests": {"cpu": "0"}}, {"requests": {BATCH_CPU: "0"}}),
        ({"limits": {"cpu": "3"}}, {"requests": {BATCH_CPU: "3000"}, "limits": {BATCH_CPU: "3000"}}),  # limit gives request
        ({"requests": {"memory": "1Gi"}}, {"requests": {BATCH_MEMORY: "1073741824"}}),
        ({"requests": {"memory": "1G"}}, {"requests": {BATCH_MEMORY: "1000000000"}}),
        ({"requests": {"memory": "1.5Ki"}}, {"requests": {BATCH_MEMORY: "1536"}}),
        ({"requests": {"memory": "129e6"}}, {"requests": {BATCH_MEMORY: "129000000"}}),
        ({"requests": {"memory": "100m"}}, {"requests": {BATCH_MEMORY: "1"}}),  # 0.1 byte rounds up
        ({"limits": {"memory": "512Mi"}}, {"requests": {BATCH_MEMORY: "536870912"}, "limits": {BATCH_MEMORY: "536870912"}}),
        ({"requests": {"cpu": "1", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
         {"requests": {"nvidia.com/gpu": "1", BATCH_CPU: "1000"}, "limits": {"nvidia.com/gpu": "1"}}),
        ({"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}, {"requests": {BATCH_CPU: "1000"}, "claims": [{"name": "gpu"}]}),
    ],
)  # fmt: skip
def test_conversion_table(given: Obj, expected: Obj) -> None:
    assert convert_resources(given, "c") == expected


def test_nothing_to_convert_is_no_change() -> None:
    assert convert_resources({}, "c") is None
    assert convert_resources({"requests": {BATCH_CPU: "500"}, "limits": {BATCH_CPU: "1000"}}, "c") is None
    assert convert_resources({"limits": {"ephemeral-storage": "1Gi"}}, "c") is None


# ---------------------------------------------------------------------------------------------------------
# selectors


def pod_selector(*exprs: Obj, match_labels: Obj | None = None) -> Obj:
    sel: Obj = {"matchExpressions": list(exprs)}
    if match_labels is not None:
        sel["matchLabels"] = match_labels
    return {"name": "p", "qos_level": "BE", "selector": sel}


@pytest.mark.parametrize(
    ("profile", "labels", "selected"),
    [
        (pod_selector(match_labels={"app": "spark-pi"}), {"app": "spark-pi"}, True),
        (pod_selector(match_labels={"app": "spark-pi"}), {"app": "web"}, False),
        (pod_selector(match_labels={"app": "spark-pi"}), {}, False),
        (pod_selector({"key": "role", "operator": "In", "values": ["a", "b"]}), {"role": "b"}, True),
        (pod_selector({"key": "role", "operator": "In", "values": ["a", "b"]}), {"role": "c"}, False),
        (pod_selector({"key": "role", "operator": "In", "values": ["a"]}), {}, False),
        (pod_selector({"key": "role", "operator": "NotIn", "values": ["a"]}), {"role": "b"}, True),
        (pod_selector({"key": "role", "operator": "NotIn", "values": ["a"]}), {"role": "a"}, False),
        (pod_selector({"key": "role", "operator": "NotIn", "values": ["a"]}), {}, True),  # absent key: NotIn holds
        (pod_selector({"key": "role", "operator": "Exists"}), {"role": ""}, True),
        (pod_selector({"key": "role", "operator": "Exists"}), {}, False),
        (pod_selector({"key": "role", "operator": "DoesNotExist"}), {}, True),
        (pod_selector({"key": "role", "operator": "DoesNotExist"}), {"role": "x"}, False),
        # every term must hold
        (pod_selector({"key": "role", "operator": "Exists"}, match_labels={"app": "x"}), {"role": "r"}, False),
        (pod_selector({"key": "role", "operator": "Exists"}, {"key": "gpu", "operator": "DoesNotExist"},
                      match_labels={"app": "x"}), {"role": "r", "app": "x"}, True),
        ({"name": "p", "qos_level": "BE", "selector": {}}, {}, True),  # empty selector: every pod
        ({"name": "p", "qos_level": "BE"}, {"any": "thing"}, True),  # no selector: every pod
    ],
)  # fmt: skip
def test_pod_selector_semantics(profile: Obj, labels: Obj, selected: bool) -> None:
    _, decision = decide(reviewer(settings(profile)), review(pod(labels=labels)))
    assert decision.outcome == ("patched" if selected else "no_match")


@pytest.mark.parametrize(
    ("namespace_selector", "namespace", "selected"),
    [
        ({"matchLabels": {"colo.io/colocation": "batch"}}, "spark", True),
        ({"matchLabels": {"colo.io/colocation": "batch"}}, "ci", False),
        ({"matchExpressions": [{"key": "colo.io/colocation", "operator": "In", "values": ["batch", "ci"]}]}, "ci", True),
        ({"matchExpressions": [{"key": "colo.io/colocation", "operator": "Exists"}]}, "web", False),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["online"]}]}, "web", False),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, "spark", True),
        ({"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["ci"]}]}, "ci", True),
    ],
)  # fmt: skip
def test_namespace_selector_uses_the_namespaces_labels(namespace_selector: Obj, namespace: str, selected: bool) -> None:
    profile = {"name": "p", "qos_level": "BE", "namespaceSelector": namespace_selector}
    _, decision = decide(reviewer(settings(profile)), review(pod(namespace=namespace)))
    assert decision.outcome == ("patched" if selected else "no_match")


def test_the_first_matching_profile_wins() -> None:
    ci = {"name": "ci", "namespaceSelector": {"matchLabels": {"colo.io/colocation": "ci"}}, "qos_level": "-2"}
    everything = {"name": "all", "qos_level": "BE"}
    r = reviewer(settings(ci, everything))
    assert decide(r, review(pod(namespace="ci")))[1].profile == "ci"
    assert decide(r, review(pod(namespace="spark")))[1].profile == "all"


def test_the_namespace_is_only_looked_up_when_a_profile_needs_it() -> None:
    asked: list[str] = []

    def lookup(ns: str) -> dict[str, str] | None:
        asked.append(ns)
        return NAMESPACES.get(ns)

    r = Reviewer(settings(BATCH), lookup, PRIORITY_CLASSES.get)
    decide(r, review(pod(labels={"spark-role": "none"})))  # the pod selector already fails
    assert asked == []
    decide(r, review(executor()))
    assert asked == ["spark"]


# ---------------------------------------------------------------------------------------------------------
# left unchanged


@pytest.mark.parametrize(
    ("doc", "outcome"),
    [
        (review(executor(namespace="kube-system")), "excluded_namespace"),
        (review(executor(priority=2_000_000_000, priority_class="system-cluster-critical")), "system_priority"),
        (review(executor(priority=2_000_001_000)), "system_priority"),
        (review(executor(priority_class="system-node-critical")), "system_priority"),
        (review(executor(namespace="web")), "no_match"),
        (review(executor(), operation="UPDATE"), "ignored"),
    ],
    ids=["excluded-namespace", "system-cluster-critical", "priority-2000001000", "system-node-critical",
         "no-match", "update"],
)  # fmt: skip
def test_pods_left_unchanged(doc: Obj, outcome: str) -> None:
    answer, decision = decide(reviewer(settings(BATCH)), doc)
    assert decision.outcome == outcome and "patch" not in answer["response"]


def test_excluded_namespaces_are_configurable() -> None:
    r = reviewer(settings({"name": "p", "qos_level": "BE"}, excluded_namespaces=["spark"]))
    assert decide(r, review(pod(namespace="spark")))[1].outcome == "excluded_namespace"
    assert decide(r, review(pod(namespace="kube-system")))[1].outcome == "patched"


def bad_resources(res: Obj) -> Obj:
    return executor(containers=[container("executor", res)])


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        (bad_resources({"requests": {"cpu": "lots"}}), "'lots' is not a Kubernetes quantity"),
        (bad_resources({"requests": {"cpu": "1K"}}), "'1K' is not a Kubernetes quantity"),
        (bad_resources({"requests": {"memory": "NaN"}}), "'NaN' is not a Kubernetes quantity"),
        (bad_resources({"requests": {"cpu": "-1"}}), "negative quantity"),
        (bad_resources({"requests": {"cpu": "1", "hugepages-2Mi": "2Mi"}, "limits": {"hugepages-2Mi": "2Mi"}}),
         "hugepages"),
        (bad_resources({"requests": {"cpu": "1", BATCH_CPU: "1000"}}), "has both cpu and kubernetes.io/batch-cpu"),
        (bad_resources("x"), "resources is not an object"),  # type: ignore[arg-type]
        (executor(priority_class="koord-batch") | {"spec": {"containers": "no"}}, "spec.containers is not a list"),
    ],
)  # fmt: skip
def test_pods_that_cannot_be_converted_are_left_unchanged_with_a_warning(obj: Obj, reason: str) -> None:
    answer, decision = decide(reviewer(settings(BATCH)), review(obj))
    assert decision.outcome == "error" and "patch" not in answer["response"]
    assert reason in decision.reason
    (warning,) = answer["response"]["warnings"]
    assert warning.startswith("colo: pod left unchanged: ") and reason[:40] in warning


def test_an_unknown_priority_class_or_namespace_leaves_the_pod_unchanged() -> None:
    profile = dict(BATCH, priority_class_name="missing")
    _, decision = decide(reviewer(settings(profile)), review(executor()))
    assert (decision.outcome, decision.reason) == ("error", "PriorityClass 'missing' not found")
    _, decision = decide(reviewer(settings(dict(BATCH, priority_class_name="too-high"))), review(executor()))
    assert decision.outcome == "error" and "system priority" in decision.reason
    _, decision = decide(reviewer(settings(BATCH), namespaces={}), review(executor()))
    assert decision.outcome == "error" and "namespace 'spark' not known" in decision.reason


def test_pod_level_cpu_resources_cannot_be_converted() -> None:
    obj = executor()
    obj["spec"]["resources"] = {"limits": {"cpu": "4"}}
    _, decision = decide(reviewer(settings(BATCH)), review(obj))
    assert decision.outcome == "error" and "pod-level resources" in decision.reason


def test_a_failing_lookup_is_an_error_not_a_failed_admission() -> None:
    def broken(_: str) -> dict[str, str] | None:
        raise RuntimeError("boom")

    answer, decision = Reviewer(settings(BATCH), broken, PRIORITY_CLASSES.get).review(body(review(executor())))
    assert answer["response"]["allowed"] is True and decision.outcome == "error"
    assert decision.reason == "internal error: RuntimeError"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"not json", "body is not JSON"),
        (b"[]", "not an admission.k8s.io/v1 AdmissionReview"),
        (json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1", "request": {"uid": "u"}}).encode(),
         "not an admission.k8s.io/v1 AdmissionReview"),
        (json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}).encode(), "has no request"),
        (json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {"uid": 5}}).encode(),
         "has no request.uid"),
    ],
)  # fmt: skip
def test_malformed_reviews_are_refused_with_a_reason(raw: bytes, message: str) -> None:
    with pytest.raises(BadReview, match=message):
        reviewer(settings(BATCH)).review(raw)


def test_a_review_without_an_object_or_namespace_is_an_error() -> None:
    doc = review(executor())
    doc["request"]["object"] = None
    assert decide(reviewer(settings(BATCH)), doc)[1].reason == "request.object is not a pod"
    doc = review(executor(), namespace="")
    doc["request"]["object"]["metadata"].pop("namespace")
    assert decide(reviewer(settings(BATCH)), doc)[1].reason == "the request names no namespace"


# ---------------------------------------------------------------------------------------------------------
# settings


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        ({"name": "p"}, "sets nothing"),
        ({"name": "p", "qos_level": "1"}, "offline"),
        ({"name": "p", "qos_level": "LS"}, "offline"),
        ({"name": "p", "koordinator_qos_class": "LS"}, "koordinator_qos_class"),
        ({"name": "p", "qos_level": "BE", "selector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
         "needs values"),
        ({"name": "p", "qos_level": "BE", "selector": {"matchExpressions": [{"key": "a", "operator": "Exists",
                                                                             "values": ["x"]}]}}, "takes no values"),
        ({"name": "p", "qos_level": "BE", "selector": {"matchExpressions": [{"key": "a", "operator": "Gt",
                                                                             "values": ["1"]}]}}, "operator"),
        ({"name": "p", "qos_level": "BE", "batch": True}, "batch"),
    ],
)  # fmt: skip
def test_bad_profiles_are_refused(profile: Obj, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Profile.model_validate(profile)


def test_profile_names_are_unique() -> None:
    with pytest.raises(ValidationError, match="unique"):
        settings({"name": "a", "qos_level": "BE"}, {"name": "a", "qos_level": "-1"})


def test_a_relative_admission_file_is_found_next_to_the_config(tmp_path: Any) -> None:
    from controller.config import load_config

    (tmp_path / "config.yaml").write_text("admission_file: admission.yaml\n", encoding="utf-8")
    assert load_config(str(tmp_path / "config.yaml")).admission_file == str(tmp_path / "admission.yaml")
