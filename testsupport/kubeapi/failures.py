"""Errors shaped like the API server's: Status objects with its reasons, messages and field order.

Every module of the fake raises `ApiFailure`; the request handler turns it into the Status response, so a
client's error handling meets exactly what a real server would send (``reason``, ``details``, ``code``).
"""

from __future__ import annotations

from collections.abc import Mapping

from testsupport.kubeapi.resource_types import JSON, ResourceType

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


def not_found(rt: ResourceType, name: str) -> ApiFailure:
    return ApiFailure(404, "NotFound", f'{rt.qualified} "{name}" not found', rt.details(name))


def conflict(rt: ResourceType, name: str) -> ApiFailure:
    """The 409 of a write whose resourceVersion precondition no longer holds."""
    return ApiFailure(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rt.qualified} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        rt.details(name),
    )
