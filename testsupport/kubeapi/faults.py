"""Fault injection and the request log: what a test makes the server do wrong, and what it saw.

A `Fault` matches requests by method, path and watch-ness and is consumed by the first ``times`` of them;
`answer_fault` then plays it out before the request reaches authentication or routing: hold the request
(``delay``), cut the connection (``drop``), or answer a real-shaped Status (a 410 on a watch as an ERROR
event, as the real server sends it). Every request is recorded as a `RecordedRequest`, faulted or not.

Deliberate simplifications (documented so nobody relies on them):

* the ``timeout`` query parameter is honoured only where a fault delays a request: a request delayed
  past it gets 504 and is not applied, like the real server's request deadline;
* Retry-After is sent as given, so tests may use fractions of a second (real servers send integers).
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from testsupport.kubeapi.failures import ApiFailure
from testsupport.kubeapi.resource_types import JSON

_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_GO_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


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


def request_matches(
    r: RecordedRequest, method: str | None, pattern: re.Pattern[str] | None, watch: bool | None
) -> bool:
    """Whether a recorded request passes `FakeKubeAPI.requests_for`'s filter (matched like faults are)."""
    return (
        (method is None or r.method == method.upper())
        and (pattern is None or pattern.search(r.path) is not None)
        and (watch is None or r.is_watch == watch)
    )


def _parse_timeout(value: str | None) -> float | None:
    """The ``timeout`` query parameter (a Go duration such as ``1500ms``); 400 when unreadable."""
    if not value:
        return None
    m = _GO_DURATION.fullmatch(value)
    if m is None:
        raise ApiFailure(400, message=f"invalid timeout specified in the request URL: {value}")
    return float(m[1]) * _GO_UNITS[m[2]]


class Responder(Protocol):
    """The part of the request handler a fault answers through."""

    close_connection: bool

    def send_failure(self, failure: ApiFailure) -> None: ...

    def start_stream(self) -> None: ...

    def write_event(self, event: JSON) -> None: ...

    def end_stream(self) -> None: ...


def answer_fault(fault: Fault, reply: Responder, *, is_watch: bool, timeout: str | None, halt: threading.Event) -> bool:
    """Play a matched fault out; True when it answered (or cut) the request, False when it goes on normally."""
    deadline = None if is_watch else _parse_timeout(timeout)
    if deadline is not None and fault.delay >= deadline:
        # The request deadline passes while the request is held up: 504, and nothing is applied.
        if halt.wait(deadline):
            reply.close_connection = True
            return True
        with contextlib.suppress(OSError):
            reply.send_failure(ApiFailure(504, "Timeout"))
        return True
    if fault.delay and fault.hold(halt):
        reply.close_connection = True
        return True
    if fault.drop:
        reply.close_connection = True
        return True
    if fault.status is None:
        return False
    headers: dict[str, str] = {}
    details: JSON | None = None
    if fault.retry_after is not None:
        ra = fault.retry_after
        headers["Retry-After"] = str(int(ra)) if float(ra).is_integer() else str(ra)
        details = {"retryAfterSeconds": max(1, round(ra))}
    failure = ApiFailure(fault.status, message=fault.message, details=details, headers=headers)
    if is_watch and fault.status == 410:
        reply.start_stream()
        reply.write_event({"type": "ERROR", "object": failure.status})
        reply.end_stream()
    else:
        reply.send_failure(failure)
    return True
