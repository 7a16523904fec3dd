"""Node selector requirements (required node affinity), as Kubernetes matches them; pod label selectors
are common.label_selector."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from controller.rebalance.traits import Requirement


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def requirement_holds(r: Requirement, labels: Mapping[str, str], node_name: str) -> bool:
    """One NodeSelectorRequirement; matchFields only knows `metadata.name` (as in Kubernetes)."""
    if r.field:
        value: str | None = node_name if r.key == "metadata.name" else None
    else:
        value = labels.get(r.key)
    op = r.operator
    if op == "In":
        return value is not None and value in r.values
    if op == "NotIn":
        return value is None or value not in r.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(r.values) == 1:
        have, want = _int(value), _int(r.values[0])
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    return False  # unknown operator: matches nothing, as the API server would refuse it


def affinity_holds(terms: Sequence[Sequence[Requirement]], labels: Mapping[str, str], node_name: str) -> bool:
    """Required node affinity: no terms means no constraint; else any term whose requirements all hold
    (an empty term matches nothing, as in Kubernetes)."""
    if not terms:
        return True
    return any(term and all(requirement_holds(r, labels, node_name) for r in term) for term in terms)
