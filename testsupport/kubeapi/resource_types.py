"""The kinds the fake API server serves: where each lives (group, version, scope) and its field selectors.

Only the resources Colo uses exist; any other path is a 404, as for a kind the cluster does not have.
The field selectors are the ones the real server accepts for each kind; others are refused with 400.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]

_META_FIELDS = frozenset({"metadata.name", "metadata.namespace"})


@dataclass(frozen=True)
class ResourceType:
    """One API resource: where it lives and which field selectors the real server accepts for it."""

    plural: str
    kind: str
    group: str
    version: str
    namespaced: bool
    has_status: bool
    fields: frozenset[str]

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """How the server names the resource in messages: ``pods``, ``leases.coordination.k8s.io``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def details(self, name: str) -> JSON:
        d: JSON = {"name": name}
        if self.group:
            d["group"] = self.group
        d["kind"] = self.plural
        return d


RESOURCES: dict[str, ResourceType] = {
    rt.plural: rt
    for rt in (
        ResourceType(
            "pods",
            "Pod",
            "",
            "v1",
            namespaced=True,
            has_status=True,
            fields=_META_FIELDS
            | {
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            },
        ),
        ResourceType(
            "nodes",
            "Node",
            "",
            "v1",
            namespaced=False,
            has_status=True,
            fields=frozenset({"metadata.name", "spec.unschedulable"}),
        ),
        ResourceType(
            "events",
            "Event",
            "",
            "v1",
            namespaced=True,
            has_status=False,
            fields=_META_FIELDS
            | {
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            },
        ),
        ResourceType(
            "endpointslices",
            "EndpointSlice",
            "discovery.k8s.io",
            "v1",
            namespaced=True,
            has_status=False,
            fields=_META_FIELDS,
        ),
        ResourceType(
            "leases",
            "Lease",
            "coordination.k8s.io",
            "v1",
            namespaced=True,
            has_status=False,
            fields=_META_FIELDS,
        ),
        ResourceType(
            "namespaces",
            "Namespace",
            "",
            "v1",
            namespaced=False,
            has_status=True,
            fields=frozenset({"metadata.name", "status.phase"}),
        ),
        ResourceType(
            "priorityclasses",
            "PriorityClass",
            "scheduling.k8s.io",
            "v1",
            namespaced=False,
            has_status=False,
            fields=frozenset({"metadata.name"}),
        ),
    )
}

#: what discovery (``/apis``) lists: the groups above, plus ``policy`` (evictions) and the review groups
GROUP_VERSIONS = {
    ("", "v1"),
    ("discovery.k8s.io", "v1"),
    ("coordination.k8s.io", "v1"),
    ("policy", "v1"),
    ("scheduling.k8s.io", "v1"),
    ("authentication.k8s.io", "v1"),
    ("authorization.k8s.io", "v1"),
}


def resource_type(kind: str) -> ResourceType:
    """The type a test helper names by its plural (``put("pods", ...)``); ValueError for an unknown one."""
    try:
        return RESOURCES[kind]
    except KeyError:
        raise ValueError(f"unknown kind {kind!r}; known: {sorted(RESOURCES)}") from None
