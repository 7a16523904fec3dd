"""The kinds Colo uses and where each lives in the API (the REST mapping the Go client gets from discovery)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["pods", "nodes", "endpointslices", "events", "leases", "namespaces", "priorityclasses"]


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the API (the REST mapping the Go client gets from discovery)."""

    plural: str
    kind: str
    api_version: str
    namespaced: bool

    @property
    def prefix(self) -> str:
        return "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        """The collection or object path; a namespace is ignored for cluster-scoped kinds."""
        parts = [self.prefix]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{_seg(namespace)}")
        parts.append(self.plural)
        if name is not None:
            parts.append(_seg(name))
            if sub:
                parts.append(sub)
        return "/".join(parts)


RESOURCES: dict[Kind, Resource] = {
    "pods": Resource("pods", "Pod", "v1", namespaced=True),
    "nodes": Resource("nodes", "Node", "v1", namespaced=False),
    "events": Resource("events", "Event", "v1", namespaced=True),
    "endpointslices": Resource("endpointslices", "EndpointSlice", "discovery.k8s.io/v1", namespaced=True),
    "leases": Resource("leases", "Lease", "coordination.k8s.io/v1", namespaced=True),
    "namespaces": Resource("namespaces", "Namespace", "v1", namespaced=False),
    "priorityclasses": Resource("priorityclasses", "PriorityClass", "scheduling.k8s.io/v1", namespaced=False),
}


def _seg(value: str) -> str:
    """Reject path-breaking names early: a '/' would silently address another object."""
    if not value or "/" in value or value in (".", ".."):
        raise ValueError(f"invalid object name or namespace: {value!r}")
    return value
