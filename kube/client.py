"""The one place in Colo that talks to the Kubernetes API.

Every request goes through the official ``kubernetes`` client's ``ApiClient`` (auth, TLS, kubeconfig and
in-cluster token refresh all come from it), but objects travel as the plain JSON dicts the API server sends:
no model classes, no deserialisation cost, and nothing in the rest of Colo depends on the client's models.
This module holds the calls; the connection under them is `kube.connection`, the kinds `kube.kinds`, the
watch stream `kube.watch` and the error `kube.errors`.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from kube.connection import Connection
from kube.errors import ApiError
from kube.kinds import RESOURCES, Kind
from kube.watch import WatchStream

log = logging.getLogger(__name__)

EvictionResult = Literal["evicted", "blocked", "gone"]

#: Attempts for read-modify-write cycles (taints) before giving up with the last 409/422.
CONFLICT_RETRIES = 5

#: Objects per list request: the API server and we never hold one huge response (client-go pages by 500).
LIST_PAGE_SIZE = 500


# involvedObject.apiVersion for the kinds Colo records events about.
_EVENT_API_VERSIONS = {"Pod": "v1", "Node": "v1", "Lease": "coordination.k8s.io/v1"}
_CLUSTER_SCOPED_KINDS = {"Node"}
_MAX_EVENT_MESSAGE = 1024


def _now_rfc3339(clock: float | None = None) -> str:
    """A metav1.Time (second precision, what core/v1 Event timestamps use)."""
    t = time.time() if clock is None else clock
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _json_pointer(*tokens: str) -> str:
    return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)


class Kube(Connection):
    """Typed, dict-based access to the handful of API calls Colo makes.

    Everything raises ``ApiError`` on failure, so callers never see urllib3 or client exceptions.
    Thread-safe: the underlying urllib3 pool is shared, nothing else is mutable.
    """

    # ---- list / watch ----------------------------------------------------------------------------

    @staticmethod
    def _selectors(field_selector: str | None, label_selector: str | None) -> list[tuple[str, str]]:
        query: list[tuple[str, str]] = []
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if label_selector:
            query.append(("labelSelector", label_selector))
        return query

    def list(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        resource_version: str | None = None,
        page_size: int = LIST_PAGE_SIZE,
        transform: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """Items and the list's resourceVersion (where a following watch must start).

        Items get ``kind``/``apiVersion`` filled in (the server leaves them out of list items) so list
        and watch objects look the same to callers. ``resource_version="0"`` allows a cached read.

        Fetched in pages of ``page_size`` (``limit``/``continue``; 0: one request) that the server serves
        from one snapshot, so the result is one consistent list however long paging takes, and neither
        side holds the whole collection as one response. ``transform`` runs on each item as its page
        arrives (None drops the item): a caller keeping little of each object holds at most one page of
        whole objects. A continue token the server no longer honours (410 after compaction) raises
        ApiError(410): list again from the start.
        """
        res = RESOURCES[kind]
        selectors = self._selectors(field_selector, label_selector)
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            query = list(selectors)
            if page_size > 0:
                query.append(("limit", str(page_size)))
            if token:
                query.append(("continue", token))  # the token pins the snapshot: no resourceVersion with it
            elif resource_version is not None:
                query.append(("resourceVersion", resource_version))
            result = self._call("GET", res.path(namespace), query=query)
            for item in result.get("items") or []:
                item.setdefault("kind", res.kind)
                item.setdefault("apiVersion", res.api_version)
                kept = transform(item) if transform is not None else item
                if kept is not None:
                    items.append(kept)
            meta = result.get("metadata") or {}
            rv = str(meta.get("resourceVersion") or "")
            following = str(meta.get("continue") or "")
            if not following:
                return items, rv
            if following == token:
                raise ApiError(0, "MalformedResponse", "the server repeated the same continue token")
            token = following

    def watch(
        self,
        kind: Kind,
        *,
        resource_version: str,
        namespace: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
        allow_bookmarks: bool = True,
    ) -> WatchStream:
        """Stream (type, object) changes after ``resource_version``; ADDED/MODIFIED/DELETED/BOOKMARK.

        An ERROR event raises ApiError with its Status code (410 when the version was compacted away);
        a broken connection raises ApiError(0). The server ends the stream after ``timeout_seconds``.
        """
        res = RESOURCES[kind]
        query: list[tuple[str, str]] = [("watch", "true")]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if allow_bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        query.append(("timeoutSeconds", str(int(timeout_seconds))))
        query += self._selectors(field_selector, label_selector)
        # Connect like any call; reads may legitimately stay quiet until the server-side timeout.
        read_timeout = timeout_seconds + max(self.request_timeout, 5.0)
        response = self._send("GET", res.path(namespace), query=query, timeout=(self.request_timeout, read_timeout))
        return WatchStream(response)

    # ---- nodes -----------------------------------------------------------------------------------

    def get_node(self, name: str) -> dict[str, Any]:
        return self._call("GET", RESOURCES["nodes"].path(name=name))

    def _merge_patch_node(
        self, name: str, patch: dict[str, Any], sub: str | None = None, timeout: float | None = None
    ) -> dict[str, Any]:
        return self._call(
            "PATCH",
            RESOURCES["nodes"].path(name=name, sub=sub),
            body=patch,
            content_type="application/merge-patch+json",
            timeout=timeout,
        )

    def patch_node_annotations(
        self, name: str, annotations: Mapping[str, str | None], *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Set (or, with None, remove) only these annotations; others' annotations are untouched.

        ``timeout``: the patch is applied within this many seconds or not at all (see ``_call``); a
        leader uses it so that its write cannot land after the lease could have passed to a successor.
        """
        return self._merge_patch_node(name, {"metadata": {"annotations": dict(annotations)}}, timeout=timeout)

    def patch_node_labels(self, name: str, labels: Mapping[str, str | None]) -> dict[str, Any]:
        """Set (or, with None, remove) only these labels."""
        return self._merge_patch_node(name, {"metadata": {"labels": dict(labels)}})

    def patch_node_extended_resources(
        self, name: str, resources: Mapping[str, str | None], *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Advertise extended resources (e.g. ``kubernetes.io/batch-cpu``) in capacity and allocatable
        (None removes one from both).

        Goes to the ``status`` subresource: the API server ignores status in writes to the node itself.
        ``timeout``: as for ``patch_node_annotations``.
        """
        values = dict(resources)
        body = {"status": {"capacity": values, "allocatable": dict(values)}}
        return self._merge_patch_node(name, body, sub="status", timeout=timeout)

    def set_node_taint(self, name: str, key: str, value: str, effect: str, present: bool) -> None:
        """Ensure a taint (identified by key+effect, like kubectl) is present with ``value`` or absent.

        Read-modify-write guarded by a JSON patch ``test`` on resourceVersion, so a concurrent writer
        (the node controller, kubectl) never loses its taints; on 409/422 re-read and retry.
        """
        path = RESOURCES["nodes"].path(name=name)
        last: ApiError | None = None
        for _ in range(CONFLICT_RETRIES):
            node = self.get_node(name)
            spec = node.get("spec")
            taints: list[dict[str, Any]] = list((spec or {}).get("taints") or [])
            kept = [t for t in taints if not (t.get("key") == key and t.get("effect") == effect)]
            if present:
                current = [t for t in taints if t.get("key") == key and t.get("effect") == effect]
                if len(current) == 1 and current[0].get("value", "") == value:
                    return
                taint: dict[str, Any] = {"key": key, "effect": effect}
                if value:
                    taint["value"] = value
                if effect == "NoExecute":
                    taint["timeAdded"] = _now_rfc3339()
                new_taints = [*kept, taint]
            else:
                if len(kept) == len(taints):
                    return
                new_taints = kept
            rv = str((node.get("metadata") or {}).get("resourceVersion") or "")
            ops: list[dict[str, Any]] = [
                {"op": "test", "path": _json_pointer("metadata", "resourceVersion"), "value": rv}
            ]
            if spec is None:
                ops.append({"op": "add", "path": "/spec", "value": {"taints": new_taints}})
            elif new_taints:
                ops.append({"op": "add", "path": _json_pointer("spec", "taints"), "value": new_taints})
            else:
                ops.append({"op": "remove", "path": _json_pointer("spec", "taints")})
            try:
                self._call("PATCH", path, body=ops, content_type="application/json-patch+json")
                return
            except ApiError as e:
                if e.status not in (409, 422):
                    raise
                log.debug("taint %s on node %s: conflict (%s), retrying", key, name, e)
                last = e
        assert last is not None
        raise last

    # ---- pods ------------------------------------------------------------------------------------

    def evict_pod(
        self, namespace: str, name: str, *, dry_run: bool = False, timeout: float | None = None
    ) -> EvictionResult:
        """Ask for an eviction (which respects PodDisruptionBudgets) instead of deleting the pod.

        429 means a PDB refuses now ("blocked": retry later), 404 that the pod is already gone.
        ``timeout``: applied within this many seconds or not at all (see ``_call``): a leader's eviction
        cannot land after its lease could have passed to a successor.
        """
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        query: list[tuple[str, str]] = []
        if dry_run:
            body["deleteOptions"] = {"dryRun": ["All"]}
            query.append(("dryRun", "All"))
        try:
            self._call(
                "POST", RESOURCES["pods"].path(namespace, name, "eviction"), query=query, body=body, timeout=timeout
            )
        except ApiError as e:
            if e.status == 429:
                return "blocked"
            if e.status == 404:
                return "gone"
            raise
        return "evicted"

    # ---- events ----------------------------------------------------------------------------------

    def create_event(
        self,
        *,
        kind: str,
        name: str,
        namespace: str,
        uid: str | None,
        reason: str,
        message: str,
        event_type: Literal["Normal", "Warning"],
        component: str,
    ) -> None:
        """Record a core/v1 Event about an object, visible in ``kubectl describe``.

        ``namespace`` is the involved object's; cluster-scoped objects (Node) get their events in
        ``default``, as the kubelet does.
        """
        now = _now_rfc3339()
        involved: dict[str, Any] = {"kind": kind, "name": name}
        if kind not in _CLUSTER_SCOPED_KINDS and namespace:
            involved["namespace"] = namespace
        if uid:
            involved["uid"] = uid
        if kind in _EVENT_API_VERSIONS:
            involved["apiVersion"] = _EVENT_API_VERSIONS[kind]
        event_ns = namespace if (namespace and kind not in _CLUSTER_SCOPED_KINDS) else "default"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": event_ns},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:_MAX_EVENT_MESSAGE],
            "type": event_type,
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": socket.gethostname(),
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._call("POST", RESOURCES["events"].path(event_ns), body=body)

    # ---- leases ----------------------------------------------------------------------------------

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._call("GET", RESOURCES["leases"].path(namespace, name))
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create; ApiError(409) when someone else created it first."""
        return self._call("POST", RESOURCES["leases"].path(namespace), body=body)

    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT with the body's resourceVersion as precondition: ApiError(409) if it is stale."""
        return self._call("PUT", RESOURCES["leases"].path(namespace, name), body=body)

    # ---- reviews (authenticating and authorizing our own HTTP clients) ----------------------------

    def review_token(self, token: str) -> dict[str, Any]:
        """TokenReview of a bearer token: the answer's ``status`` says whether and as whom it authenticates."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        return self._call("POST", "/apis/authentication.k8s.io/v1/tokenreviews", body=body)

    def review_access(self, user: Any, verb: str, path: str) -> dict[str, Any]:
        """SubjectAccessReview of `verb` on the non-resource URL `path` for `user` (name, uid, groups,
        extra as a TokenReview gave them): ``status.allowed`` is the answer."""
        spec: dict[str, Any] = {
            "user": user.name,
            "uid": user.uid,
            "groups": list(user.groups),
            "extra": {key: list(values) for key, values in user.extra},
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        return self._call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=body)
