"""The uvicorn server both programs run: bounded connections, optional TLS and authentication, and no
signal handling of its own.

uvicorn's own signal handlers re-raise the signal once the server has stopped, which ends the process
before the program's shutdown (releasing a Lease, saving state) ran. Programs install their own handlers
and call `stop()` instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator
from typing import Any

import uvicorn
from starlette.applications import Starlette

from serving.protocol import bounded_protocol
from serving.settings import ServingSettings
from serving.tls import CertReloader


class Server(uvicorn.Server):
    """uvicorn.Server without signal handling of its own; knows its TLS reloader and bound port."""

    def __init__(self, config: uvicorn.Config, *, tls: CertReloader | None = None) -> None:
        super().__init__(config)
        self.tls = tls

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def stop(self) -> None:
        """Ask the server to exit (thread- and signal-safe: uvicorn polls the flag)."""
        self.should_exit = True

    def close(self) -> None:
        """Stop watching the certificate files."""
        if self.tls is not None:
            self.tls.stop()

    @property
    def bound_port(self) -> int:
        """The listening port (useful with port 0); only after startup."""
        for server in self.servers:
            for sock in server.sockets:
                port: int = sock.getsockname()[1]
                return port
        raise RuntimeError("server not started")


def secure(app: Starlette, settings: ServingSettings, kube: Any, open_paths: Collection[str] = ()) -> None:
    """Put TokenReview/SubjectAccessReview in front of `app` when `settings.authenticate` (needs `kube`)."""
    if not settings.authenticate:
        return
    if kube is None:
        raise ValueError("authenticate needs a cluster (TokenReview and SubjectAccessReview)")
    from serving.auth import AuthMiddleware, Authorizer

    authorizer = Authorizer(kube, ttl=settings.auth_cache_seconds, denied_ttl=settings.auth_cache_denied_seconds)
    app.add_middleware(AuthMiddleware, authorizer=authorizer, open_paths=open_paths)


def uvicorn_config(
    app: Starlette, host: str, port: int, settings: ServingSettings, *, log_level: str = "warning"
) -> tuple[uvicorn.Config, CertReloader | None]:
    """uvicorn settings from `settings`; with TLS, the config is loaded and given a reloading SSLContext.

    Raises OSError or ssl.SSLError when the certificate files are there but cannot be loaded."""
    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, access_log=False, lifespan="off",
        log_config=None,  # uvicorn's few lines go through the program's handler (text or JSON)
        timeout_keep_alive=settings.idle_timeout,
        http=bounded_protocol(settings.header_timeout, settings.max_header_bytes),
    )  # fmt: skip
    reloader = None
    if settings.tls_cert_file is not None and settings.tls_key_file is not None:
        # Files not there yet (the manifests' Secret volumes are optional): self-signed until they appear.
        reloader = CertReloader(
            settings.tls_cert_file, settings.tls_key_file, settings.tls_reload_seconds, self_signed_when_missing=True
        )
        config.load()
        config.ssl = reloader.context
        reloader.start()
    return config, reloader


def make_server(
    app: Starlette, host: str, port: int, settings: ServingSettings, *, log_level: str = "warning"
) -> Server:
    """A started-on-demand server for `app` (call `serve()` or `run()`)."""
    config, reloader = uvicorn_config(app, host, port, settings, log_level=log_level)
    return Server(config, tls=reloader)
