"""uvicorn's httptools protocol with what it lacks against slow or greedy clients: a deadline for the
request line and headers (from the connection's start, or from the first byte of a kept-alive one) and
a cap on their size. Idle kept-alive connections are closed by uvicorn's own `timeout_keep_alive`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """Set `header_timeout` and `max_header_bytes` on a subclass (see `bounded_protocol`)."""

    header_timeout: float = 10.0
    max_header_bytes: int = 64 << 10

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._header_bytes: int | None = 0  # None: between requests' headers (body or response phase)
        self._tail = b""  # the last bytes of the headers so far, to find their end across reads

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._header_bytes is None and (self.cycle is None or self.cycle.response_complete):
            self._header_bytes = 0  # the first bytes of the next request on a kept-alive connection
            self._tail = b""
            self._arm()
        if self._header_bytes is not None:
            # Count up to the blank line that ends the headers (a read may carry the body's start too).
            seen = self._tail + data
            end = seen.find(b"\r\n\r\n")
            self._header_bytes += len(data) if end < 0 else end + 4 - len(self._tail)
            self._tail = seen[-3:]
            if self._header_bytes > self.max_header_bytes:
                self._disarm()
                self._refuse(431, b"request headers too large")
                return
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._disarm()
        self._header_bytes = None
        super().on_headers_complete()

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self._header_bytes:
            self._refuse(408, b"request headers not received in time")
        elif not self.transport.is_closing():
            self.transport.close()  # nothing sent at all: just hang up

    def _refuse(self, status: int, reason: bytes) -> None:
        if self.transport.is_closing():
            return
        head = b"HTTP/1.1 %d %s\r\ncontent-type: text/plain\r\nconnection: close\r\ncontent-length: %d\r\n\r\n"
        self.transport.write(head % (status, reason, len(reason) + 1) + reason + b"\n")
        self.transport.close()


def bounded_protocol(header_timeout: float, max_header_bytes: int) -> type[BoundedHttpToolsProtocol]:
    """A protocol class with these bounds, for `uvicorn.Config(http=...)`."""
    return type(
        "BoundedHttp",
        (BoundedHttpToolsProtocol,),
        {"header_timeout": header_timeout, "max_header_bytes": max_header_bytes},
    )
