"""One AdmissionReview (admission.k8s.io/v1) in, one out: which profile applies to the pod and its patch.

The answer always allows the pod: a pod that matches no profile, has a system priority (>= 2000000000), is
in an excluded namespace, or that anything goes wrong with, is left unchanged and counted by outcome
(colo_controller_admission_reviews_total). A dry-run request gets the same patch as a real one, so that
`kubectl apply --dry-run=server` shows what would happen: the API server persists nothing for it, and the
webhook has no side effects of its own (`sideEffects: None`), so nothing changes anywhere.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from common.label_selector import matches
from contract.classify import CRITICAL_PRIORITY
from controller.admission.convert import ConversionError, JsonPatch, PriorityClassLookup, profile_patch
from controller.admission.settings import AdmissionSettings, Profile

log = logging.getLogger(__name__)

API_VERSION = "admission.k8s.io/v1"
SYSTEM_PRIORITY_CLASSES = frozenset({"system-node-critical", "system-cluster-critical"})

Outcome = Literal[
    "patched",  # a profile matched and the pod was changed
    "unchanged",  # a profile matched and the pod already was as it says (idempotent)
    "no_match",
    "excluded_namespace",
    "system_priority",
    "ignored",  # not a pod CREATE (the webhook configuration should not send those)
    "error",  # anything that went wrong: the pod is left as it is
]
OUTCOMES: tuple[Outcome, ...] = (
    "patched",
    "unchanged",
    "no_match",
    "excluded_namespace",
    "system_priority",
    "ignored",
    "error",
)

#: Labels of a namespace by name; None when the namespace is not known (yet).
NamespaceLookup = Callable[[str], Mapping[str, str] | None]


class BadReview(ValueError):
    """Not an AdmissionReview we can answer (no request uid): the HTTP answer is 400."""


@dataclass(frozen=True, slots=True)
class Decision:
    """What was decided for one review (the response carries the patch; this is for metrics and logs)."""

    outcome: Outcome
    profile: str | None
    patch: JsonPatch
    reason: str
    dry_run: bool


def _parse(body: bytes) -> tuple[dict[str, Any], str]:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise BadReview(f"body is not JSON: {err}") from None
    if not isinstance(doc, dict) or doc.get("kind") != "AdmissionReview" or doc.get("apiVersion") != API_VERSION:
        raise BadReview(f"not an {API_VERSION} AdmissionReview")
    request = doc.get("request")
    if not isinstance(request, dict):
        raise BadReview("AdmissionReview has no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("AdmissionReview has no request.uid")
    return request, uid


def response(uid: str, patch: JsonPatch, warning: str | None = None) -> dict[str, Any]:
    """The AdmissionReview answer: always allowed, with the patch (base64 JSONPatch) when there is one."""
    resp: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        resp["patchType"] = "JSONPatch"
        resp["patch"] = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode("ascii")
    if warning:
        resp["warnings"] = [warning[:200]]
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": resp}


class Reviewer:
    """Decides AdmissionReviews against the configured profiles (first matching profile wins)."""

    def __init__(
        self, settings: AdmissionSettings, namespace_labels: NamespaceLookup, priority_class: PriorityClassLookup
    ) -> None:
        self.settings = settings
        self.excluded = frozenset(settings.excluded_namespaces)
        self.namespace_labels = namespace_labels
        self.priority_class = priority_class

    def review(self, body: bytes) -> tuple[dict[str, Any], Decision]:
        """The answer and the decision; BadReview when there is no uid to answer to."""
        request, uid = _parse(body)
        dry_run = request.get("dryRun") is True
        try:
            decision = self.decide(request, dry_run)
        except ConversionError as err:
            decision = Decision("error", None, [], str(err), dry_run)
        except Exception as err:  # any surprise leaves the pod as it is, never a failed admission
            log.exception("admission review %s failed", uid)
            decision = Decision("error", None, [], f"internal error: {type(err).__name__}", dry_run)
        warning = f"colo: pod left unchanged: {decision.reason}" if decision.outcome == "error" else None
        return response(uid, decision.patch, warning), decision

    def decide(self, request: Mapping[str, Any], dry_run: bool) -> Decision:
        kind = request.get("kind") or {}
        if (
            request.get("operation") != "CREATE"
            or not isinstance(kind, Mapping)
            or (kind.get("group"), kind.get("kind")) != ("", "Pod")
            or request.get("subResource")
        ):
            return Decision("ignored", None, [], "not a pod CREATE", dry_run)
        pod = request.get("object")
        if not isinstance(pod, Mapping) or not isinstance(pod.get("metadata", {}), Mapping):
            raise ConversionError("request.object is not a pod")
        meta = pod.get("metadata") or {}
        namespace = request.get("namespace") or meta.get("namespace")
        if not isinstance(namespace, str) or not namespace:
            raise ConversionError("the request names no namespace")
        if namespace in self.excluded:
            return Decision("excluded_namespace", None, [], namespace, dry_run)
        spec = pod.get("spec") or {}
        priority = spec.get("priority") if isinstance(spec, Mapping) else None
        if (isinstance(priority, int) and priority >= CRITICAL_PRIORITY) or (
            isinstance(spec, Mapping) and spec.get("priorityClassName") in SYSTEM_PRIORITY_CLASSES
        ):
            return Decision("system_priority", None, [], f"priority {priority}", dry_run)
        profile = self.select(pod, namespace)
        if profile is None:
            return Decision("no_match", None, [], "no profile selects the pod", dry_run)
        patch = profile_patch(pod, profile, self.priority_class)
        return Decision("patched" if patch else "unchanged", profile.name, patch, profile.name, dry_run)

    def select(self, pod: Mapping[str, Any], namespace: str) -> Profile | None:
        """The first profile whose pod and namespace selectors both match."""
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if not isinstance(labels, Mapping):
            raise ConversionError("metadata.labels is not a map")
        ns_labels: Mapping[str, str] | None = None
        for profile in self.settings.profiles:
            if not matches(profile.selector, labels):
                continue
            if profile.namespace_selector is not None:
                if ns_labels is None:
                    ns_labels = self.namespace_labels(namespace)
                    if ns_labels is None:
                        raise ConversionError(f"namespace {namespace!r} not known (yet) to the controller")
                if not matches(profile.namespace_selector, ns_labels):
                    continue
            return profile
        return None
