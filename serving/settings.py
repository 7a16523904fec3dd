"""The `serving` section both programs' configurations share: timeouts, limits, TLS and authentication."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ServingSettings(BaseModel):
    """How the HTTP server treats its clients. Defaults suit a scrape every 15 s and kube-scheduler's
    extender calls; TLS and authentication are off unless configured (the manifests turn them on)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: A client must send its request line and headers within this many seconds (slow-header clients).
    header_timeout: float = Field(default=10.0, gt=0, le=300)
    #: ... and its body within this many seconds (slow-body clients).
    body_timeout: float = Field(default=10.0, gt=0, le=300)
    #: A kept-alive connection with no request for this long is closed (longer than a scrape interval).
    idle_timeout: int = Field(default=75, ge=1, le=3600)
    #: Request line plus headers; kube-scheduler and Prometheus send well under 4 KiB.
    max_header_bytes: int = Field(default=64 << 10, ge=1024, le=16 << 20)
    #: Expensive requests (extender calls, JSON documents) in progress at once; more are answered 503.
    max_concurrent: int = Field(default=4, ge=1, le=1024)
    #: PEM certificate chain and key: HTTPS when both are set, reloaded when either file changes. Files not
    #: there at start (a Secret not created yet): a self-signed certificate until they appear.
    tls_cert_file: str | None = None
    #: The key of tls_cert_file (PEM).
    tls_key_file: str | None = None
    #: How often the certificate files are looked at for changes.
    tls_reload_seconds: float = Field(default=10.0, gt=0)
    #: Bearer tokens checked with TokenReview, then SubjectAccessReview (`get` on the request's path as a
    #: non-resource URL); /healthz and /readyz stay open for probes. Needs a cluster.
    authenticate: bool = False
    #: Paths served without a token besides /healthz and /readyz (e.g. what an unauthenticated poller reads).
    open_paths: tuple[str, ...] = ()
    #: How long a review's answer is reused (allowed / denied).
    auth_cache_seconds: float = Field(default=60.0, ge=0)
    #: ... for a denied one.
    auth_cache_denied_seconds: float = Field(default=10.0, ge=0)
    #: FastAPI's interactive docs (/docs, /redoc, /openapi.json).
    api_docs: bool = False

    @model_validator(mode="after")
    def _tls_pair(self) -> ServingSettings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together")
        return self

    @property
    def tls(self) -> bool:
        return self.tls_cert_file is not None
