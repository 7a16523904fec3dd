"""What a pass samples: each pod's metadata and its cgroups — from the API server's pods in a cluster
(`KubePodSource`: this node's pods as the informer keeps them, mapped to their cgroups through `cgroup/`), from
the cgroup tree alone standalone (`CgroupPodSource`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from agent.node_state import BatchRequests, batch_requests
from agent.snapshot import ContainerBatch, PodBatch, PodMeta
from cgroup import (
    ContainerID,
    Layout,
    PathModel,
    PodCgroup,
    discover_pods,
    normalize_qos,
    parse_container_id,
    resolve_pod,
)
from cgroup.kubelet_rules import BatchResources
from cgroup.paths import QoS
from contract.annotations import AGENT_POD_ANNOTATIONS
from contract.classify import Classifier, has_batch_resources
from kube.quantity import ceil_int
from kube.resources import container_batch, pod_limits, pod_requests, quantity

log = logging.getLogger(__name__)


class PodSource(Protocol):
    """What to sample this tick: each pod's metadata and its cgroups."""

    def pods(self, now: float) -> Sequence[tuple[PodMeta, PodCgroup]]: ...

    def vanished(self, uid: str) -> None:
        """A pod's cgroup is gone: look again before the next pass."""


class CgroupPodSource:
    """Standalone: pods found in the cgroup tree alone, re-scanned every `rescan_seconds` or when one vanished."""

    def __init__(self, layout: Layout, model: PathModel, rescan_seconds: float = 10.0) -> None:
        self.layout, self.model, self.rescan_seconds = layout, model, rescan_seconds
        self._pods: list[tuple[PodMeta, PodCgroup]] = []
        self._scanned: float | None = None

    def pods(self, now: float) -> Sequence[tuple[PodMeta, PodCgroup]]:
        if self._scanned is None or now - self._scanned >= self.rescan_seconds:
            self._pods = [(PodMeta(p.uid), p) for p in discover_pods(self.layout, self.model)]
            self._scanned = now
        return self._pods

    def vanished(self, uid: str) -> None:
        self._scanned = None


FINISHED_PHASES = ("Succeeded", "Failed")


def _timestamp(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _running_ids(pod: dict[str, Any]) -> dict[str, str]:
    """Container name -> the ID it runs under, over initContainerStatuses and containerStatuses (names are
    unique across both lists); a status without a parseable ID is left out."""
    status = pod.get("status") or {}
    out: dict[str, str] = {}
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        raw = cs.get("containerID")
        if raw and cs.get("name"):
            try:
                out[str(cs["name"])] = parse_container_id(raw).id
            except ValueError:
                continue
    return out


def _container_memory(pod: dict[str, Any]) -> dict[str, tuple[int, int | None]]:
    """Memory request and limit (bytes) of each running container by container ID (memory QoS)."""
    ids = _running_ids(pod)
    out: dict[str, tuple[int, int | None]] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        cid = ids.get(str(c.get("name")))
        if cid is None:
            continue
        res = c.get("resources") or {}
        req = quantity((res.get("requests") or {}).get("memory"))
        lim = quantity((res.get("limits") or {}).get("memory"))
        if req is None:
            req = lim  # kubelet's rule: a limit without a request requests the limit
        out[cid] = (0 if req is None else int(req), None if lim is None else int(lim))
    return out


def _container_cpu_limits(pod: dict[str, Any]) -> dict[str, float | None]:
    """CPU limit of each running container by container ID (what the runtime wrote as its CFS quota)."""
    ids = _running_ids(pod)
    out: dict[str, float | None] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        cid = ids.get(str(c.get("name")))
        if cid is not None:
            limit = quantity(((c.get("resources") or {}).get("limits") or {}).get("cpu"))
            out[cid] = None if limit is None else float(limit)
    return out


def _batch(pod: dict[str, Any]) -> PodBatch | None:
    """The pod's kubernetes.io/batch-* values, per container with its running ID; None without any."""
    if not has_batch_resources(pod):
        return None
    spec, ids = pod.get("spec") or {}, _running_ids(pod)
    containers: list[ContainerBatch] = []
    for init, specs in ((True, spec.get("initContainers") or []), (False, spec.get("containers") or [])):
        for c in specs:
            cpu_req, cpu_lim, mem_req, mem_lim = container_batch(c)
            sidecar = init and c.get("restartPolicy") == "Always"
            res = BatchResources(cpu_req, cpu_lim, mem_req, mem_lim, init=init, sidecar=sidecar)
            name = str(c.get("name"))
            containers.append(ContainerBatch(name, ids.get(name), res))
    overhead = spec.get("overhead") or {}
    cpu_overhead, mem_overhead = quantity(overhead.get("cpu")), quantity(overhead.get("memory"))
    return PodBatch(
        tuple(containers),
        0 if cpu_overhead is None else ceil_int(cpu_overhead * 1000),
        0 if mem_overhead is None else ceil_int(mem_overhead),
    )


def pod_meta(pod: dict[str, Any], classifier: Classifier) -> PodMeta:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    cpu_req, mem_req = pod_requests(pod)
    cpu_lim, mem_lim = pod_limits(pod)
    priority = spec.get("priority")
    return PodMeta(
        uid=str(meta.get("uid") or ""),
        namespace=meta.get("namespace"),
        name=meta.get("name"),
        pod_class=classifier.classify(pod),
        labels=dict(meta.get("labels") or {}),
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else None,
        cpu_request_cores=cpu_req,
        memory_request_bytes=mem_req,
        cpu_limit_cores=cpu_lim,
        memory_limit_bytes=mem_lim,
        creation_timestamp=_timestamp(meta.get("creationTimestamp")),
        container_cpu_limits=_container_cpu_limits(pod),
        batch=_batch(pod),
        annotations={k: str(v) for k, v in (meta.get("annotations") or {}).items() if k in AGENT_POD_ANNOTATIONS},
        container_memory=_container_memory(pod),
        pod_ip=_pod_ip(pod),
    )


def _pod_ip(pod: dict[str, Any]) -> str | None:
    ip = (pod.get("status") or {}).get("podIP")
    return ip if isinstance(ip, str) and ip else None


def cgroup_uid(pod: dict[str, Any]) -> str:
    """The UID kubelet named the pod's cgroup after: a static pod's mirror carries it in an annotation."""
    meta = pod.get("metadata") or {}
    mirror = (meta.get("annotations") or {}).get("kubernetes.io/config.mirror")
    return str(mirror or meta.get("uid") or "")


def container_ids(pod: dict[str, Any]) -> tuple[ContainerID, ...]:
    ids = []
    status = pod.get("status") or {}
    for cs in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        raw = cs.get("containerID")
        if raw:
            try:
                ids.append(parse_container_id(raw))
            except ValueError as exc:
                log.debug("pod %s: %s", (pod.get("metadata") or {}).get("name"), exc)
    return tuple(ids)


class KubePodSource:
    """Maps informer pods to cgroups; re-resolves a pod when its containers change or its cgroup vanished."""

    def __init__(
        self,
        items: Callable[[], list[dict[str, Any]]],
        layout: Layout,
        model: PathModel,
        classifier: Classifier,
        retry_seconds: float = 5.0,
        synced: Callable[[], bool] = lambda: True,
    ) -> None:
        self.items, self.layout, self.model, self.classifier = items, layout, model, classifier
        self.retry_seconds, self.synced = retry_seconds, synced
        self._meta: dict[str, tuple[str, PodMeta, QoS | None, tuple[ContainerID, ...]]] = {}
        self._cgroups: dict[str, tuple[tuple[ContainerID, ...], PodCgroup | None, float]] = {}
        # Σ batch requests of the pods of the last listing that have not finished, cgroup or not (bound pods
        # hold their requests in the scheduler's accounting before their containers start); None until a
        # listing made after the informer synced (an empty cache is not an empty node)
        self.batch_requests: BatchRequests | None = None
        # the last listing's objects (the informer replaces an object that changed, never edits it), whether
        # the API was synced then, and the answer: the same objects give the same answer
        self._last: tuple[tuple[dict[str, Any], ...], bool, list[tuple[PodMeta, PodCgroup]]] | None = None

    def _describe(self, pod: dict[str, Any]) -> tuple[PodMeta, QoS | None, tuple[ContainerID, ...]]:
        meta = pod.get("metadata") or {}
        uid, rv = str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")
        cached = self._meta.get(uid)
        if cached is not None and cached[0] == rv:
            return cached[1], cached[2], cached[3]
        qos: QoS | None
        try:
            qos = normalize_qos(str((pod.get("status") or {}).get("qosClass") or ""))
        except ValueError:
            qos = None
        described = (pod_meta(pod, self.classifier), qos, container_ids(pod))
        self._meta[uid] = (rv, *described)
        return described

    def pods(self, now: float) -> Sequence[tuple[PodMeta, PodCgroup]]:
        synced = self.synced()  # before the listing: a sync during it does not make it complete
        items = self.items()
        last = self._last
        if (
            last is not None
            and last[1] == synced
            and len(items) == len(last[0])
            and all(a is b for a, b in zip(items, last[0], strict=True))
        ):
            return last[2]  # nothing changed since the last pass (and every pod's cgroup was found)
        out = self._listing(items, now, synced)
        unresolved = any(known[1] is None for known in self._cgroups.values())
        self._last = None if unresolved else (tuple(items), synced, out)  # an unresolved pod is looked for again
        return out

    def _listing(self, items: list[dict[str, Any]], now: float, synced: bool) -> list[tuple[PodMeta, PodCgroup]]:
        out: list[tuple[PodMeta, PodCgroup]] = []
        live: set[str] = set()
        for pod in items:
            if (pod.get("status") or {}).get("phase") in FINISHED_PHASES:
                continue
            meta, qos, cids = self._describe(pod)
            if not meta.uid:
                continue
            live.add(meta.uid)
            known = self._cgroups.get(meta.uid)
            if known is None or known[0] != cids or (known[1] is None and now - known[2] >= self.retry_seconds):
                cg = resolve_pod(self.layout, self.model, cgroup_uid(pod), qos, cids)
                self._cgroups[meta.uid] = known = (cids, cg, now)
            if known[1] is not None:
                out.append((meta, known[1]))
        gone = set(self._meta) - live
        for uid in gone:
            self._meta.pop(uid, None)
            self._cgroups.pop(uid, None)
        if gone:
            self.classifier.forget(live)
        if synced:
            self.batch_requests = batch_requests(entry[1] for entry in self._meta.values())
        return out

    def vanished(self, uid: str) -> None:
        self._cgroups.pop(uid, None)
        self._last = None
