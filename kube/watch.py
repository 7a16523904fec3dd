"""`WatchStream`: one watch HTTP stream, read as (type, object) events and closable from any thread."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any, cast

import urllib3

from kube.errors import ApiError


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
        except (urllib3.exceptions.HTTPError, OSError, ValueError, AttributeError) as e:
            # (AttributeError: http.client's response loses its socket, `fp` None, when closed mid-read)
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
