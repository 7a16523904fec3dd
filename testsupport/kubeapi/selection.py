"""Which objects a list or watch selects: label selectors, field selectors and the namespace in the path.

Label selectors take the full set-based grammar; field selectors only the fields the real server supports
for the kind (``resource_types``), others are refused with 400 as a real server refuses them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from testsupport.kubeapi.failures import ApiFailure
from testsupport.kubeapi.resource_types import JSON, ResourceType

_LABEL_KEY = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_LABEL_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_RE_EXISTS = re.compile(rf"^\s*(?P<neg>!?)\s*(?P<key>{_LABEL_KEY})\s*$")
_RE_SET = re.compile(rf"^\s*(?P<key>{_LABEL_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$")
_RE_EQ = re.compile(rf"^\s*(?P<key>{_LABEL_KEY})\s*(?P<op>==|!=|=)\s*(?P<value>{_LABEL_VALUE})\s*$")

Predicate = Callable[[JSON], bool]


def _split_top_level(selector: str) -> list[str]:
    """Split on commas that are not inside ``in (...)`` value lists."""
    terms: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(ch)
    terms.append("".join(current))
    return terms


def parse_label_selector(selector: str) -> Predicate:
    """labelSelector: ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k``."""
    reqs: list[Callable[[Mapping[str, str]], bool]] = []
    if selector.strip():
        for term in _split_top_level(selector):
            reqs.append(_label_requirement(term))

    def match(obj: JSON) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r(labels) for r in reqs)

    return match


def _label_requirement(term: str) -> Callable[[Mapping[str, str]], bool]:
    if m := _RE_SET.match(term):
        key, values = m["key"], {v.strip() for v in m["values"].split(",") if v.strip()}
        if not values:
            raise ApiFailure(400, message=f"unable to parse requirement: {term!r}: values must be non-empty")
        if m["op"] == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _RE_EQ.match(term):
        key, value = m["key"], m["value"]
        if m["op"] == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: key in labels and labels[key] == value
    if m := _RE_EXISTS.match(term):
        key = m["key"]
        if m["neg"]:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise ApiFailure(400, message=f"unable to parse requirement: invalid label selector term {term!r}")


def _field_value(obj: JSON, path: str) -> str:
    if path == "source":
        path = "source.component"
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if path == "spec.hostNetwork" and cur is None:
        return "false"
    return "" if cur is None else str(cur)


def parse_field_selector(rt: ResourceType, selector: str) -> Predicate:
    """fieldSelector: comma-separated ``f=v``, ``f==v``, ``f!=v`` on the fields the real server supports."""
    reqs: list[tuple[str, bool, str]] = []
    for term in selector.split(",") if selector.strip() else []:
        for op in ("!=", "==", "="):
            if op in term:
                fname, value = term.split(op, 1)
                fname = fname.strip()
                if fname not in rt.fields:
                    raise ApiFailure(400, message=f'field label not supported: "{fname}"')
                reqs.append((fname, op == "!=", value.strip()))
                break
        else:
            raise ApiFailure(400, message=f"invalid selector: '{selector}'; can't understand '{term}'")

    def match(obj: JSON) -> bool:
        return all((_field_value(obj, f) != v) if neg else (_field_value(obj, f) == v) for f, neg, v in reqs)

    return match


def predicate(rt: ResourceType, ns: str | None, query: Mapping[str, str]) -> Predicate:
    """What a list or watch request selects: its namespace (None: all) and both selectors of its query."""
    labels = parse_label_selector(query.get("labelSelector", ""))
    fields = parse_field_selector(rt, query.get("fieldSelector", ""))

    def match(obj: JSON) -> bool:
        if ns is not None and (obj.get("metadata") or {}).get("namespace") != ns:
            return False
        return labels(obj) and fields(obj)

    return match
