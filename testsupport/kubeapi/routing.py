"""Routing: the HTTP server and its request handler, from a request line to the verb that answers it.

A request is read, recorded, offered to the injected faults (`faults`), authenticated (`access`), then
routed: discovery (``/version``, ``/api``, ``/apis``), the review APIs, and the REST paths of the kinds in
`resource_types` (collection: list, watch, create; object: get, put, patch, delete; the ``status`` and
``eviction`` subresources). Any other path or method is the real server's 404 or 405. The verbs' semantics
live in `store` (list, watch), `writes` and `patch`; this module speaks HTTP: JSON bodies, and watches as
chunked streams of one event a line, cut without a terminating chunk when a test drops them.

The handler is the server's own: it shares `FakeKubeAPI`'s lock, store, connections and halt flag (`Served`).
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from testsupport.kubeapi.access import ACCESS_REVIEWS, TOKEN_REVIEWS, bearer_ok, review
from testsupport.kubeapi.failures import ApiFailure
from testsupport.kubeapi.faults import Fault, RecordedRequest, answer_fault
from testsupport.kubeapi.patch import patch_object
from testsupport.kubeapi.resource_types import GROUP_VERSIONS, JSON, RESOURCES, ResourceType
from testsupport.kubeapi.selection import predicate
from testsupport.kubeapi.store import ObjectStore, expired
from testsupport.kubeapi.writes import create_object, delete_object, evict_pod, update_object

_PATH_RE = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[a-z0-9.-]+)/(?P<version>v[0-9a-z]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?"
    r"/(?P<plural>[a-z]+)"
    r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[a-z]+))?)?/?$"
)
_SUBRESOURCES = {("status", "pods"), ("status", "nodes"), ("eviction", "pods")}

_VERSION = {"major": "1", "minor": "30", "gitVersion": "v1.30.0-colo-fake", "platform": "linux/amd64"}


class Served(Protocol):
    """What the handler uses of the server it answers for (`server.FakeKubeAPI`, whose ``_`` state it shares)."""

    token: str | None
    bookmark_interval: float
    requests: list[RecordedRequest]
    _cond: threading.Condition
    _store: ObjectStore
    _conns: set[socket.socket]
    _watch_conns: set[socket.socket]
    _halt: threading.Event

    def allows(self, user: str, groups: Sequence[str], verb: str, path: str) -> bool: ...

    def _take_fault(self, method: str, path: str, is_watch: bool) -> Fault | None: ...

    def _user_for(self, token: str) -> JSON | None: ...


class ApiHTTPServer(ThreadingHTTPServer):
    """The listening socket of one server, one thread a connection."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], api: Served) -> None:
        self.api = api
        super().__init__(addr, Handler)


class Handler(BaseHTTPRequestHandler):
    """The requests of one connection (HTTP/1.1, kept alive as clients do)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes; avoid 40 ms stalls
    server: ApiHTTPServer

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
    def api(self) -> Served:
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

    # ---- plumbing (also the `faults.Responder` a fault answers through) ----------------------------

    def send_json(self, code: int, obj: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def send_failure(self, failure: ApiFailure) -> None:
        self.send_json(failure.code, failure.status, failure.headers)

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def write_event(self, event: JSON) -> None:
        data = json.dumps(event, separators=(",", ":")).encode() + b"\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")

    # ---- a request -------------------------------------------------------------------------------

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
        if fault is not None and answer_fault(fault, self, is_watch=is_watch, timeout=query.get("timeout"), halt=halt):
            return
        try:
            if not bearer_ok(api.token, self.headers.get("Authorization")):
                raise ApiFailure(401)
            if bad_json:
                raise ApiFailure(400, message="the request body is not valid JSON")
            if len(query.get("fieldManager", "")) > 128:
                raise ApiFailure(422, message="fieldManager: Too long: may not be more than 128 bytes")
            self._route(method, path, query, ctype, body)
        except ApiFailure as failure:
            self.send_failure(failure)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # a bug in the fake: answer like the server would, and make it visible
            traceback.print_exc(file=sys.stderr)
            self.send_failure(ApiFailure(500, message=f"Internal error occurred: {e}"))

    def _route(self, method: str, path: str, query: dict[str, str], ctype: str | None, body: Any) -> None:
        if path == "/version":
            self.send_json(200, dict(_VERSION))
            return
        if path == "/api":
            self.send_json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
            return
        if path == "/apis":
            groups = [
                {
                    "name": g,
                    "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
                    "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v},
                }
                for g, v in sorted(GROUP_VERSIONS)
                if g
            ]
            self.send_json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
            return
        if path in (TOKEN_REVIEWS, ACCESS_REVIEWS):
            if method != "POST":
                raise ApiFailure(405)
            self.send_json(201, review(path, body, self.api._user_for, self.api.allows))
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
        store = self.api._store
        # the writer, as the real server names it in managedFields: fieldManager, else the User-Agent's product
        manager = query.get("fieldManager") or (self.headers.get("User-Agent") or "").split("/")[0]
        if name is None:
            if method == "GET":
                if query.get("watch") in ("true", "1"):
                    self._watch(rt, ns, query)
                else:
                    self.send_json(200, store.list_page(rt, predicate(rt, ns, query), query))
            elif method == "POST" and (ns is not None or not rt.namespaced):
                self.send_json(201, create_object(store, rt, ns, query, body, manager))
            else:
                raise ApiFailure(405)
            return
        if sub is not None and (sub, rt.plural) not in _SUBRESOURCES:
            raise ApiFailure(404)
        if sub == "eviction":
            if method != "POST":
                raise ApiFailure(405)
            self.send_json(201, evict_pod(store, rt, ns or "", name, query, body))
        elif method == "GET":
            self.send_json(200, store.current(rt, ns, name))
        elif method == "PUT":
            self.send_json(200, update_object(store, rt, ns, name, sub, body, manager))
        elif method == "PATCH":
            self.send_json(200, patch_object(store, rt, ns, name, sub, ctype, body, manager))
        elif method == "DELETE" and sub is None:
            self.send_json(200, delete_object(store, rt, ns, name))
        else:
            raise ApiFailure(405)

    # ---- watch -----------------------------------------------------------------------------------

    def _watch(self, rt: ResourceType, ns: str | None, query: dict[str, str]) -> None:
        """Stream a watch: its opening events, then the store's changes until it ends or is cut."""
        match = predicate(rt, ns, query)
        api = self.api
        store = api._store
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        timeout = float(query.get("timeoutSeconds") or 1800)
        asked = query.get("resourceVersion", "")
        if asked not in ("", "0") and not asked.isdigit():
            raise ApiFailure(400, message=f"invalid resource version: {asked}")
        with api._cond:
            begin = store.watch_start(rt, match, asked)
            api._watch_conns.add(self.connection)
        try:
            self.start_stream()
            if begin.too_old:
                self.write_event({"type": "ERROR", "object": expired(int(asked), begin.compacted)})
                self.end_stream()
                return
            for obj in begin.initial:
                self.write_event({"type": "ADDED", "object": obj})
            start = time.monotonic()
            deadline = start + timeout
            next_bookmark = start + api.bookmark_interval
            events = store.follow(
                rt,
                match,
                begin.cursor,
                begin.epoch,
                deadline,
                next_bookmark if bookmarks else None,
                lambda: api.bookmark_interval,
            )
            for event in events:
                self.write_event(event)
            if store.epoch == begin.epoch:
                self.end_stream()
            else:
                self.close_connection = True  # cut: no terminating chunk, the client sees a broken stream
        finally:
            with api._cond:
                api._watch_conns.discard(self.connection)
