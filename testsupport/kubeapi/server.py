"""An in-process stand-in for kube-apiserver, spoken to over real HTTP by the real ``kubernetes`` client.

No kube-apiserver can run in the test environment, and monkeypatching the client would test nothing that
matters on a cluster. So this server implements the part of the API Colo uses with the server's own
semantics: the REST paths, list/watch with selectors, resourceVersion preconditions and 409s, the three
patch content types, status subresources that ignore everything but ``status``, PDB-blocked evictions,
410 Gone after compaction, and Status objects shaped like the real ones. Tests inject faults (errors,
Retry-After, dropped connections, delays), read back every request, and stop/restart it like an outage.

This module is the front: `FakeKubeAPI`, its lifecycle and the test's handles on every part. The parts,
each with the simplifications against a real kube-apiserver that live in it (listed in its docstring):

* `routing` — the HTTP server and handler: discovery, paths and methods to verbs, watch streams;
* `store` — storage and watch: objects, history, compaction, paged lists, watch events, ``put()``;
* `writes` — create, update, delete, eviction (deletion is immediate; no admission or defaulting);
* `patch` — merge, JSON and strategic-merge patch (strategic merge is applied as a JSON merge patch);
* `access` — the bearer token, TokenReview and SubjectAccessReview (non-resource URLs only);
* `faults` — fault injection and the request log (``timeout`` honoured only under a fault's delay);
* `selection`, `resource_types`, `failures` — selectors, the kinds served, Status-shaped errors.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from testsupport.kubeapi.access import ACCESS_REVIEWS, TOKEN_REVIEWS, granted, user_info
from testsupport.kubeapi.faults import Fault, RecordedRequest, request_matches
from testsupport.kubeapi.resource_types import JSON
from testsupport.kubeapi.routing import ApiHTTPServer
from testsupport.kubeapi.store import ObjectStore

__all__ = ["ACCESS_REVIEWS", "TOKEN_REVIEWS", "FakeKubeAPI", "Fault", "RecordedRequest"]


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
        # One lock for everything (store, request log, faults, users, connections), as one server process.
        self._cond = threading.Condition()
        self._store = ObjectStore(self._cond)
        self._httpd: ApiHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[socket.socket] = set()
        self._watch_conns: set[socket.socket] = set()
        self._halt = threading.Event()
        self.users: dict[str, JSON] = {}  # bearer token -> UserInfo, for TokenReview
        self.grants: set[tuple[str, str, str]] = set()  # (user or "group:NAME", verb, nonResourceURL)

    # ---- reviews ---------------------------------------------------------------------------------

    def add_user(self, token: str, username: str, groups: Sequence[str] = (), uid: str = "") -> None:
        """TokenReview authenticates `token` as this user (plus system:authenticated, as the API server adds)."""
        with self._cond:
            self.users[token] = user_info(username, groups, uid)

    def grant(self, subject: str, verb: str, url: str) -> None:
        """An RBAC rule on a non-resource URL for a user name or ``group:NAME``; `url` may end in ``*``."""
        with self._cond:
            self.grants.add((subject, verb, url))

    def allows(self, user: str, groups: Sequence[str], verb: str, path: str) -> bool:
        with self._cond:
            return granted(self.grants, user, groups, verb, path)

    def _user_for(self, token: str) -> JSON | None:
        with self._cond:
            return copy.deepcopy(self.users.get(token))

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> FakeKubeAPI:
        """Listen (on the same port as before after a stop, so clients reconnect to the same URL)."""
        if self._httpd is not None:
            return self
        self._halt = threading.Event()
        self._httpd = ApiHTTPServer((self.host, self.port), self)
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
        self._store.cut_watches()
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
        return [r for r in reqs if request_matches(r, method, pattern, watch)]

    def drop_watches(self) -> None:
        """Cut every open watch mid-stream (no terminating chunk), as a flaky network or LB would."""
        with self._cond:
            self._store.cut_watches()
            socks = list(self._watch_conns)
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def open_watches(self) -> int:
        with self._cond:
            return len(self._watch_conns)

    # ---- the store, for the test -----------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._store.rv

    def put(self, kind: str, obj: JSON) -> JSON:
        """Create or overwrite an object verbatim (apart from system metadata); emits ADDED/MODIFIED."""
        return self._store.put(kind, obj)

    def get(self, kind: str, namespace: str | None, name: str) -> JSON | None:
        return self._store.get(kind, namespace, name)

    def delete(self, kind: str, namespace: str | None, name: str) -> JSON | None:
        """Remove an object (emits DELETED); returns it, or None if it did not exist."""
        return self._store.delete(kind, namespace, name)

    def objects(self, kind: str) -> list[JSON]:
        return self._store.objects(kind)

    def compact(self, resource_version: int | None = None) -> int:
        """Forget history up to ``resource_version`` (default: now), as etcd compaction does.

        Watches and lists asking for an older version then get 410 Gone.
        """
        return self._store.compact(resource_version)

    def block_eviction(self, namespace: str, name: str, pdb: str = "colo-test-pdb", blocked: bool = True) -> None:
        """Make evictions of this pod fail with 429 as if a PodDisruptionBudget allowed no disruption."""
        self._store.block_eviction(namespace, name, pdb, blocked)
