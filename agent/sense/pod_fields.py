"""What the agent keeps of each pod of its node: the pod informer's transform (an allow-list).

Why: without it the informer holds every Pod whole, and a real Pod is 5-30 KB of JSON (managedFields,
env, volumes, probes, status.conditions...), several times that as Python dicts, for the handful of fields
the agent reads. Every read of a pod object is in `agent/sense/pod_source.py` (which turns a pod into its PodMeta
and finds its cgroup), through `contract.classify` and `kube.resources`; the eviction body, events and
reports are built from that PodMeta. So the cache keeps exactly these fields, shaped as in the Pod, and
those readers give the same answers on the slim pod as on the whole one (tests/test_pod_fields.py):

- metadata: name, namespace, resourceVersion (the informer's key and diff; PodMeta, the Eviction body),
  uid (PodMeta, the cgroup), creationTimestamp (eviction order's last key: the youngest first);
  labels `koordinator.sh/qosClass` (classification) and the `aggregate_label_keys` (usage by label in the
  metrics); annotations `volcano.sh/qos-level` (classification), `kubernetes.io/config.mirror` (a static
  pod's cgroup UID) and `contract.annotations.AGENT_POD_ANNOTATIONS` (quota burst, the SLO declaration).
- spec: priority (classification, eviction order), priorityClassName (classification); containers and
  initContainers, in order: name, restartPolicy (sidecars), resources.requests and .limits of cpu, memory,
  kubernetes.io/batch-cpu and kubernetes.io/batch-memory (requests, limits, batch values, memory QoS,
  container CPU limits, classes); overhead cpu and memory (requests, batch limits).
- status: phase (finished pods), qosClass (the cgroup tier), podIP (the opt-in SLO scrape), containerStatuses
  and initContainerStatuses: name, containerID (the containers' cgroups and IDs).

So PodMeta.labels holds only the kept labels. A reader of another field must add it here.

It never raises: a transform that raises makes the informer leave the pod out, which would hide it. A
field of an unexpected type is left out, as if absent (the readers then answer as for an absent field
instead of raising); name, namespace, resourceVersion and uid are kept as they come.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from contract.annotations import AGENT_POD_ANNOTATIONS, BATCH_CPU, BATCH_MEMORY, KOORD_QOS_CLASS, QOS_LEVEL
from kube import Transform

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"  # the UID kubelet named a static pod's cgroup after
KEPT_ANNOTATIONS = (QOS_LEVEL, MIRROR_ANNOTATION, *AGENT_POD_ANNOTATIONS)
KEPT_RESOURCES = ("cpu", "memory", BATCH_CPU, BATCH_MEMORY)
_IDENTITY = ("name", "namespace", "resourceVersion", "uid")
#: Pods per list request of the agent's pod informer: a (re)list holds one page of whole pods (5-30 KB of
#: JSON, up to 150 KB parsed, each) before the transform cuts them down, and what is freed that way is not
#: all given back to the system. 250 pods of 18 KB, agent RSS (bench.agent_cluster --realistic-pods): one
#: page of 500 82.2-82.4 MiB, pages of 50 74.6-74.7, of 20 70.3-71.6; a relist of 250 pods is 13 requests.
POD_LIST_PAGE_SIZE = 20


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _entries(value: object) -> list[Mapping[str, Any]]:
    """The mappings of a list (a container or status list); anything else counts as an empty list."""
    return [e for e in value if isinstance(e, Mapping)] if isinstance(value, list) else []


def _picked(source: object, keys: Collection[str]) -> dict[str, Any]:
    """The named keys of a mapping, values as they are."""
    found = _mapping(source)
    return {k: found[k] for k in keys if k in found}


def _strings(source: Mapping[str, Any], keys: Collection[str]) -> dict[str, str]:
    return {k: v for k in keys if isinstance(v := source.get(k), str)}


def _put(out: dict[str, Any], key: str, value: dict[str, Any] | list[Any]) -> None:
    if value:
        out[key] = value


def _container(c: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "name" in c:
        out["name"] = c["name"]
    out |= _strings(c, ("restartPolicy",))
    res = _mapping(c.get("resources"))
    _put(out, "resources", {f: kept for f in ("requests", "limits") if (kept := _picked(res.get(f), KEPT_RESOURCES))})
    return out


def _status(cs: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "name" in cs:
        out["name"] = cs["name"]
    return out | _strings(cs, ("containerID",))


def slim_pod(pod: Mapping[str, Any], label_keys: Collection[str] = ()) -> dict[str, Any]:
    """The fields of `pod` the agent reads (see the module docstring); `label_keys`: the labels kept
    besides koordinator's QoS class. Empty mappings and lists are left out (the readers take absent as
    empty)."""
    if not isinstance(pod, Mapping):
        return {}
    meta, spec, status = _mapping(pod.get("metadata")), _mapping(pod.get("spec")), _mapping(pod.get("status"))
    out_meta: dict[str, Any] = {k: meta[k] for k in _IDENTITY if k in meta}
    out_meta |= _strings(meta, ("creationTimestamp",))
    _put(out_meta, "labels", _picked(meta.get("labels"), (KOORD_QOS_CLASS, *label_keys)))
    _put(out_meta, "annotations", _picked(meta.get("annotations"), KEPT_ANNOTATIONS))
    out_spec: dict[str, Any] = {}
    for field in ("containers", "initContainers"):
        _put(out_spec, field, [_container(c) for c in _entries(spec.get(field))])
    priority = spec.get("priority")
    if isinstance(priority, int) and not isinstance(priority, bool):
        out_spec["priority"] = priority
    out_spec |= _strings(spec, ("priorityClassName",))
    _put(out_spec, "overhead", _picked(spec.get("overhead"), ("cpu", "memory")))
    out_status: dict[str, Any] = _strings(status, ("phase", "qosClass", "podIP"))
    for field in ("containerStatuses", "initContainerStatuses"):
        _put(out_status, field, [_status(cs) for cs in _entries(status.get(field))])
    return {"metadata": out_meta, "spec": out_spec, "status": out_status}


def pod_transform(label_keys: Collection[str] = ()) -> Transform:
    """`slim_pod` as the informer's transform, keeping `label_keys` (the agent's `aggregate_label_keys`)."""
    keys = tuple(label_keys)
    return lambda pod: slim_pod(pod, keys)
