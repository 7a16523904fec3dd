"""The one place in Colo that talks to the Kubernetes API.

Every request goes through the official ``kubernetes`` client's ``ApiClient`` (auth, TLS, kubeconfig and
in-cluster token refresh all come from it), but objects travel as the plain JSON dicts the API server sends:
no model classes, no deserialisation cost, and nothing in the rest of Colo depends on the client's models.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, cast

import urllib3
from kubernetes.client.api_client import ApiClient
from kubernetes.client.configuration import Configuration
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

Kind = Literal["pods", "nodes", "endpointslices", "events", "leases", "namespaces", "priorityclasses"]
EvictionResult = Literal["evicted", "blocked", "gone"]

#: Transport retries for ``Kube.connect``: urllib3 may retry connection failures and idempotent requests
#: whose connection broke, but never an HTTP status. By default urllib3 would sleep through 429/503
#: Retry-After itself, hiding the answer from the informer's backoff and blocking callers for as long as
#: the server asks. Set it on your own Configuration if you build the ApiClient yourself.
TRANSPORT_RETRIES = urllib3.Retry(
    total=3,
    connect=3,
    read=1,
    redirect=0,
    status=0,
    other=0,
    status_forcelist=(),
    respect_retry_after_header=False,
    raise_on_status=False,
    backoff_factor=0.05,
)


class _NoRetryWarnings(logging.Filter):
    """urllib3 warns of each transport retry ("Retrying (Retry(total=2, ...))"): three lines per failed call
    during an outage. The call's own failure, if any, is reported once per change by the caller."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Retrying (")


logging.getLogger("urllib3.connectionpool").addFilter(_NoRetryWarnings())

#: Attempts for read-modify-write cycles (taints) before giving up with the last 409/422.
CONFLICT_RETRIES = 5

#: Objects per list request: the API server and we never hold one huge response (client-go pages by 500).
LIST_PAGE_SIZE = 500


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

# involvedObject.apiVersion for the kinds Colo records events about.
_EVENT_API_VERSIONS = {"Pod": "v1", "Node": "v1", "Lease": "coordination.k8s.io/v1"}
_CLUSTER_SCOPED_KINDS = {"Node"}
_MAX_EVENT_MESSAGE = 1024


def _seg(value: str) -> str:
    """Reject path-breaking names early: a '/' would silently address another object."""
    if not value or "/" in value or value in (".", ".."):
        raise ValueError(f"invalid object name or namespace: {value!r}")
    return value


class ApiError(Exception):
    """A failed API call, carrying what callers branch on (status) and what they log (reason, message).

    ``status`` is the HTTP code, or 0 when no answer arrived (connection refused/reset, timeout).
    ``reason`` is the Status object's machine reason (``Conflict``, ``NotFound``, ``TooManyRequests``...),
    ``message`` its human message, ``retry_after`` the server's Retry-After hint in seconds.
    """

    def __init__(
        self,
        status: int,
        reason: str,
        message: str = "",
        *,
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(status, reason, message)
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        self.body = body

    def __str__(self) -> str:
        head = f"HTTP {self.status} {self.reason}" if self.status else f"connection error ({self.reason})"
        return f"{head}: {self.message}" if self.message else head

    @classmethod
    def from_response(cls, status: int, http_reason: str, headers: Mapping[str, str], data: bytes) -> ApiError:
        """Build from a non-2xx answer, preferring the Status object the API server puts in the body."""
        body: dict[str, Any] | None = None
        try:
            parsed = json.loads(data) if data else None
            if isinstance(parsed, dict):
                body = parsed
        except ValueError:
            pass
        reason = http_reason or "Unknown"
        message = data[:200].decode("utf-8", "replace") if data and body is None else ""
        if body is not None and body.get("kind") == "Status":
            reason = str(body.get("reason") or reason)
            message = str(body.get("message") or "")
        retry_after = _parse_retry_after(headers.get("Retry-After"))
        if retry_after is None and body is not None:
            seconds = (body.get("details") or {}).get("retryAfterSeconds")
            if isinstance(seconds, int | float) and seconds > 0:
                retry_after = float(seconds)
        return cls(status, reason, message, retry_after=retry_after, body=body)

    @classmethod
    def from_status(cls, status_obj: Mapping[str, Any]) -> ApiError:
        """Build from a Status carried inside a watch ERROR event."""
        details = status_obj.get("details") or {}
        seconds = details.get("retryAfterSeconds")
        return cls(
            int(status_obj.get("code") or 500),
            str(status_obj.get("reason") or "Unknown"),
            str(status_obj.get("message") or ""),
            retry_after=float(seconds) if isinstance(seconds, int | float) and seconds > 0 else None,
            body=dict(status_obj),
        )


def _parse_retry_after(value: str | None) -> float | None:
    """Retry-After in seconds; the API server only sends the integer form, dates are ignored."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _now_rfc3339(clock: float | None = None) -> str:
    """A metav1.Time (second precision, what core/v1 Event timestamps use)."""
    t = time.time() if clock is None else clock
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _max_sends(retries: object) -> int:
    """How many times urllib3 may send one request that is not idempotent (PATCH, POST).

    Only connection failures are retried for those (the request never left), so the bound is one send plus
    the connect retries; urllib3's default (``retries`` None) is Retry(3).
    """
    if retries is None:
        return 4
    if isinstance(retries, bool) or not isinstance(retries, int | urllib3.Retry):
        return 1
    if isinstance(retries, int):
        return 1 + max(0, retries)
    if retries.total is False:
        return 1
    limits = [n for n in (retries.total, retries.connect) if isinstance(n, int) and not isinstance(n, bool)]
    return 1 + max(0, min(limits)) if limits else 4


def _json_pointer(*tokens: str) -> str:
    return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)


class WatchStream(Iterator[tuple[str, dict[str, Any]]]):
    """One watch HTTP stream, iterated as (type, object); ``close()`` may be called from any thread.

    Being closable from outside is what lets an informer stop promptly while its thread is blocked
    reading a quiet watch: the pending read ends and iteration stops without an error.
    """

    def __init__(self, response: urllib3.BaseHTTPResponse) -> None:
        self._resp = response
        self._lines = self._iter_lines()
        self._closed = False
        self._released = False
        self._lock = threading.Lock()

    def __iter__(self) -> WatchStream:
        return self

    def __next__(self) -> tuple[str, dict[str, Any]]:
        if self._closed:
            raise StopIteration
        try:
            line = next(self._lines)
        except StopIteration:
            self._release()
            raise
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            closed_elsewhere = self._closed
            self._release()
            if closed_elsewhere:
                raise StopIteration from None
            raise ApiError(0, type(e).__name__, f"watch stream broken: {e}") from e
        try:
            event = json.loads(line)
            etype = str(event["type"])
            obj = event["object"]
        except (ValueError, KeyError, TypeError) as e:
            self._release()
            raise ApiError(0, "MalformedWatchEvent", line[:200].decode("utf-8", "replace")) from e
        if etype == "ERROR":
            self._release()
            raise ApiError.from_status(obj if isinstance(obj, dict) else {})
        return etype, cast(dict[str, Any], obj)

    def _iter_lines(self) -> Iterator[bytes]:
        """Split the chunked body on newlines; the API server writes one JSON event per line."""
        buf = b""
        for chunk in self._resp.stream(amt=65536, decode_content=True):
            buf += chunk
            while True:
                nl = buf.find(b"\n")
                if nl < 0:
                    break
                line, buf = buf[:nl].strip(), buf[nl + 1 :]
                if line:
                    yield line
        if buf.strip():
            yield buf.strip()

    def _release(self) -> None:
        """Give the connection back exactly once (it is closed, so the pool reconnects next time)."""
        with self._lock:
            if self._released:
                return
            self._released = True
        with contextlib.suppress(OSError):
            self._resp.close()
        self._resp.release_conn()

    def close(self) -> None:
        """End the stream; idempotent, and unblocks a read pending in another thread."""
        self._closed = True
        if self._released:
            return
        with contextlib.suppress(OSError, AttributeError, ValueError):
            self._resp.shutdown()
        self._release()


class Kube:
    """Typed, dict-based access to the handful of API calls Colo makes.

    Everything raises ``ApiError`` on failure, so callers never see urllib3 or client exceptions.
    Thread-safe: the underlying urllib3 pool is shared, nothing else is mutable.
    """

    def __init__(self, api_client: ApiClient, *, request_timeout: float = 10.0) -> None:
        if not hasattr(api_client, "param_serialize"):
            raise RuntimeError("kube/ needs kubernetes>=37 (ApiClient.param_serialize is missing)")
        self.api_client = api_client
        self.request_timeout = request_timeout

    @classmethod
    def connect(cls, kubeconfig: str | None = None, *, request_timeout: float = 10.0) -> Kube | None:
        """Kubeconfig if given, else the pod's service account when in a cluster, else None (standalone)."""
        configuration = Configuration()
        if kubeconfig:
            # the kubeconfig loader brings oauthlib and requests (OIDC, Azure): only loaded when used
            from kubernetes.config.kube_config import load_kube_config

            load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, client_configuration=configuration, persist_config=False
            )
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            from kubernetes.config.incluster_config import load_incluster_config

            load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            return None
        configuration.retries = TRANSPORT_RETRIES
        # TCP keepalive as client-go does: a dead peer under a quiet watch is noticed in minutes,
        # not at the end of the watch's read timeout.
        configuration.keep_alive = True
        return cls(ApiClient(configuration), request_timeout=request_timeout)

    def close(self) -> None:
        """Drop pooled connections."""
        self.api_client.close()  # type: ignore[no-untyped-call]

    # ---- transport -------------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] | None = None,
    ) -> urllib3.BaseHTTPResponse:
        """Send one request; return the still-unread response on 2xx, raise ApiError otherwise."""
        headers: dict[str, str] = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        api = self.api_client
        try:
            serialized = api.param_serialize(
                method=method,
                resource_path=path,
                query_params=list(query or []),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            rest_response = api.call_api(
                *serialized, _request_timeout=timeout if timeout is not None else self.request_timeout
            )
        except ApiException as e:
            raise ApiError(int(e.status or 0), str(e.reason or "ApiException"), str(e.body or "")) from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise ApiError(0, type(e).__name__, str(e)) from e
        response: urllib3.BaseHTTPResponse = rest_response.response
        if 200 <= response.status < 300:
            return response
        try:
            data = response.data
        except (urllib3.exceptions.HTTPError, OSError):
            data = b""
        finally:
            response.release_conn()
        raise ApiError.from_response(response.status, response.reason or "", response.headers, data)

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """A non-streaming call whose answer is one JSON object.

        ``timeout`` (seconds) bounds the whole call: it is shared out among the sends urllib3 may make
        (connection retries; only their short backoff comes on top), and each send's share also goes to
        the server as the ``timeout`` query parameter, so the API server abandons a request it could not
        finish in time (504) instead of applying it after we stopped waiting.
        """
        attempt_timeout: float | None = None
        if timeout is not None:
            sends = _max_sends(getattr(getattr(self.api_client, "configuration", None), "retries", None))
            attempt_timeout = timeout / sends
            query = [*(query or []), ("timeout", f"{max(1, int(attempt_timeout * 1000))}ms")]
        response = self._send(method, path, query=query, body=body, content_type=content_type, timeout=attempt_timeout)
        try:
            data = response.data
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise ApiError(0, type(e).__name__, f"reading response: {e}") from e
        finally:
            response.release_conn()
        try:
            parsed = json.loads(data) if data else {}
        except ValueError as e:
            raise ApiError(0, "MalformedResponse", data[:200].decode("utf-8", "replace")) from e
        if not isinstance(parsed, dict):
            raise ApiError(0, "MalformedResponse", "expected a JSON object")
        return parsed

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

    def patch_node_extended_resources(self, name: str, resources: Mapping[str, str | None]) -> dict[str, Any]:
        """Advertise extended resources (e.g. ``kubernetes.io/batch-cpu``) in capacity and allocatable.

        Goes to the ``status`` subresource: the API server ignores status in writes to the node itself.
        """
        values = dict(resources)
        return self._merge_patch_node(name, {"status": {"capacity": values, "allocatable": dict(values)}}, sub="status")

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
