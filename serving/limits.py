"""Bounds on what one request may cost: body size (enforced while reading), body time, and how many
expensive requests run at once (a bounded worker does the parsing and scoring, off the event loop).

Memory a request can pin is then at most `max_concurrent` bodies of `max_body_bytes` plus what the one
worker builds from one of them; everything else is answered 413, 408 or 503 before it is read.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import TypeVar

from starlette.requests import ClientDisconnect, Request

T = TypeVar("T")


class Rejected(Exception):
    """A request refused before its work: HTTP `status` and a one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class ClientGone(Exception):
    """The client went away before its body was complete: nobody is left to answer."""


def clip(text: str, limit: int = 80) -> str:
    """An untrusted string cut to `limit` characters for logs and error messages."""
    return text if len(text) <= limit else f"{text[:limit]}…({len(text)} characters)"


async def read_body(request: Request, max_bytes: int, timeout: float) -> bytes:
    """The body, refused with 413 as soon as it passes `max_bytes` (announced or while a chunked body
    arrives) and with 408 when it has not arrived within `timeout` seconds."""
    length = request.headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise Rejected(400, "Content-Length is not a number")
        if int(length) > max_bytes:
            raise Rejected(413, f"body of {int(length)} bytes is larger than the limit of {max_bytes} bytes")
    chunks: list[bytes] = []
    size = 0

    async def collect() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise Rejected(413, f"body larger than the limit of {max_bytes} bytes")
            chunks.append(chunk)

    try:
        await asyncio.wait_for(collect(), timeout)
    except TimeoutError:
        raise Rejected(408, f"body not received within {timeout:g}s") from None
    except ClientDisconnect:
        raise ClientGone() from None
    return b"".join(chunks)


class Gate:
    """At most `max_concurrent` expensive requests admitted (503 past that), their CPU-bound work done by
    `workers` threads so the event loop keeps answering probes."""

    def __init__(self, max_concurrent: int, workers: int = 1) -> None:
        self.max_concurrent = max_concurrent
        self._admitted = 0  # only touched on the event loop
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="colo-request")

    @property
    def admitted(self) -> int:
        return self._admitted

    def enter(self) -> None:
        """Admit one request or refuse it with 503 (call on the event loop, pair with `leave`)."""
        if self._admitted >= self.max_concurrent:
            raise Rejected(503, f"busy: {self.max_concurrent} requests in progress, retry later")
        self._admitted += 1

    def leave(self) -> None:
        self._admitted -= 1

    async def run(self, fn: Callable[[], T]) -> T:
        """`fn()` on the worker."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
