"""What a profile changes in a pod, as RFC 6902 JSON patch operations (pure; nothing here talks to the API).

Conversion to batch resources: every container's and init container's `cpu` request and limit become
`kubernetes.io/batch-cpu` in integer milli-cores (rounded up), `memory` becomes `kubernetes.io/batch-memory`
in bytes (rounded up); a limit without a request gives the request, as the API server's defaulting does.
Both names are in the `kubernetes.io/` domain, so the API server treats them as native resources that may
be overcommitted (request below limit allowed), and kube-scheduler and kubelet account them like any
scalar resource. An unchanged pod (already converted, or already as the profile says) gives no operation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from contract.annotations import BATCH_CPU, BATCH_MEMORY
from contract.classify import CRITICAL_PRIORITY, KOORD_QOS_LABEL, QOS_LEVEL_ANNOTATION
from controller.admission.settings import Profile
from kube.quantity import ceil_int, parse_quantity

#: (native resource, batch resource, factor to the batch unit)
_CONVERSIONS = (("cpu", BATCH_CPU, Decimal(1000)), ("memory", BATCH_MEMORY, Decimal(1)))
_CONTAINER_LISTS = ("initContainers", "containers")
DEFAULT_PREEMPTION_POLICY = "PreemptLowerPriority"

JsonPatch = list[dict[str, Any]]


class ConversionError(ValueError):
    """The pod cannot be changed as the profile says (the message says why); it is left as it is."""


@dataclass(frozen=True, slots=True)
class PriorityClassInfo:
    """What the Priority admission plugin would copy from a PriorityClass into the pod."""

    value: int
    preemption_policy: str | None


PriorityClassLookup = Callable[[str], PriorityClassInfo | None]


def pointer(*tokens: str | int) -> str:
    """An RFC 6901 JSON pointer ('/' and '~' escaped)."""
    return "".join("/" + str(t).replace("~", "~0").replace("/", "~1") for t in tokens)


def _set_map_entry(ops: JsonPatch, obj: Mapping[str, Any], parent: tuple[str, ...], key: str, value: str) -> None:
    current = obj
    for token in parent:
        current = current.get(token) if isinstance(current, Mapping) else None  # type: ignore[assignment]
    if not isinstance(current, Mapping):
        ops.append({"op": "add", "path": pointer(*parent), "value": {key: value}})
    elif current.get(key) != value:
        ops.append({"op": "add", "path": pointer(*parent, key), "value": value})


def _quantity(value: object, where: str) -> Decimal:
    try:
        q = parse_quantity(value)
    except ValueError as err:
        raise ConversionError(f"{where}: {err}") from None
    if q < 0:
        raise ConversionError(f"{where}: negative quantity {value!r}")
    return q


def convert_resources(resources: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    """A container's `resources` with cpu/memory turned into batch resources, or None if nothing changes."""
    requests = dict(resources.get("requests") or {})
    limits = dict(resources.get("limits") or {})
    if any(k.startswith("hugepages-") for k in (*requests, *limits)):
        raise ConversionError(f"{where}: uses hugepages, which the API server accepts only with cpu or memory")
    changed = False
    for native, batch, factor in _CONVERSIONS:
        if native not in requests and native not in limits:
            continue
        if batch in requests or batch in limits:
            raise ConversionError(f"{where}: has both {native} and {batch}")
        limit = _quantity(limits.pop(native), f"{where}.limits.{native}") if native in limits else None
        request = _quantity(requests.pop(native), f"{where}.requests.{native}") if native in requests else limit
        if request is not None:
            requests[batch] = str(ceil_int(request * factor))
        if limit is not None:
            limits[batch] = str(ceil_int(limit * factor))
        changed = True
    if not changed:
        return None
    out = {k: v for k, v in resources.items() if k not in ("requests", "limits")}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _priority_ops(ops: JsonPatch, spec: Mapping[str, Any], name: str, lookup: PriorityClassLookup) -> None:
    """priorityClassName with the priority and preemption policy it implies.

    kube-apiserver runs its Priority admission plugin before the mutating webhooks: `spec.priority` already
    holds the value of the pod's original class (or the global default, or 0). A changed class name must
    therefore come with its value and preemption policy, or the pod would run at the old priority (and a
    re-run of the plugin would refuse a priority that does not match the class)."""
    pc = lookup(name)
    if pc is None:
        raise ConversionError(f"PriorityClass {name!r} not found")
    if pc.value >= CRITICAL_PRIORITY:
        raise ConversionError(f"PriorityClass {name!r} is a system priority ({pc.value})")
    policy = pc.preemption_policy or DEFAULT_PREEMPTION_POLICY
    if spec.get("priorityClassName") != name:
        ops.append({"op": "add", "path": "/spec/priorityClassName", "value": name})
    if spec.get("priority") != pc.value:
        ops.append({"op": "add", "path": "/spec/priority", "value": pc.value})
    if spec.get("preemptionPolicy") != policy:
        ops.append({"op": "add", "path": "/spec/preemptionPolicy", "value": policy})


def profile_patch(pod: Mapping[str, Any], profile: Profile, priority_class: PriorityClassLookup) -> JsonPatch:
    """The operations that make `pod` what `profile` says; [] when it already is. ConversionError: leave it."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise ConversionError("the pod has no spec")
    ops: JsonPatch = []
    if profile.qos_level is not None:
        _set_map_entry(ops, pod, ("metadata", "annotations"), QOS_LEVEL_ANNOTATION, profile.qos_level)
    if profile.koordinator_qos_class is not None:
        _set_map_entry(ops, pod, ("metadata", "labels"), KOORD_QOS_LABEL, profile.koordinator_qos_class)
    if profile.priority_class_name is not None:
        _priority_ops(ops, spec, profile.priority_class_name, priority_class)
    if profile.scheduler_name is not None and spec.get("schedulerName") != profile.scheduler_name:
        ops.append({"op": "add", "path": "/spec/schedulerName", "value": profile.scheduler_name})
    if profile.batch_resources:
        pod_resources = spec.get("resources")
        if isinstance(pod_resources, Mapping) and any(
            k in (pod_resources.get(f) or {}) for f in ("requests", "limits") for k in ("cpu", "memory")
        ):
            raise ConversionError("pod-level resources (spec.resources) name cpu/memory; they cannot be batch")
        for field in _CONTAINER_LISTS:
            containers = spec.get(field) or []
            if not isinstance(containers, list):
                raise ConversionError(f"spec.{field} is not a list")
            for i, container in enumerate(containers):
                if not isinstance(container, Mapping):
                    raise ConversionError(f"spec.{field}[{i}] is not an object")
                resources = container.get("resources") or {}
                if not isinstance(resources, Mapping):
                    raise ConversionError(f"spec.{field}[{i}].resources is not an object")
                new = convert_resources(resources, f"spec.{field}[{i}].resources")
                if new is not None:
                    ops.append({"op": "add", "path": pointer("spec", field, i, "resources"), "value": new})
    return ops
