"""Kubernetes-style authentication and authorization of HTTP requests, as kube-rbac-proxy and
controller-runtime's metrics filter do it: the bearer token goes to a TokenReview, the user it names to a
SubjectAccessReview for the request's path as a non-resource URL (`get /metrics`), and both answers are
cached briefly (keyed by a hash of the token, never the token itself).

Probes (/healthz, /readyz) and the paths a caller lists as open pass without a token.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger(__name__)

PROBE_PATHS = frozenset({"/healthz", "/readyz"})
#: HTTP method -> the verb a SubjectAccessReview asks about (kube-rbac-proxy's mapping).
VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
#: Distinct answers kept; past this the cache starts over (a flood of random tokens cannot grow it).
MAX_CACHED = 4096
MAX_TOKEN_BYTES = 16 << 10
#: Reviews in flight at once: a flood of new tokens must not turn into a flood of calls to the API server.
MAX_REVIEWS_IN_FLIGHT = 8


@dataclass(frozen=True, slots=True)
class User:
    """Who a TokenReview said the token belongs to."""

    name: str
    uid: str
    groups: tuple[str, ...]
    extra: tuple[tuple[str, tuple[str, ...]], ...]


class Reviews(Protocol):
    """The two review calls (kube.Kube has them)."""

    def review_token(self, token: str) -> dict[str, Any]: ...

    def review_access(self, user: User, verb: str, path: str) -> dict[str, Any]: ...


class Decision:
    ALLOWED = 200
    UNAUTHENTICATED = 401
    FORBIDDEN = 403
    UNAVAILABLE = 503


def user_of(review: dict[str, Any]) -> User | None:
    """The user of an authenticated TokenReview answer, else None."""
    status = review.get("status") or {}
    if not isinstance(status, dict) or status.get("authenticated") is not True:
        return None
    info = status.get("user") or {}
    name = info.get("username") if isinstance(info, dict) else None
    if not isinstance(name, str) or not name:
        return None
    groups = tuple(g for g in info.get("groups") or () if isinstance(g, str))
    extra_raw = info.get("extra") or {}
    extra = (
        tuple((str(k), tuple(str(v) for v in vs)) for k, vs in sorted(extra_raw.items()) if isinstance(vs, list))
        if isinstance(extra_raw, dict)
        else ()
    )
    return User(name, str(info.get("uid") or ""), groups, extra)


class Authorizer:
    """Decides one request (blocking: runs the reviews), with a cache of recent answers."""

    def __init__(
        self,
        kube: Reviews,
        *,
        ttl: float = 60.0,
        denied_ttl: float = 10.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.ttl = ttl
        self.denied_ttl = denied_ttl
        self._monotonic = monotonic
        self._cache: dict[tuple[bytes, str, str], tuple[float, int]] = {}

    def cached(self, token: str, verb: str, path: str) -> int | None:
        hit = self._cache.get(self._key(token, verb, path))
        if hit is None or hit[0] < self._monotonic():
            return None
        return hit[1]

    @staticmethod
    def _key(token: str, verb: str, path: str) -> tuple[bytes, str, str]:
        return hashlib.sha256(token.encode()).digest(), verb, path

    def decide(self, token: str, verb: str, path: str) -> int:
        """TokenReview, then SubjectAccessReview; 503 when the API cannot be asked (not cached)."""
        from kube import ApiError

        try:
            user = user_of(self.kube.review_token(token))
            if user is None:
                decision = Decision.UNAUTHENTICATED
            else:
                answer = self.kube.review_access(user, verb, path)
                allowed = (answer.get("status") or {}).get("allowed") is True
                decision = Decision.ALLOWED if allowed else Decision.FORBIDDEN
        except ApiError as err:
            log.warning("cannot review a request for %s %s: %s", verb, path[:80], err)
            return Decision.UNAVAILABLE
        if len(self._cache) >= MAX_CACHED:
            self._cache.clear()
        ttl = self.ttl if decision == Decision.ALLOWED else self.denied_ttl
        self._cache[self._key(token, verb, path)] = (self._monotonic() + ttl, decision)
        return decision


_MESSAGES = {
    Decision.UNAUTHENTICATED: "Unauthorized: a valid bearer token is required",
    Decision.FORBIDDEN: "Forbidden",
    Decision.UNAVAILABLE: "cannot authenticate now: the Kubernetes API is unreachable or busy",
}


class AuthMiddleware:
    """ASGI middleware: requests outside `open_paths` need a token the Authorizer allows."""

    def __init__(self, app: ASGIApp, authorizer: Authorizer, open_paths: Collection[str] = PROBE_PATHS) -> None:
        self.app = app
        self.authorizer = authorizer
        self.open_paths = frozenset(open_paths) | PROBE_PATHS
        self._reviewing = 0  # only touched on the event loop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        token = _bearer(scope)
        verb = VERBS.get(scope["method"], scope["method"].lower())
        path: str = scope["path"]
        if token is None:
            decision = Decision.UNAUTHENTICATED
        else:
            cached = self.authorizer.cached(token, verb, path)
            decision = cached if cached is not None else await self._review(token, verb, path)
        if decision == Decision.ALLOWED:
            await self.app(scope, receive, send)
            return
        body = json.dumps({"error": _MESSAGES[decision]}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if decision == Decision.UNAUTHENTICATED:
            headers.append((b"www-authenticate", b'Bearer realm="colo"'))
        await send({"type": "http.response.start", "status": decision, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _review(self, token: str, verb: str, path: str) -> int:
        if self._reviewing >= MAX_REVIEWS_IN_FLIGHT:
            return Decision.UNAVAILABLE
        self._reviewing += 1
        try:
            return await asyncio.to_thread(self.authorizer.decide, token, verb, path)
        finally:
            self._reviewing -= 1


def _bearer(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.partition(b" ")
            if scheme.lower() != b"bearer" or not token.strip() or len(token) > MAX_TOKEN_BYTES:
                return None
            try:
                text: str = token.strip().decode("ascii")
            except UnicodeDecodeError:
                return None
            return text
    return None
