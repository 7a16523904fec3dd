"""`ApiError`: the one exception every Kubernetes call raises, built from the answer or its absence."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


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
