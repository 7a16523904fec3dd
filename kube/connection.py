"""The connection under `Kube`: configuration, transport retries, and one request sent and answered.

Every request goes through the official ``kubernetes`` client's ``ApiClient`` (auth, TLS, kubeconfig and
in-cluster token refresh all come from it); failures of any kind come out as ``ApiError``.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Self

import urllib3
from kubernetes.client.api_client import ApiClient
from kubernetes.client.configuration import Configuration
from kubernetes.client.exceptions import ApiException

from kube.errors import ApiError

#: Transport retries for ``Kube.connect``: urllib3 may retry connection failures and idempotent requests
#: whose connection broke, but never an HTTP status. By default urllib3 would sleep through 429/503
#: Retry-After itself, hiding the answer from the informer's backoff and blocking callers for as long as
#: the server asks. Set it on your own Configuration if you build the ApiClient yourself.
TRANSPORT_RETRIES = urllib3.Retry(
    total=3,
    connect=3,
    read=1,
    redirect=0,
    status=0,
    other=0,
    status_forcelist=(),
    respect_retry_after_header=False,
    raise_on_status=False,
    backoff_factor=0.05,
)


#: The methods whose requests take a ``fieldManager`` (create, update, patch).
WRITES = frozenset({"POST", "PUT", "PATCH"})


class _NoRetryWarnings(logging.Filter):
    """urllib3 warns of each transport retry ("Retrying (Retry(total=2, ...))"): three lines per failed call
    during an outage. The call's own failure, if any, is reported once per change by the caller."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Retrying (")


logging.getLogger("urllib3.connectionpool").addFilter(_NoRetryWarnings())


def _max_sends(retries: object) -> int:
    """How many times urllib3 may send one request that is not idempotent (PATCH, POST).

    Only connection failures are retried for those (the request never left), so the bound is one send plus
    the connect retries; urllib3's default (``retries`` None) is Retry(3).
    """
    if retries is None:
        return 4
    if isinstance(retries, bool) or not isinstance(retries, int | urllib3.Retry):
        return 1
    if isinstance(retries, int):
        return 1 + max(0, retries)
    if retries.total is False:
        return 1
    limits = [n for n in (retries.total, retries.connect) if isinstance(n, int) and not isinstance(n, bool)]
    return 1 + max(0, min(limits)) if limits else 4


class Connection:
    """One API server, reached through an ``ApiClient``: sends a request and hands back its answer.

    Thread-safe: the underlying urllib3 pool is shared, nothing else is mutable.
    """

    def __init__(
        self, api_client: ApiClient, *, request_timeout: float = 10.0, field_manager: str | None = None
    ) -> None:
        """`field_manager`: the name every write is made under (the ``fieldManager`` parameter, so the object's
        managedFields say which program wrote what) and the User-Agent's product (what audit logs show);
        None leaves the client's defaults (``OpenAPI-Generator``)."""
        if not hasattr(api_client, "param_serialize"):
            raise RuntimeError("kube/ needs kubernetes>=37 (ApiClient.param_serialize is missing)")
        self.api_client = api_client
        self.request_timeout = request_timeout
        self.field_manager = field_manager
        if field_manager:
            from common.buildinfo import version

            api_client.user_agent = f"{field_manager}/{version()}"

    @classmethod
    def connect(
        cls, kubeconfig: str | None = None, *, request_timeout: float = 10.0, field_manager: str | None = None
    ) -> Self | None:
        """Kubeconfig if given, else the pod's service account when in a cluster, else None (standalone)."""
        configuration = Configuration()
        if kubeconfig:
            # the kubeconfig loader, without the oidc refresh's oauthlib and requests until a kubeconfig needs them
            from kube.lean import kube_config

            kube_config().load_kube_config(
                config_file=kubeconfig, client_configuration=configuration, persist_config=False
            )
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            from kubernetes.config.incluster_config import load_incluster_config

            load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            return None
        configuration.retries = TRANSPORT_RETRIES
        # TCP keepalive as client-go does: a dead peer under a quiet watch is noticed in minutes,
        # not at the end of the watch's read timeout.
        configuration.keep_alive = True
        return cls(ApiClient(configuration), request_timeout=request_timeout, field_manager=field_manager)

    def close(self) -> None:
        """Drop pooled connections."""
        self.api_client.close()  # type: ignore[no-untyped-call]

    # ---- transport -------------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] | None = None,
    ) -> urllib3.BaseHTTPResponse:
        """Send one request; return the still-unread response on 2xx, raise ApiError otherwise."""
        headers: dict[str, str] = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        if self.field_manager and method in WRITES:
            query = [*(query or []), ("fieldManager", self.field_manager)]
        api = self.api_client
        try:
            serialized = api.param_serialize(
                method=method,
                resource_path=path,
                query_params=list(query or []),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            rest_response = api.call_api(
                *serialized, _request_timeout=timeout if timeout is not None else self.request_timeout
            )
        except ApiException as e:
            raise ApiError(int(e.status or 0), str(e.reason or "ApiException"), str(e.body or "")) from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise ApiError(0, type(e).__name__, str(e)) from e
        response: urllib3.BaseHTTPResponse = rest_response.response
        if 200 <= response.status < 300:
            return response
        try:
            data = response.data
        except (urllib3.exceptions.HTTPError, OSError):
            data = b""
        finally:
            response.release_conn()
        raise ApiError.from_response(response.status, response.reason or "", response.headers, data)

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """A non-streaming call whose answer is one JSON object.

        ``timeout`` (seconds) bounds the whole call: it is shared out among the sends urllib3 may make
        (connection retries; only their short backoff comes on top), and each send's share also goes to
        the server as the ``timeout`` query parameter, so the API server abandons a request it could not
        finish in time (504) instead of applying it after we stopped waiting.
        """
        attempt_timeout: float | None = None
        if timeout is not None:
            sends = _max_sends(getattr(getattr(self.api_client, "configuration", None), "retries", None))
            attempt_timeout = timeout / sends
            query = [*(query or []), ("timeout", f"{max(1, int(attempt_timeout * 1000))}ms")]
        response = self._send(method, path, query=query, body=body, content_type=content_type, timeout=attempt_timeout)
        try:
            data = response.data
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise ApiError(0, type(e).__name__, f"reading response: {e}") from e
        finally:
            response.release_conn()
        try:
            parsed = json.loads(data) if data else {}
        except ValueError as e:
            raise ApiError(0, "MalformedResponse", data[:200].decode("utf-8", "replace")) from e
        if not isinstance(parsed, dict):
            raise ApiError(0, "MalformedResponse", "expected a JSON object")
        return parsed
