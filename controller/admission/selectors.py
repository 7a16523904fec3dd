"""metav1.LabelSelector semantics (matchLabels and matchExpressions In/NotIn/Exists/DoesNotExist), pure."""

from __future__ import annotations

from collections.abc import Mapping

from controller.admission.settings import LabelSelector, SelectorRequirement


def _holds(req: SelectorRequirement, labels: Mapping[str, str]) -> bool:
    present = req.key in labels
    if req.operator == "Exists":
        return present
    if req.operator == "DoesNotExist":
        return not present
    if req.operator == "In":
        return present and labels[req.key] in req.values
    return not present or labels[req.key] not in req.values  # NotIn: an absent key matches, as in Kubernetes


def matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """Every term holds; a missing or empty selector matches everything."""
    if selector is None:
        return True
    if any(labels.get(k) != v for k, v in selector.match_labels.items()):
        return False
    return all(_holds(req, labels) for req in selector.match_expressions)
