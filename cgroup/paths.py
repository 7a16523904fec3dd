"""kubelet's cgroup naming: QoS tiers, pods and containers, for the systemd and cgroupfs drivers.

kubelet names cgroups as a list of components (cgroup root, "kubepods", tier, "pod<uid>"); the cgroupfs
driver joins them with "/", the systemd driver turns each prefix into a nested slice, escaping "-" as "_".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Driver = Literal["systemd", "cgroupfs"]
QoS = Literal["guaranteed", "burstable", "besteffort"]
QOS_CLASSES: tuple[QoS, ...] = ("guaranteed", "burstable", "besteffort")

# runtime name in a containerID URI -> systemd scope prefix
SCOPE_PREFIX = {"containerd": "cri-containerd-", "cri-o": "crio-", "crio": "crio-", "docker": "docker-"}
_CONTAINER_DIR = re.compile(r"^(?:(cri-containerd|crio|docker)-)?([0-9a-f]{64})(?:\.scope)?$")
_QOS_FROM_K8S = {"guaranteed": "guaranteed", "burstable": "burstable", "besteffort": "besteffort"}


@dataclass(frozen=True, slots=True)
class ContainerID:
    """A container ID as kubelet reports it (`containerd://<id>`): runtime and bare id."""

    runtime: str
    id: str


def parent_cgroup(cgroup: str) -> str:
    """The cgroup one level up ("/" above a top-level one)."""
    return cgroup.rstrip("/").rsplit("/", 1)[0] or "/"


def parse_container_id(value: str) -> ContainerID:
    """Parse `<runtime>://<id>`; a bare id is accepted with runtime ''. Raises ValueError when malformed."""
    runtime, sep, cid = value.partition("://")
    if not sep:
        runtime, cid = "", value
    if not re.fullmatch(r"[0-9a-fA-F]{12,64}", cid):
        raise ValueError(f"container ID {value!r} is not '<runtime>://<hex id>'")
    return ContainerID(runtime.lower(), cid.lower())


def parse_container_dir(name: str) -> ContainerID | None:
    """Container id from a cgroup directory name (`cri-containerd-<id>.scope`, `crio-<id>`, bare id)."""
    m = _CONTAINER_DIR.match(name)
    if m is None or name.startswith("crio-conmon-"):
        return None
    runtime = {"cri-containerd": "containerd", "crio": "cri-o", "docker": "docker"}.get(m.group(1) or "", "")
    return ContainerID(runtime, m.group(2))


def normalize_qos(value: str) -> QoS:
    """Kubernetes' status.qosClass (Guaranteed/Burstable/BestEffort) to the tier name."""
    qos = _QOS_FROM_K8S.get(value.lower())
    if qos is None:
        raise ValueError(f"unknown QoS class {value!r}; expected Guaranteed, Burstable or BestEffort")
    return qos  # type: ignore[return-value]


def _escape_systemd(component: str) -> str:
    return component.replace("-", "_")


def parse_cgroup_root(cgroup_root: str) -> list[str]:
    """kubelet's --cgroup-root as components: '/kubelet' -> ['kubelet'], '/kubelet.slice' -> ['kubelet']."""
    components: list[str] = []
    for part in cgroup_root.strip("/").split("/"):
        if not part:
            continue
        if part.endswith(".slice"):
            # a systemd slice: its own name is after the last '-' ("a-b.slice" is b inside a.slice)
            own = part[: -len(".slice")].rsplit("-", 1)[-1]
            components.append(own.replace("_", "-"))
        else:
            components.append(part)
    return components


class PathModel:
    """Relative cgroup paths ('/kubepods/burstable/pod<uid>') of tiers, pods and containers."""

    def __init__(self, driver: Driver, cgroup_root: str = "/") -> None:
        self.driver: Driver = driver
        self.cgroup_root = cgroup_root
        self._root = parse_cgroup_root(cgroup_root)

    def _path(self, components: list[str]) -> str:
        if self.driver == "cgroupfs":
            return "/" + "/".join(components)
        parts: list[str] = []
        acc: list[str] = []
        for c in components:
            acc.append(_escape_systemd(c))
            parts.append("-".join(acc) + ".slice")
        return "/" + "/".join(parts)

    def _components(self, qos: QoS | None) -> list[str]:
        comps = [*self._root, "kubepods"]
        if qos is not None and qos != "guaranteed":
            comps.append(qos)
        return comps

    def kubepods(self) -> str:
        """The kubepods root (where guaranteed pods live)."""
        return self._path(self._components(None))

    def tier(self, qos: QoS) -> str:
        """The QoS tier's cgroup; guaranteed pods sit directly in kubepods."""
        return self._path(self._components(qos))

    def pod(self, qos: QoS, uid: str) -> str:
        return self._path([*self._components(qos), "pod" + uid])

    def container_names(self, cid: ContainerID) -> list[str]:
        """Directory names a container may have under its pod, most likely first."""
        if self.driver == "systemd":
            prefixes = [SCOPE_PREFIX[cid.runtime]] if cid.runtime in SCOPE_PREFIX else list(SCOPE_PREFIX.values())
            return [f"{p}{cid.id}.scope" for p in dict.fromkeys(prefixes)]
        if cid.runtime in ("cri-o", "crio"):
            return [f"crio-{cid.id}", cid.id]
        return [cid.id, f"crio-{cid.id}"]

    def container(self, qos: QoS, uid: str, cid: ContainerID) -> str:
        return f"{self.pod(qos, uid)}/{self.container_names(cid)[0]}"

    def pod_uid_from_dir(self, name: str) -> str | None:
        """Pod UID from a pod cgroup directory name, or None when it is not a pod's."""
        if self.driver == "systemd":
            if not name.endswith(".slice"):
                return None
            own = name[: -len(".slice")].rsplit("-", 1)[-1]
            if not own.startswith("pod"):
                return None
            return own[3:].replace("_", "-") or None
        if name.startswith("pod") and len(name) > 3:
            return name[3:]
        return None
