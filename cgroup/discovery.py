"""Find every pod and container cgroup from the filesystem alone (standalone mode has no API server),
and resolve one pod from what the API server says about it (UID, QoS class, container IDs)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from cgroup.layout import Layout
from cgroup.paths import QOS_CLASSES, ContainerID, PathModel, QoS, parse_container_dir


@dataclass(frozen=True, slots=True)
class ContainerCgroup:
    id: str
    runtime: str
    path: str


@dataclass(frozen=True, slots=True)
class PodCgroup:
    uid: str
    qos: QoS
    path: str
    containers: tuple[ContainerCgroup, ...]


def _scan_dir(path: str) -> list[str]:
    try:
        with os.scandir(path) as it:
            return [e.name for e in it if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _containers(layout: Layout, pod_path: str) -> tuple[ContainerCgroup, ...]:
    found: list[ContainerCgroup] = []
    for name in _scan_dir(layout.dir("cpu", pod_path)):
        cid = parse_container_dir(name)
        if cid is not None:
            found.append(ContainerCgroup(cid.id, cid.runtime, f"{pod_path}/{name}"))
    return tuple(sorted(found, key=lambda c: c.id))


def discover_pods(layout: Layout, model: PathModel) -> list[PodCgroup]:
    """Every pod cgroup under kubepods with its containers (read on the cpu hierarchy, or unified on v2)."""
    pods: list[PodCgroup] = []
    for qos in QOS_CLASSES:
        tier = model.tier(qos)
        for name in _scan_dir(layout.dir("cpu", tier)):
            uid = model.pod_uid_from_dir(name)
            if uid is None:
                continue
            path = f"{tier}/{name}"
            pods.append(PodCgroup(uid, qos, path, _containers(layout, path)))
    return pods


def resolve_pod(
    layout: Layout, model: PathModel, uid: str, qos: QoS | None, container_ids: Iterable[ContainerID]
) -> PodCgroup | None:
    """The cgroups of one pod known to the API server; None while kubelet has not created them yet."""
    tiers = [qos] if qos is not None else list(QOS_CLASSES)
    for tier in tiers:
        path = model.pod(tier, uid)
        if not os.path.isdir(layout.dir("cpu", path)):
            continue
        containers: list[ContainerCgroup] = []
        for cid in container_ids:
            for name in model.container_names(cid):
                if os.path.isdir(layout.dir("cpu", f"{path}/{name}")):
                    containers.append(ContainerCgroup(cid.id, cid.runtime, f"{path}/{name}"))
                    break
        return PodCgroup(uid, tier, path, tuple(containers))
    return None
