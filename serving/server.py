"""The uvicorn server both programs run: bounded connections, optional TLS and authentication, and no
signal handling of its own.

uvicorn's own signal handlers re-raise the signal once the server has stopped, which ends the process
before the program's shutdown (releasing a Lease, saving state) ran. Programs install their own handlers
and call `stop()` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Iterator
from typing import Any

import uvicorn
from starlette.applications import Starlette

from serving.protocol import bounded_protocol
from serving.settings import ServingSettings
from serving.tls import CertReloader

#: Seconds between two wake-ups of an idle server: the Date header's resolution. uvicorn's own loop wakes every
#: 0.1 s to poll `should_exit`, which costs an idle agent about 0.2% of a core (measured: 0.23% against 0.03%
#: with one wake-up a second); here setting `should_exit` wakes the loop instead.
TICK_SECONDS = 1.0


class Server(uvicorn.Server):
    """uvicorn.Server without signal handling of its own, whose idle loop wakes once a second (and at once when
    `should_exit` is set, from any thread or a signal handler); knows its TLS reloader and bound port."""

    def __init__(self, config: uvicorn.Config, *, tls: CertReloader | None = None) -> None:
        self._exit = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        super().__init__(config)
        self.tls = tls

    @property
    def should_exit(self) -> bool:
        return self._exit

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._exit = value
        loop, wake = self._loop, self._wake
        if value and loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nothing to wake
                loop.call_soon_threadsafe(wake.set)

    async def main_loop(self) -> None:
        """uvicorn's `main_loop`, ticking every TICK_SECONDS instead of every 0.1 s."""
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 10) % 864000  # on_tick refreshes the Date header when counter % 10 == 0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), TICK_SECONDS)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def stop(self) -> None:
        """Ask the server to exit (thread- and signal-safe: the loop is woken)."""
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
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        lifespan="off",
        log_config=None,  # uvicorn's few lines go through the program's handler (text or JSON)
        timeout_keep_alive=settings.idle_timeout,
        http=bounded_protocol(settings.header_timeout, settings.max_header_bytes),
    )
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
