"""What rebalancing reads of Nodes and Pods, cut out of the API objects once, when the informers see them.

Why: the informers hold 5000 Nodes and tens of thousands of Pods; keeping whole objects would cost
hundreds of MiB, and re-parsing quantities, affinity and tolerations every cycle would cost the planning
budget. `node_traits` and `pod_traits` run in the informers' transforms and the results ride along in the
slim cached objects under the key `TRAITS`. Strings shared by many objects (label keys and values,
namespaces, node names) are interned.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from contract.classify import Classifier
from kube.resources import pod_requests, quantity

#: Key of the traits inside a slim cached Node or Pod dict.
TRAITS = "rebalance"

#: Owner kinds that mean "a mirror of a static pod" (the kubelet sets the Node as owner).
_MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass(frozen=True, slots=True)
class Amounts:
    """CPU in cores and memory in bytes (requests, usage, room)."""

    cpu: float
    memory: float

    def get(self, resource: str) -> float:
        return self.cpu if resource == "cpu" else self.memory

    def __add__(self, other: Amounts) -> Amounts:
        return Amounts(self.cpu + other.cpu, self.memory + other.memory)

    def __sub__(self, other: Amounts) -> Amounts:
        return Amounts(self.cpu - other.cpu, self.memory - other.memory)


ZERO = Amounts(0.0, 0.0)
RESOURCES = ("cpu", "memory")


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str  # Exists | Equal
    value: str
    effect: str  # "" = every effect


@dataclass(frozen=True, slots=True)
class Requirement:
    """One matchExpressions (or matchFields, with key `metadata.name`) entry of a node selector term."""

    key: str
    operator: str  # In NotIn Exists DoesNotExist Gt Lt
    values: tuple[str, ...]
    field: bool = False


@dataclass(frozen=True, slots=True)
class NodeTraits:
    capacity: Amounts | None
    allocatable: Amounts | None
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool


@dataclass(frozen=True, slots=True)
class PodTraits:
    namespace: str
    name: str
    uid: str
    node: str
    owner_kinds: tuple[str, ...]
    mirror: bool
    priority: int
    offline: bool
    labels: Mapping[str, str]
    local_storage: bool
    requests: Amounts
    node_selector: Mapping[str, str]
    affinity_terms: tuple[tuple[Requirement, ...], ...]  # ORed terms of ANDed requirements; () = none
    tolerations: tuple[Toleration, ...]
    active: bool  # Running or Pending and not being deleted


#: Shared by every object without labels / node selector (most pods): no empty dict per pod.
EMPTY: Mapping[str, str] = MappingProxyType({})


def _intern_map(m: object, keys: Collection[str] | None = None) -> Mapping[str, str]:
    if not isinstance(m, Mapping):
        return EMPTY
    out = {
        sys.intern(str(k)): sys.intern(str(v))
        for k, v in m.items()
        if isinstance(k, str) and isinstance(v, str) and (keys is None or k in keys)
    }
    return out or EMPTY


@lru_cache(maxsize=4096)
def _shared_tolerations(raw: tuple[tuple[str, str, str, str], ...]) -> tuple[Toleration, ...]:
    """Most pods carry the same few default tolerations: one tuple of them for all."""
    return tuple(Toleration(*t) for t in raw)


def _amounts(raw: object) -> Amounts | None:
    if not isinstance(raw, Mapping):
        return None
    cpu, mem = quantity(raw.get("cpu")), quantity(raw.get("memory"))
    if cpu is None or mem is None:
        return None
    return Amounts(float(cpu), float(mem))


def _section(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def node_traits(node: Mapping[str, Any]) -> NodeTraits:
    """Capacity, allocatable, labels, taints and cordon state of a Node object."""
    meta = _section(node, "metadata")
    spec = _section(node, "spec")
    status = _section(node, "status")
    taints = tuple(
        Taint(sys.intern(str(t.get("key", ""))), str(t.get("value", "") or ""), str(t.get("effect", "")))
        for t in spec.get("taints") or ()
        if isinstance(t, Mapping)
    )
    return NodeTraits(
        capacity=_amounts(status.get("capacity")),
        allocatable=_amounts(status.get("allocatable")),
        labels=_intern_map(meta.get("labels")),
        taints=taints,
        unschedulable=spec.get("unschedulable") is True,
    )


def _requirements(raw: object, field: bool) -> tuple[Requirement, ...]:
    out = []
    for r in raw if isinstance(raw, list) else ():
        if isinstance(r, Mapping):
            values = tuple(str(v) for v in r.get("values") or ())
            out.append(Requirement(sys.intern(str(r.get("key", ""))), str(r.get("operator", "")), values, field))
    return tuple(out)


def _affinity_terms(spec: Mapping[str, Any]) -> tuple[tuple[Requirement, ...], ...]:
    affinity = spec.get("affinity")
    node_aff = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(node_aff, Mapping) else None
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    out = []
    for term in terms if isinstance(terms, list) else ():
        if isinstance(term, Mapping):
            out.append(
                _requirements(term.get("matchExpressions"), False) + _requirements(term.get("matchFields"), True)
            )
    return tuple(out)


def _tolerations(spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    raw = tuple(
        (
            str(t.get("key", "") or ""),
            str(t.get("operator", "") or "Equal"),
            str(t.get("value", "") or ""),
            str(t.get("effect", "") or ""),
        )
        for t in spec.get("tolerations") or ()
        if isinstance(t, Mapping)
    )
    return _shared_tolerations(raw) if raw else ()


def _local_storage(spec: Mapping[str, Any]) -> bool:
    """emptyDir or hostPath volumes: data that dies (or stays behind) with the eviction."""
    return any(isinstance(v, Mapping) and ("emptyDir" in v or "hostPath" in v) for v in spec.get("volumes") or ())


def pod_traits(pod: Mapping[str, Any], classifier: Classifier, label_keys: Collection[str]) -> PodTraits | None:
    """The traits of a bound pod (None for an unbound one); `label_keys`: the labels worth keeping."""
    meta = pod.get("metadata")
    spec = pod.get("spec")
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        return None
    node = spec.get("nodeName")
    if not isinstance(node, str) or not node:
        return None
    refs = meta.get("ownerReferences")
    owner_kinds = (
        tuple(sys.intern(str(r.get("kind"))) for r in refs if isinstance(r, Mapping) and r.get("kind"))
        if isinstance(refs, list)
        else ()
    )
    annotations = meta.get("annotations")
    mirror = (isinstance(annotations, Mapping) and _MIRROR_ANNOTATION in annotations) or "Node" in owner_kinds
    priority = spec.get("priority")
    status = pod.get("status")
    phase = status.get("phase") if isinstance(status, Mapping) else None
    cpu, mem = pod_requests(pod)
    return PodTraits(
        namespace=sys.intern(str(meta.get("namespace") or "")),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        node=sys.intern(node),
        owner_kinds=owner_kinds,
        mirror=mirror,
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        offline=classifier.classify(pod) == "offline",
        labels=_intern_map(meta.get("labels"), label_keys),
        local_storage=_local_storage(spec),
        requests=Amounts(cpu, float(mem)),
        node_selector=_intern_map(spec.get("nodeSelector")),
        affinity_terms=_affinity_terms(spec),
        tolerations=_tolerations(spec),
        active=phase in (None, "Running", "Pending") and not meta.get("deletionTimestamp"),
    )


def facts_of(obj: Mapping[str, Any]) -> Any:
    """The traits riding in a slim cached object, or None."""
    return obj.get(TRAITS)
