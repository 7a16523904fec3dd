"""An in-process stand-in for kube-apiserver, spoken to over real HTTP by the real ``kubernetes`` client.

No kube-apiserver can run in the test environment, and monkeypatching the client would test nothing that
matters on a cluster. So this server implements the part of the API Colo uses with the server's own
semantics: the REST paths, list/watch with selectors, resourceVersion preconditions and 409s, the three
patch content types, status subresources that ignore everything but ``status``, PDB-blocked evictions,
410 Gone after compaction, and Status objects shaped like the real ones. Tests inject faults (errors,
Retry-After, dropped connections, delays), read back every request, and stop/restart it like an outage.

Deliberate simplifications (documented so nobody relies on them):

* strategic-merge-patch is applied as a JSON merge patch: maps merge, lists are replaced wholesale, and
  ``$patch``/``$retainKeys`` directives are rejected with 400 rather than half-implemented;
* deletion is immediate (no graceful deletionTimestamp phase); eviction deletes the pod at once;
* lists page like etcd-backed ones (``limit``/``continue``, every page from the first page's snapshot,
  410 once that snapshot is compacted away), also with ``resourceVersion=0``, which a real server may
  answer unpaged from its watch cache;
* the ``timeout`` query parameter is honoured only where a fault delays a request: a request delayed
  past it gets 504 and is not applied, like the real server's request deadline;
* no admission, no defaulting, no validation beyond names; ``put()`` stores objects verbatim (it is the
  test's way of being the kubelet/scheduler);
* a bookmark is sent every ``bookmark_interval`` seconds (real servers: about once a minute);
* managedFields: each write that changes an object records its manager (the ``fieldManager`` parameter,
  else the User-Agent's product, as the real server derives it) with operation ``Update`` and the
  subresource, one entry per manager and subresource, but no ``fieldsV1`` (which fields it owns);
* Retry-After is sent as given, so tests may use fractions of a second (real servers send integers).
"""

from __future__ import annotations

import base64
import binascii
import bisect
import contextlib
import copy
import itertools
import json
import random
import re
import socket
import string
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

JSON = dict[str, Any]

# --------------------------------------------------------------------------------------------------
# Resource types
# --------------------------------------------------------------------------------------------------

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

_GROUP_VERSIONS = {
    ("", "v1"),
    ("discovery.k8s.io", "v1"),
    ("coordination.k8s.io", "v1"),
    ("policy", "v1"),
    ("scheduling.k8s.io", "v1"),
    ("authentication.k8s.io", "v1"),
    ("authorization.k8s.io", "v1"),
}
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

_PATH_RE = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[a-z0-9.-]+)/(?P<version>v[0-9a-z]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?"
    r"/(?P<plural>[a-z]+)"
    r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[a-z]+))?)?/?$"
)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_GO_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _parse_timeout(value: str | None) -> float | None:
    """The ``timeout`` query parameter (a Go duration such as ``1500ms``); 400 when unreadable."""
    if not value:
        return None
    m = _GO_DURATION.fullmatch(value)
    if m is None:
        raise ApiFailure(400, message=f"invalid timeout specified in the request URL: {value}")
    return float(m[1]) * _GO_UNITS[m[2]]


def _encode_continue(rv: int, after: tuple[str, str]) -> str:
    """An opaque continue token: the snapshot's resourceVersion and the last key served (like etcd's)."""
    doc = {"v": "meta.k8s.io/v1", "rv": rv, "start": list(after)}
    return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode()


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        doc = json.loads(base64.urlsafe_b64decode(token.encode()))
        rv, start = doc["rv"], doc["start"]
        if doc.get("v") != "meta.k8s.io/v1" or not isinstance(rv, int) or len(start) != 2:
            raise ValueError(token)
        return rv, (str(start[0]), str(start[1]))
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise ApiFailure(400, message="continue key is not valid: incorrect encoded start resourceVersion") from None


# --------------------------------------------------------------------------------------------------
# Errors shaped like the API server's Status objects
# --------------------------------------------------------------------------------------------------

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

_MESSAGES = {
    400: "the server rejected our request for an unknown reason",
    401: "Unauthorized",
    403: "forbidden",
    404: "the server could not find the requested resource",
    405: "the server does not allow this method on the requested resource",
    409: "the server reported a conflict",
    410: "The resourceVersion for the provided watch is too old.",
    422: "the server rejected our request due to an error in our request",
    429: "Too many requests, please try again later.",
    500: "Internal error occurred: injected fault",
    503: "the server is currently unable to handle the request",
    504: "Timeout: request did not complete within the allotted timeout",
}


def status_object(
    code: int, reason: str | None = None, message: str | None = None, details: JSON | None = None
) -> JSON:
    """A failure Status exactly as the API server shapes it (field order included)."""
    obj: JSON = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message if message is not None else _MESSAGES.get(code, f"HTTP {code}"),
        "reason": reason if reason is not None else _REASONS.get(code, "Unknown"),
    }
    if details:
        obj["details"] = details
    obj["code"] = code
    return obj


class ApiFailure(Exception):
    """Raised inside handlers; turned into a Status response."""

    def __init__(
        self,
        code: int,
        reason: str | None = None,
        message: str | None = None,
        details: JSON | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(code, message)
        self.status = status_object(code, reason, message, details)
        self.code = code
        self.headers = dict(headers or {})


def _not_found(rt: ResourceType, name: str) -> ApiFailure:
    return ApiFailure(404, "NotFound", f'{rt.qualified} "{name}" not found', rt.details(name))


def _conflict(rt: ResourceType, name: str) -> ApiFailure:
    return ApiFailure(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rt.qualified} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        rt.details(name),
    )


# --------------------------------------------------------------------------------------------------
# Selectors
# --------------------------------------------------------------------------------------------------

_LABEL_KEY = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_LABEL_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_RE_EXISTS = re.compile(rf"^\s*(?P<neg>!?)\s*(?P<key>{_LABEL_KEY})\s*$")
_RE_SET = re.compile(rf"^\s*(?P<key>{_LABEL_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$")
_RE_EQ = re.compile(rf"^\s*(?P<key>{_LABEL_KEY})\s*(?P<op>==|!=|=)\s*(?P<value>{_LABEL_VALUE})\s*$")

Predicate = Callable[[JSON], bool]


def _split_top_level(selector: str) -> list[str]:
    """Split on commas that are not inside ``in (...)`` value lists."""
    terms: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(ch)
    terms.append("".join(current))
    return terms


def parse_label_selector(selector: str) -> Predicate:
    """labelSelector: ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k``."""
    reqs: list[Callable[[Mapping[str, str]], bool]] = []
    if selector.strip():
        for term in _split_top_level(selector):
            reqs.append(_label_requirement(term))

    def match(obj: JSON) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r(labels) for r in reqs)

    return match


def _label_requirement(term: str) -> Callable[[Mapping[str, str]], bool]:
    if m := _RE_SET.match(term):
        key, values = m["key"], {v.strip() for v in m["values"].split(",") if v.strip()}
        if not values:
            raise ApiFailure(400, message=f"unable to parse requirement: {term!r}: values must be non-empty")
        if m["op"] == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _RE_EQ.match(term):
        key, value = m["key"], m["value"]
        if m["op"] == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: key in labels and labels[key] == value
    if m := _RE_EXISTS.match(term):
        key = m["key"]
        if m["neg"]:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise ApiFailure(400, message=f"unable to parse requirement: invalid label selector term {term!r}")


def _field_value(obj: JSON, path: str) -> str:
    if path == "source":
        path = "source.component"
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if path == "spec.hostNetwork" and cur is None:
        return "false"
    return "" if cur is None else str(cur)


def parse_field_selector(rt: ResourceType, selector: str) -> Predicate:
    """fieldSelector: comma-separated ``f=v``, ``f==v``, ``f!=v`` on the fields the real server supports."""
    reqs: list[tuple[str, bool, str]] = []
    for term in selector.split(",") if selector.strip() else []:
        for op in ("!=", "==", "="):
            if op in term:
                fname, value = term.split(op, 1)
                fname = fname.strip()
                if fname not in rt.fields:
                    raise ApiFailure(400, message=f'field label not supported: "{fname}"')
                reqs.append((fname, op == "!=", value.strip()))
                break
        else:
            raise ApiFailure(400, message=f"invalid selector: '{selector}'; can't understand '{term}'")

    def match(obj: JSON) -> bool:
        return all((_field_value(obj, f) != v) if neg else (_field_value(obj, f) == v) for f, neg, v in reqs)

    return match


# --------------------------------------------------------------------------------------------------
# Patches
# --------------------------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class PatchError(Exception):
    """A JSON patch that cannot be applied (the server answers 422)."""


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer must start with '/': {path!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _walk(doc: Any, tokens: list[str], path: str) -> Any:
    for tok in tokens:
        if isinstance(doc, dict) and tok in doc:
            doc = doc[tok]
        elif isinstance(doc, list) and tok.isdigit() and int(tok) < len(doc):
            doc = doc[int(tok)]
        else:
            raise PatchError(f"path {path!r} does not exist")
    return doc


def _get(doc: Any, path: str) -> Any:
    return _walk(doc, _pointer(path), path)


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _walk(doc, tokens[:-1], path)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise PatchError(f"unable to remove nonexistent key: {last}: missing value")


def _add(doc: Any, path: str, value: Any, replace: bool = False) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return copy.deepcopy(value)
    parent = _walk(doc, tokens[:-1], path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise PatchError(f"replace operation does not apply: doc is missing key: {path}")
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(copy.deepcopy(value))
        elif last.isdigit() and int(last) <= len(parent) - (1 if replace else 0):
            if replace:
                parent[int(last)] = copy.deepcopy(value)
            else:
                parent.insert(int(last), copy.deepcopy(value))
        else:
            raise PatchError(f"index out of range: {path}")
    else:
        raise PatchError(f"doc is missing path: {path}")
    return doc


def json_patch(doc: Any, ops: list[Any]) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test) on a copy of ``doc``."""
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"malformed operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "add":
            doc = _add(doc, path, op.get("value"))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            doc = _add(doc, path, op.get("value"), replace=True)
        elif kind == "move":
            value = _remove(doc, op["from"])
            doc = _add(doc, path, value)
        elif kind == "copy":
            doc = _add(doc, path, _get(doc, op["from"]))
        elif kind == "test":
            try:
                actual = _get(doc, path)
            except PatchError:
                raise PatchError(f"testing value {path} failed: path does not exist") from None
            if actual != op.get("value"):
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchError(f"Unexpected kind: {kind}")
    return doc


def _has_smp_directives(patch: Any) -> bool:
    if isinstance(patch, dict):
        return any(str(k).startswith("$") or _has_smp_directives(v) for k, v in patch.items())
    if isinstance(patch, list):
        return any(_has_smp_directives(v) for v in patch)
    return False


# --------------------------------------------------------------------------------------------------
# Recording and fault injection
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it; ``query`` keeps the last value of each parameter."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str | None
    body: Any
    headers: dict[str, str]
    at: float

    @property
    def is_watch(self) -> bool:
        return self.query.get("watch") in ("true", "1")


@dataclass
class Fault:
    """An injected misbehaviour, consumed by the first ``times`` matching requests (None: forever)."""

    method: str | None
    path_regex: str | None
    status: int | None
    retry_after: float | None
    times: int | None
    drop: bool
    delay: float
    watch: bool | None
    message: str | None = None
    hits: int = 0
    _re: re.Pattern[str] | None = field(default=None, repr=False)
    #: set by `release()`: requests held by `delay` go on at once (a test ends a hold when it is done
    #: with it, instead of guessing how long its own steps take on a busy machine)
    released: threading.Event = field(default_factory=threading.Event, repr=False)

    def release(self) -> None:
        self.released.set()

    def hold(self, halt: threading.Event) -> bool:
        """Wait out the delay (or until released); True when the server is halting meanwhile."""
        end = time.monotonic() + self.delay
        while not self.released.is_set():
            left = end - time.monotonic()
            if left <= 0:
                break
            if halt.wait(min(left, 0.05)):
                return True
        return halt.is_set()

    def matches(self, method: str, path: str, is_watch: bool) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if self.method is not None and self.method.upper() != method:
            return False
        if self.watch is not None and self.watch != is_watch:
            return False
        if self.path_regex is not None:
            if self._re is None:
                self._re = re.compile(self.path_regex)
            if not self._re.search(path):
                return False
        return True


class _Change(NamedTuple):
    rv: int
    plural: str
    type: str
    obj: JSON
    old: JSON | None


# --------------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------------


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], api: FakeKubeAPI) -> None:
        self.api = api
        super().__init__(addr, _Handler)


class FakeKubeAPI:
    """The fake API server. Objects persist across ``stop()``/``start()``, like etcd behind an apiserver.

    Test helpers (``put``, ``delete``, ``get``, ``compact``, ``block_eviction``) act on the store directly,
    also while the server is stopped, and emit the same watch events API writes do.
    """

    def __init__(
        self,
        *,
        token: str | None = "colo-test-token",
        bookmark_interval: float = 0.2,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.token = token
        self.bookmark_interval = bookmark_interval
        self.host = host
        self.port = port
        self.requests: list[RecordedRequest] = []
        self.faults: list[Fault] = []
        self._cond = threading.Condition()
        self._objects: dict[str, dict[tuple[str, str], JSON]] = {p: {} for p in RESOURCES}
        # Never "0": that value means "any version" to list and watch, like on a real cluster.
        self._rv = 100
        self._log: list[_Change] = []
        self._log_rvs: list[int] = []
        self._compacted = 0
        self._blocked: dict[tuple[str, str], str] = {}
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[socket.socket] = set()
        self._watch_conns: set[socket.socket] = set()
        self._epoch = 0  # bumped by stop() and drop_watches(): open watches of older epochs end abruptly
        self._halt = threading.Event()
        self.users: dict[str, JSON] = {}  # bearer token -> UserInfo, for TokenReview
        self.grants: set[tuple[str, str, str]] = set()  # (user or "group:NAME", verb, nonResourceURL)

    # ---- reviews ---------------------------------------------------------------------------------

    def add_user(self, token: str, username: str, groups: Sequence[str] = (), uid: str = "") -> None:
        """TokenReview authenticates `token` as this user (plus system:authenticated, as the API server adds)."""
        with self._cond:
            groups = [*groups, "system:authenticated"]
            self.users[token] = {"username": username, "uid": uid or f"uid-{username}", "groups": groups}

    def grant(self, subject: str, verb: str, url: str) -> None:
        """An RBAC rule on a non-resource URL for a user name or ``group:NAME``; `url` may end in ``*``."""
        with self._cond:
            self.grants.add((subject, verb, url))

    def allows(self, user: str, groups: Sequence[str], verb: str, path: str) -> bool:
        subjects = {user, *(f"group:{g}" for g in groups)}
        with self._cond:
            return any(
                subject in subjects
                and v in (verb, "*")
                and (url == path or (url.endswith("*") and path.startswith(url[:-1])))
                for subject, v, url in self.grants
            )

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> FakeKubeAPI:
        """Listen (on the same port as before after a stop, so clients reconnect to the same URL)."""
        if self._httpd is not None:
            return self
        self._halt = threading.Event()
        self._httpd = _HTTPServer((self.host, self.port), self)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, name="fake-kube-api", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop answering and cut every open connection, watches included (an outage, not a drain)."""
        httpd = self._httpd
        if httpd is None:
            return
        self._halt.set()
        with self._cond:
            self._epoch += 1
            self._cond.notify_all()
        httpd.shutdown()
        with self._cond:
            conns = list(self._conns)
        for sock in conns:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def restart(self, downtime: float = 0.0) -> None:
        """stop(), optionally stay down a while, start() again on the same port."""
        self.stop()
        if downtime:
            time.sleep(downtime)
        self.start()

    @property
    def running(self) -> bool:
        return self._httpd is not None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> FakeKubeAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def kubeconfig(self, path: str | Path) -> str:
        """Write a kubeconfig pointing at this server (plain http, bearer token) and return its path."""
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "colo", "user": {"token": self.token} if self.token else {}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "colo", "namespace": "default"}}],
            "current-context": "fake",
        }
        Path(path).write_text(json.dumps(cfg, indent=2))  # JSON is YAML
        return str(path)

    # ---- fault injection and request log ---------------------------------------------------------

    def inject(
        self,
        method: str | None = None,
        path_regex: str | None = None,
        status: int | None = 500,
        retry_after: float | None = None,
        times: int | None = 1,
        drop: bool = False,
        delay: float = 0.0,
        *,
        watch: bool | None = None,
        message: str | None = None,
    ) -> Fault:
        """Misbehave on the next ``times`` requests matching method / path regex / watch-ness.

        After ``delay`` seconds: ``drop`` closes the connection without an answer; otherwise ``status``
        is answered with a real-shaped Status (plus Retry-After if given; a 410 on a watch is sent as an
        ERROR event like the real server does); ``status=None`` with a delay just slows the request down.
        """
        fault = Fault(method, path_regex, status, retry_after, times, drop, delay, watch, message)
        with self._cond:
            self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._cond:
            self.faults.clear()

    def _take_fault(self, method: str, path: str, is_watch: bool) -> Fault | None:
        with self._cond:
            for fault in self.faults:
                if fault.matches(method, path, is_watch):
                    fault.hits += 1
                    return fault
        return None

    def requests_for(
        self, method: str | None = None, path_regex: str | None = None, *, watch: bool | None = None
    ) -> list[RecordedRequest]:
        """Recorded requests filtered like faults are matched."""
        pattern = re.compile(path_regex) if path_regex else None
        with self._cond:
            reqs = list(self.requests)
        return [
            r
            for r in reqs
            if (method is None or r.method == method.upper())
            and (pattern is None or pattern.search(r.path))
            and (watch is None or r.is_watch == watch)
        ]

    def drop_watches(self) -> None:
        """Cut every open watch mid-stream (no terminating chunk), as a flaky network or LB would."""
        with self._cond:
            self._epoch += 1
            socks = list(self._watch_conns)
            self._cond.notify_all()
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def open_watches(self) -> int:
        with self._cond:
            return len(self._watch_conns)

    # ---- store helpers ---------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    @staticmethod
    def _rt(kind: str) -> ResourceType:
        try:
            return RESOURCES[kind]
        except KeyError:
            raise ValueError(f"unknown kind {kind!r}; known: {sorted(RESOURCES)}") from None

    @staticmethod
    def _key(rt: ResourceType, namespace: str | None, name: str) -> tuple[str, str]:
        return ((namespace or "default") if rt.namespaced else "", name)

    def put(self, kind: str, obj: JSON) -> JSON:
        """Create or overwrite an object verbatim (apart from system metadata); emits ADDED/MODIFIED."""
        rt = self._rt(kind)
        new = copy.deepcopy(obj)
        meta = new.setdefault("metadata", {})
        if not meta.get("name"):
            raise ValueError("put() needs metadata.name")
        if rt.namespaced:
            meta["namespace"] = meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        new["kind"] = rt.kind
        new["apiVersion"] = rt.api_version
        key = self._key(rt, meta.get("namespace"), meta["name"])
        with self._cond:
            old = self._objects[rt.plural].get(key)
            if old is not None:
                meta.setdefault("uid", old["metadata"].get("uid"))
                meta.setdefault("creationTimestamp", old["metadata"].get("creationTimestamp"))
            else:
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", _now())
            stored = self._write(rt, "MODIFIED" if old is not None else "ADDED", new, old)
            return copy.deepcopy(stored)

    def get(self, kind: str, namespace: str | None, name: str) -> JSON | None:
        rt = self._rt(kind)
        with self._cond:
            obj = self._objects[rt.plural].get(self._key(rt, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def delete(self, kind: str, namespace: str | None, name: str) -> JSON | None:
        """Remove an object (emits DELETED); returns it, or None if it did not exist."""
        rt = self._rt(kind)
        with self._cond:
            old = self._objects[rt.plural].get(self._key(rt, namespace, name))
            if old is None:
                return None
            return copy.deepcopy(self._write(rt, "DELETED", copy.deepcopy(old), old))

    def objects(self, kind: str) -> list[JSON]:
        rt = self._rt(kind)
        with self._cond:
            return [copy.deepcopy(o) for _, o in sorted(self._objects[rt.plural].items())]

    def compact(self, resource_version: int | None = None) -> int:
        """Forget history up to ``resource_version`` (default: now), as etcd compaction does.

        Watches and lists asking for an older version then get 410 Gone.
        """
        with self._cond:
            target = self._rv if resource_version is None else min(resource_version, self._rv)
            self._compacted = max(self._compacted, target)
            cut = bisect.bisect_right(self._log_rvs, self._compacted)
            del self._log[:cut]
            del self._log_rvs[:cut]
            self._cond.notify_all()
            return self._compacted

    def block_eviction(self, namespace: str, name: str, pdb: str = "colo-test-pdb", blocked: bool = True) -> None:
        """Make evictions of this pod fail with 429 as if a PodDisruptionBudget allowed no disruption."""
        with self._cond:
            if blocked:
                self._blocked[(namespace, name)] = pdb
            else:
                self._blocked.pop((namespace, name), None)

    def _write(self, rt: ResourceType, etype: str, obj: JSON, old: JSON | None) -> JSON:
        """Store a change under a new resourceVersion and wake watchers. Caller holds the lock."""
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        key = self._key(rt, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if etype == "DELETED":
            self._objects[rt.plural].pop(key, None)
        else:
            self._objects[rt.plural][key] = obj
        self._log.append(_Change(self._rv, rt.plural, etype, copy.deepcopy(obj), old))
        self._log_rvs.append(self._rv)
        self._cond.notify_all()
        return obj


# --------------------------------------------------------------------------------------------------
# HTTP handling
# --------------------------------------------------------------------------------------------------

_PATCH_TYPES = {
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/json-patch+json",
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes; avoid 40 ms stalls
    server: _HTTPServer

    # Quiet: the test output is not the place for an access log.
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        with self.api._cond:
            self.api._conns.add(self.connection)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        with self.api._cond:
            self.api._conns.discard(self.connection)
            self.api._watch_conns.discard(self.connection)

    @property
    def api(self) -> FakeKubeAPI:
        return self.server.api

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # ---- plumbing --------------------------------------------------------------------------------

    def _send_json(self, code: int, obj: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _send_failure(self, failure: ApiFailure) -> None:
        self._send_json(failure.code, failure.status, failure.headers)

    def _dispatch(self, method: str) -> None:
        api = self.api
        halt = api._halt
        parts = urlsplit(self.path)
        path = parts.path
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        ctype = self.headers.get("Content-Type")
        body: Any = None
        bad_json = False
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body, bad_json = raw.decode("utf-8", "replace"), True
        is_watch = method == "GET" and query.get("watch") in ("true", "1")
        with api._cond:
            api.requests.append(
                RecordedRequest(
                    method, path, query, ctype, body, {k.lower(): v for k, v in self.headers.items()}, time.time()
                )
            )
        fault = api._take_fault(method, path, is_watch)
        if fault is not None:
            deadline = None if is_watch else _parse_timeout(query.get("timeout"))
            if deadline is not None and fault.delay >= deadline:
                # The request deadline passes while the request is held up: 504, and nothing is applied.
                if halt.wait(deadline):
                    self.close_connection = True
                    return
                with contextlib.suppress(OSError):
                    self._send_failure(ApiFailure(504, "Timeout"))
                return
            if fault.delay and fault.hold(halt):
                self.close_connection = True
                return
            if fault.drop:
                self.close_connection = True
                return
            if fault.status is not None:
                headers: dict[str, str] = {}
                details: JSON | None = None
                if fault.retry_after is not None:
                    ra = fault.retry_after
                    headers["Retry-After"] = str(int(ra)) if float(ra).is_integer() else str(ra)
                    details = {"retryAfterSeconds": max(1, round(ra))}
                failure = ApiFailure(fault.status, message=fault.message, details=details, headers=headers)
                if is_watch and fault.status == 410:
                    self._start_stream()
                    self._write_event({"type": "ERROR", "object": failure.status})
                    self._end_stream()
                else:
                    self._send_failure(failure)
                return
        try:
            if api.token and self.headers.get("Authorization") != f"Bearer {api.token}":
                raise ApiFailure(401)
            if bad_json:
                raise ApiFailure(400, message="the request body is not valid JSON")
            self._manager = query.get("fieldManager") or (self.headers.get("User-Agent") or "").split("/")[0]
            if len(self._manager) > 128:
                raise ApiFailure(422, message="fieldManager: Too long: may not be more than 128 bytes")
            self._route(method, path, query, ctype, body)
        except ApiFailure as failure:
            self._send_failure(failure)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # a bug in the fake: answer like the server would, and make it visible
            traceback.print_exc(file=sys.stderr)
            self._send_failure(ApiFailure(500, message=f"Internal error occurred: {e}"))

    def _route(self, method: str, path: str, query: dict[str, str], ctype: str | None, body: Any) -> None:
        if path == "/version":
            self._send_json(
                200,
                {"major": "1", "minor": "30", "gitVersion": "v1.30.0-colo-fake", "platform": "linux/amd64"},
            )
            return
        if path == "/api":
            self._send_json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
            return
        if path == "/apis":
            groups = [
                {
                    "name": g,
                    "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
                    "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v},
                }
                for g, v in sorted(_GROUP_VERSIONS)
                if g
            ]
            self._send_json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
            return
        if path in (TOKEN_REVIEWS, ACCESS_REVIEWS):
            if method != "POST":
                raise ApiFailure(405)
            self._review(path, body)
            return
        m = _PATH_RE.match(path)
        if not m:
            raise ApiFailure(404)
        group = m["group"] or ""
        version = m["core"] or m["version"]
        rt = RESOURCES.get(m["plural"])
        if rt is None or (rt.group, rt.version) != (group, version):
            raise ApiFailure(404)
        ns, name, sub = m["ns"], m["name"], m["sub"]
        if rt.namespaced != (ns is not None) and not (rt.namespaced and ns is None and name is None):
            raise ApiFailure(404)
        if name is None:
            if method == "GET":
                if query.get("watch") in ("true", "1"):
                    self._watch(rt, ns, query)
                else:
                    self._list(rt, ns, query)
            elif method == "POST" and (ns is not None or not rt.namespaced):
                self._create(rt, ns, query, body)
            else:
                raise ApiFailure(405)
            return
        if sub is not None and (sub, rt.plural) not in {("status", "pods"), ("status", "nodes"), ("eviction", "pods")}:
            raise ApiFailure(404)
        if sub == "eviction":
            if method != "POST":
                raise ApiFailure(405)
            self._evict(rt, ns or "", name, query, body)
        elif method == "GET":
            self._send_json(200, self._current(rt, ns, name))
        elif method == "PUT":
            self._update(rt, ns, name, sub, body)
        elif method == "PATCH":
            self._patch(rt, ns, name, sub, ctype, body)
        elif method == "DELETE" and sub is None:
            self._delete(rt, ns, name)
        else:
            raise ApiFailure(405)

    # ---- reviews (create-only, nothing stored) ----------------------------------------------------

    def _review(self, path: str, body: Any) -> None:
        spec = body.get("spec") if isinstance(body, dict) else None
        if not isinstance(spec, dict):
            raise ApiFailure(422, message="spec: Required value")
        status: JSON
        if path == TOKEN_REVIEWS:
            token = spec.get("token")
            if not isinstance(token, str) or not token:
                raise ApiFailure(422, message="spec.token: Required value")
            with self.api._cond:
                user = copy.deepcopy(self.api.users.get(token))
            status = (
                {"authenticated": True, "user": user} if user else {"authenticated": False, "error": "invalid token"}
            )
            kind, api_version = "TokenReview", "authentication.k8s.io/v1"
        else:
            attrs = spec.get("nonResourceAttributes")
            if not isinstance(attrs, dict) or spec.get("resourceAttributes") is not None:
                raise ApiFailure(422, message="exactly one of nonResourceAttributes, resourceAttributes is required")
            if not spec.get("user") and not spec.get("groups"):
                raise ApiFailure(422, message="at least one of user or group must be specified")
            allowed = self.api.allows(
                str(spec.get("user") or ""),
                list(spec.get("groups") or []),
                str(attrs.get("verb")),
                str(attrs.get("path")),
            )
            status = {"allowed": allowed, "reason": "allowed by a fake RBAC rule" if allowed else ""}
            kind, api_version = "SubjectAccessReview", "authorization.k8s.io/v1"
        self._send_json(201, {"kind": kind, "apiVersion": api_version, "metadata": {}, "spec": spec, "status": status})

    # ---- verbs -----------------------------------------------------------------------------------

    def _current(self, rt: ResourceType, ns: str | None, name: str) -> JSON:
        with self.api._cond:
            obj = self.api._objects[rt.plural].get(FakeKubeAPI._key(rt, ns, name))
            if obj is None:
                raise _not_found(rt, name)
            return copy.deepcopy(obj)

    @staticmethod
    def _predicate(rt: ResourceType, ns: str | None, query: Mapping[str, str]) -> Predicate:
        labels = parse_label_selector(query.get("labelSelector", ""))
        fields = parse_field_selector(rt, query.get("fieldSelector", ""))

        def match(obj: JSON) -> bool:
            if ns is not None and (obj.get("metadata") or {}).get("namespace") != ns:
                return False
            return labels(obj) and fields(obj)

        return match

    def _list(self, rt: ResourceType, ns: str | None, query: dict[str, str]) -> None:
        match = self._predicate(rt, ns, query)
        api = self.api
        asked = query.get("resourceVersion", "")
        token = query.get("continue", "")
        raw_limit = query.get("limit", "")
        if raw_limit and not raw_limit.lstrip("-").isdigit():
            raise ApiFailure(400, message=f"invalid limit: {raw_limit}")
        limit = max(0, int(raw_limit or 0))
        after: tuple[str, str] | None = None
        with api._cond:
            if token:
                if asked not in ("", "0"):
                    raise ApiFailure(400, message="specifying resource version is not allowed when using continue")
                snapshot, after = _decode_continue(token)
                if snapshot < api._compacted:
                    raise ApiFailure(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent list result. "
                        "You can start a new list without the continue parameter.",
                    )
            else:
                if asked not in ("", "0"):
                    if not asked.isdigit():
                        raise ApiFailure(400, message=f"invalid resource version: {asked}")
                    if int(asked) < api._compacted:
                        raise ApiFailure(410, "Expired", "The resourceVersion for the provided list is too old.")
                snapshot = api._rv
            state = self._state_at(rt, snapshot)
            keys = sorted(k for k in state if after is None or k > after)
            items: list[JSON] = []
            last: tuple[str, str] | None = None
            rest = iter(keys)
            for key in rest:
                obj = state[key]
                if not match(obj):
                    continue
                if limit and len(items) == limit:
                    rest = itertools.chain([key], rest)
                    break
                item = copy.deepcopy(obj)
                item.pop("kind", None)
                item.pop("apiVersion", None)
                items.append(item)
                last = key
            else:
                last = None  # nothing left: no continue token
            meta: JSON = {"resourceVersion": str(snapshot)}
            if last is not None:
                meta["continue"] = _encode_continue(snapshot, last)
                if not query.get("labelSelector") and not query.get("fieldSelector"):
                    # As the real server: only an unfiltered list knows how many items remain.
                    meta["remainingItemCount"] = sum(1 for k in rest if match(state[k]))
        self._send_json(200, {"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": meta, "items": items})

    def _state_at(self, rt: ResourceType, rv: int) -> dict[tuple[str, str], JSON]:
        """The kind's objects as of ``rv`` (>= the compaction point): now, with later changes undone."""
        api = self.api
        state = dict(api._objects[rt.plural])
        for change in reversed(api._log[bisect.bisect_right(api._log_rvs, rv) :]):
            if change.plural != rt.plural:
                continue
            meta = change.obj["metadata"]
            key = FakeKubeAPI._key(rt, meta.get("namespace"), meta["name"])
            if change.old is None:
                state.pop(key, None)
            else:
                state[key] = change.old
        return state

    def _check_body(self, rt: ResourceType, body: Any, kind: str | None = None) -> JSON:
        if not isinstance(body, dict):
            raise ApiFailure(400, message="the body of the request must be a JSON object")
        want = kind or rt.kind
        if body.get("kind") not in (None, want):
            raise ApiFailure(
                400, message=f"the object provided is unrecognized (must be of type {want}): {body.get('kind')}"
            )
        return copy.deepcopy(body)

    def _create(self, rt: ResourceType, ns: str | None, query: dict[str, str], body: Any) -> None:
        obj = self._check_body(rt, body)
        meta = obj.setdefault("metadata", {})
        if rt.namespaced:
            if meta.get("namespace") not in (None, "", ns):
                raise ApiFailure(
                    400, message="the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = ns
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + "".join(
                    random.choices(string.ascii_lowercase + string.digits, k=5)
                )
            else:
                raise ApiFailure(
                    422,
                    message=f'{rt.kind} "" is invalid: metadata.name: Required value: name or generateName is required',
                    details={"kind": rt.kind},
                )
        obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        api = self.api
        with api._cond:
            key = FakeKubeAPI._key(rt, meta.get("namespace"), meta["name"])
            if key in api._objects[rt.plural]:
                raise ApiFailure(
                    409, "AlreadyExists", f'{rt.qualified} "{meta["name"]}" already exists', rt.details(meta["name"])
                )
            if query.get("dryRun") == "All":
                meta["resourceVersion"] = ""
                stored = obj
            else:
                self._record_manager(rt, obj, None)
                stored = copy.deepcopy(api._write(rt, "ADDED", obj, None))
        self._send_json(201, stored)

    def _commit_update(self, rt: ResourceType, name: str, cur: JSON, new: JSON, sub: str | None) -> JSON:
        """Shared tail of PUT and PATCH: subresource rules, precondition, no-op detection, write.

        Callers hold the store lock from reading ``cur`` to here, so "current" really is current: a
        request delayed by a fault sees every write that happened meanwhile, as with a real server.
        """
        asked_rv = str((new.get("metadata") or {}).get("resourceVersion") or "")
        if sub == "status":
            merged = copy.deepcopy(cur)
            merged["status"] = new.get("status")
            if merged["status"] is None:
                merged.pop("status")
            new = merged
        else:
            if not isinstance(new.get("metadata"), dict):
                raise ApiFailure(422, message=f'{rt.kind} "{name}" is invalid: metadata: Required value')
            for keep in ("uid", "creationTimestamp", "namespace", "name"):
                if keep in cur["metadata"]:
                    new["metadata"][keep] = cur["metadata"][keep]
            if rt.has_status:
                if "status" in cur:
                    new["status"] = copy.deepcopy(cur["status"])
                else:
                    new.pop("status", None)
        new["kind"], new["apiVersion"] = rt.kind, rt.api_version
        cur_rv = cur["metadata"]["resourceVersion"]
        if asked_rv and asked_rv != cur_rv:
            raise _conflict(rt, name)
        new["metadata"]["resourceVersion"] = cur_rv
        if new == cur:
            return cur  # no-op writes do not bump resourceVersion or notify watchers
        self._record_manager(rt, new, sub)
        return copy.deepcopy(self.api._write(rt, "MODIFIED", new, cur))

    def _record_manager(self, rt: ResourceType, obj: JSON, sub: str | None) -> None:
        """This request's manager in obj's managedFields: one Update entry per manager and subresource."""
        manager = getattr(self, "_manager", "")
        if not manager:
            return
        meta = obj["metadata"]
        mine = (manager, "Update", sub or "")
        kept = [e for e in meta.get("managedFields") or []
                if (e.get("manager"), e.get("operation"), e.get("subresource", "")) != mine]  # fmt: skip
        entry: JSON = {"manager": manager, "operation": "Update", "apiVersion": rt.api_version, "time": _now(),
                       "fieldsType": "FieldsV1"}  # fmt: skip
        if sub:
            entry["subresource"] = sub
        meta["managedFields"] = [*kept, entry]

    def _update(self, rt: ResourceType, ns: str | None, name: str, sub: str | None, body: Any) -> None:
        obj = self._check_body(rt, body)
        body_name = (obj.get("metadata") or {}).get("name")
        if body_name != name:
            raise ApiFailure(
                400, message=f"the name of the object ({body_name}) does not match the name on the URL ({name})"
            )
        with self.api._cond:
            cur = self._current(rt, ns, name)
            result = self._commit_update(rt, name, cur, obj, sub)
        self._send_json(200, result)

    def _patch(
        self, rt: ResourceType, ns: str | None, name: str, sub: str | None, ctype: str | None, body: Any
    ) -> None:
        media = (ctype or "").split(";")[0].strip().lower()
        if media not in _PATCH_TYPES:
            raise ApiFailure(
                415,
                message="the body of the request was in an unknown format - accepted media types include: "
                + ", ".join(sorted(_PATCH_TYPES)),
            )
        if media == "application/json-patch+json":
            if not isinstance(body, list):
                raise ApiFailure(400, message="json: cannot unmarshal object into Go value of type jsonpatch.Patch")
        elif not isinstance(body, dict):
            raise ApiFailure(400, message="json: cannot unmarshal array into Go value of type map[string]interface {}")
        elif media == "application/strategic-merge-patch+json" and _has_smp_directives(body):
            raise ApiFailure(400, message="fake API server: strategic merge directives are not supported")
        with self.api._cond:
            cur = self._current(rt, ns, name)
            if media == "application/json-patch+json":
                try:
                    new = json_patch(cur, body)
                except PatchError as e:
                    raise ApiFailure(
                        422,
                        "Invalid",
                        "the server rejected our request due to an error in our request",
                        {"causes": [{"reason": "UnexpectedServerResponse", "message": str(e)}]},
                    ) from None
            else:
                new = merge_patch(cur, body)
            if not isinstance(new, dict):
                raise ApiFailure(422, message="patch did not produce an object")
            result = self._commit_update(rt, name, cur, new, sub)
        self._send_json(200, result)

    def _delete(self, rt: ResourceType, ns: str | None, name: str) -> None:
        api = self.api
        with api._cond:
            key = FakeKubeAPI._key(rt, ns, name)
            old = api._objects[rt.plural].get(key)
            if old is None:
                raise _not_found(rt, name)
            gone = copy.deepcopy(api._write(rt, "DELETED", copy.deepcopy(old), old))
        self._send_json(200, gone)

    def _evict(self, rt: ResourceType, ns: str, name: str, query: dict[str, str], body: Any) -> None:
        eviction = self._check_body(rt, body, kind="Eviction")
        if (eviction.get("metadata") or {}).get("name") != name:
            raise ApiFailure(400, message="name in URL does not match name in Eviction object")
        dry_run = query.get("dryRun") == "All" or "All" in ((eviction.get("deleteOptions") or {}).get("dryRun") or [])
        api = self.api
        with api._cond:
            key = (ns, name)
            pod = api._objects["pods"].get(key)
            if pod is None:
                raise _not_found(rt, name)
            phase = (pod.get("status") or {}).get("phase")
            pdb = api._blocked.get(key)
            if pdb is not None and phase not in ("Succeeded", "Failed", "Pending"):
                raise ApiFailure(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    {
                        "causes": [
                            {
                                "reason": "DisruptionBudget",
                                "message": f"The disruption budget {pdb} needs 1 healthy pods and has 1 currently",
                            }
                        ]
                    },
                )
            if not dry_run:
                api._write(rt, "DELETED", copy.deepcopy(pod), pod)
        self._send_json(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})

    # ---- watch -----------------------------------------------------------------------------------

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _write_event(self, event: JSON) -> None:
        data = json.dumps(event, separators=(",", ":")).encode() + b"\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")

    def _watch(self, rt: ResourceType, ns: str | None, query: dict[str, str]) -> None:
        match = self._predicate(rt, ns, query)
        api = self.api
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        timeout = float(query.get("timeoutSeconds") or 1800)
        asked = query.get("resourceVersion", "")
        if asked not in ("", "0") and not asked.isdigit():
            raise ApiFailure(400, message=f"invalid resource version: {asked}")
        initial: list[JSON] = []
        with api._cond:
            epoch = api._epoch
            too_old = asked not in ("", "0") and int(asked) < api._compacted
            if asked in ("", "0"):
                initial = [copy.deepcopy(o) for _, o in sorted(api._objects[rt.plural].items()) if match(o)]
                cursor = api._rv
            else:
                cursor = int(asked)
            compacted = api._compacted
            api._watch_conns.add(self.connection)
        try:
            self._start_stream()
            if too_old:
                self._write_event({"type": "ERROR", "object": self._expired(int(asked), compacted)})
                self._end_stream()
                return
            for obj in initial:
                self._write_event({"type": "ADDED", "object": obj})
            start = time.monotonic()
            deadline = start + timeout
            next_bookmark = start + api.bookmark_interval
            for event in self._follow(rt, match, cursor, epoch, deadline, next_bookmark if bookmarks else None):
                self._write_event(event)
            if api._epoch == epoch:
                self._end_stream()
            else:
                self.close_connection = True  # cut: no terminating chunk, the client sees a broken stream
        finally:
            with api._cond:
                api._watch_conns.discard(self.connection)

    @staticmethod
    def _expired(asked: int, compacted: int) -> JSON:
        return status_object(410, "Expired", f"too old resource version: {asked} ({compacted})")

    def _follow(
        self,
        rt: ResourceType,
        match: Predicate,
        cursor: int,
        epoch: int,
        deadline: float,
        next_bookmark: float | None,
    ) -> Iterator[JSON]:
        """Yield watch events after ``cursor`` until the deadline, a drop, or the server stopping."""
        api = self.api
        while True:
            with api._cond:
                while True:
                    if api._epoch != epoch:
                        return
                    if cursor < api._compacted:
                        yield {"type": "ERROR", "object": self._expired(cursor, api._compacted)}
                        return
                    pos = bisect.bisect_right(api._log_rvs, cursor)
                    changes = api._log[pos:]
                    now = time.monotonic()
                    due = next_bookmark is not None and now >= next_bookmark
                    if changes or due or now >= deadline:
                        break
                    wake = deadline if next_bookmark is None else min(deadline, next_bookmark)
                    api._cond.wait(max(0.0, wake - now))
                current = api._rv
            for change in changes:
                event = self._filter(rt, match, change)
                cursor = change.rv
                if event is not None:
                    yield event
            if due and next_bookmark is not None:
                cursor = max(cursor, current)
                yield {
                    "type": "BOOKMARK",
                    "object": {
                        "kind": rt.kind,
                        "apiVersion": rt.api_version,
                        "metadata": {"resourceVersion": str(cursor)},
                    },
                }
                next_bookmark = time.monotonic() + api.bookmark_interval
            if time.monotonic() >= deadline:
                return

    @staticmethod
    def _filter(rt: ResourceType, match: Predicate, change: _Change) -> JSON | None:
        """What a filtered watcher sees: objects entering/leaving the selection appear ADDED/DELETED."""
        if change.plural != rt.plural:
            return None
        new_match = match(change.obj)
        if change.type == "MODIFIED":
            old_match = change.old is not None and match(change.old)
            if new_match and old_match:
                etype = "MODIFIED"
            elif new_match:
                etype = "ADDED"
            elif old_match:
                etype = "DELETED"
            else:
                return None
        elif new_match:
            etype = change.type
        else:
            return None
        return {"type": etype, "object": copy.deepcopy(change.obj)}
