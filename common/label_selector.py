"""Kubernetes label selectors (metav1.LabelSelector): the settings model and the match, once for every
user. The admission webhook's profiles and rebalancing's `pod_selectors` are both written in Kubernetes
spelling (`matchLabels`, `matchExpressions` with In/NotIn/Exists/DoesNotExist) and must match alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist"]


class SelectorRequirement(BaseModel):
    """One matchExpressions entry (metav1.LabelSelectorRequirement)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The label key.
    key: str = Field(min_length=1)
    #: In, NotIn, Exists or DoesNotExist.
    operator: Operator
    #: The values for In and NotIn.
    values: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _values_fit_operator(self) -> SelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs values")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self

    def holds(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator == "In":
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values  # NotIn: an absent key matches, as in Kubernetes


class LabelSelector(BaseModel):
    """metav1.LabelSelector, Kubernetes spelling: every term must hold; an empty selector matches all."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    #: Labels the object must carry.
    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    #: Requirements its labels must meet (In, NotIn, Exists, DoesNotExist).
    match_expressions: tuple[SelectorRequirement, ...] = Field(default=(), alias="matchExpressions")

    def label_keys(self) -> set[str]:
        """The label keys this selector reads."""
        return set(self.match_labels) | {r.key for r in self.match_expressions}


def matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """Every term holds; a missing or empty selector matches everything."""
    if selector is None:
        return True
    if any(labels.get(k) != v for k, v in selector.match_labels.items()):
        return False
    return all(req.holds(labels) for req in selector.match_expressions)


def matches_any(selectors: Sequence[LabelSelector], labels: Mapping[str, str]) -> bool:
    """No selectors: everything; otherwise any one of them."""
    return not selectors or any(matches(s, labels) for s in selectors)
