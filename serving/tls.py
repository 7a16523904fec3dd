"""HTTPS from certificate files that change under us (a mounted Secret, cert-manager renewals).

The server is given one SSLContext (`context`); each reload loads the files into a fresh context and, only
once both loaded, makes it the one new handshakes use: `context`'s SNI callback, which OpenSSL calls for every
ClientHello (with or without a server name), moves the connection onto the latest loaded context. Loading the
files into the served context itself would, between the certificate and its key, hand a handshake a
certificate with the previous key (the client sees the connection closed), and a key that then fails to
load would leave that mismatch in place. Open connections keep the context they started with. A reload that
fails (a half-written file) keeps the previous certificate and is retried at the next check. When the files
are not there at start (an optional Secret volume whose Secret does not exist yet), a self-signed certificate
made in memory is served until they appear (serving/selfsigned.py).
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from collections.abc import Sequence

log = logging.getLogger(__name__)


def _stamp(path: str) -> tuple[int, int, int]:
    st = os.stat(path)  # follows the ..data symlink swap of a mounted Secret
    return st.st_mtime_ns, st.st_size, st.st_ino


def _server_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class CertReloader:
    """An SSLContext for a server, kept in step with `cert_file` and `key_file`."""

    def __init__(
        self,
        cert_file: str,
        key_file: str,
        interval: float = 10.0,
        *,
        self_signed_when_missing: bool = False,
        self_signed_names: Sequence[str] | None = None,
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.interval = interval
        self.context = _server_context()  # the one the server holds
        self._current = self.context  # the latest loaded: every handshake is moved onto it
        self.context.sni_callback = self._serve_current
        self._stamps: tuple[tuple[int, int, int], ...] | None = None
        self.reloads = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Serving a self-signed certificate because the files were missing at start.
        self.self_signed = False
        missing = [path for path in (cert_file, key_file) if not os.path.exists(path)]
        if missing and self_signed_when_missing:
            from serving.selfsigned import default_names, load_self_signed  # cryptography: only when needed

            names = tuple(self_signed_names) if self_signed_names is not None else default_names()
            load_self_signed(self.context, names)
            self.self_signed = True
            log.warning(
                "TLS: %s not there (Secret not created yet?): serving a self-signed certificate for %s "
                "until it appears (clients cannot verify it)",
                missing[0],
                ", ".join(names),
            )
        else:
            try:
                self.reload()  # at start-up a missing or bad file is an error the caller reports
            except ssl.SSLError as err:
                raise ValueError(f"cannot load {cert_file} with {key_file}: {err.reason or err}") from None

    def reload(self) -> bool:
        """Load the files if they changed since the last load; True when loaded."""
        stamps = (_stamp(self.cert_file), _stamp(self.key_file))
        if stamps == self._stamps:
            return False
        if self._stamps is None and not self.self_signed:
            self.context.load_cert_chain(self.cert_file, self.key_file)  # start-up: before any handshake
        else:
            loaded = _server_context()
            loaded.load_cert_chain(self.cert_file, self.key_file)
            self._current = loaded  # one reference swapped: a handshake sees the old pair or the new one
        self._stamps = stamps
        self.reloads += 1
        return True

    def _serve_current(self, conn: ssl.SSLObject | ssl.SSLSocket, _name: str | None, ctx: ssl.SSLContext) -> None:
        current = self._current
        if current is not ctx:
            conn.context = current

    def check(self) -> None:
        """One watcher step: reload if changed; a failure is logged and the old certificate kept."""
        if self.self_signed and not (os.path.exists(self.cert_file) and os.path.exists(self.key_file)):
            return  # still waiting for the Secret: nothing to log every interval
        try:
            loaded = self.reload()
            if loaded and self.self_signed:
                self.self_signed = False
                log.info("TLS certificate loaded from %s: it replaces the self-signed one", self.cert_file)
            elif loaded and self.reloads > 1:
                log.info("TLS certificate reloaded from %s", self.cert_file)
        except (OSError, ssl.SSLError, ValueError) as err:
            log.warning("TLS certificate %s not reloaded (keeping the previous one): %s", self.cert_file, err)

    def start(self) -> None:
        def watch() -> None:
            while not self._stop.wait(self.interval):
                self.check()

        self._thread = threading.Thread(target=watch, name="colo-tls-reload", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
