"""Server TLS from mounted certificate files, picked up again when the files change.

A minimal, self-contained hook for the webhook only: the `hardening` branch is building TLS-from-files with
reload for both programs' servers; once it lands, the webhook should take its context from there and this
module should go. Kubernetes updates a mounted Secret by swapping a symlink, and cert-manager renews
certificates well before they expire, so a handshake that looks at the files' identity (at most once per
`check_every` seconds) is enough: no thread, no inotify. A pair that does not load (half-written, key
not matching) keeps the previous one and is logged.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

_Stamp = tuple[tuple[int, int, int, int], ...]


def _stamp(*paths: str) -> _Stamp:
    out = []
    for p in paths:
        st = os.stat(p)  # follows the Secret volume's ..data symlink
        out.append((st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)


def _context(cert_file: str, key_file: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    return ctx


class ReloadingTLS:
    """`context` is what the server listens with; each handshake gets the newest loaded certificate."""

    def __init__(
        self,
        cert_file: str,
        key_file: str,
        *,
        check_every: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """Raises OSError/ssl.SSLError when the files do not load at start (a clear start-up error)."""
        self.cert_file = cert_file
        self.key_file = key_file
        self.check_every = check_every
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._stamp = _stamp(cert_file, key_file)
        self._current = _context(cert_file, key_file)
        self._checked = monotonic()
        self.reloads = 0
        self.context = _context(cert_file, key_file)
        self.context.sni_callback = self._on_hello

    def current(self) -> ssl.SSLContext:
        """The newest context that loaded, after looking at the files if `check_every` has passed."""
        with self._lock:
            now = self._monotonic()
            if now - self._checked >= self.check_every:
                self._checked = now
                self._maybe_reload()
            return self._current

    def _maybe_reload(self) -> None:
        try:
            stamp = _stamp(self.cert_file, self.key_file)
            if stamp == self._stamp:
                return
            ctx = _context(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as err:
            log.warning("webhook certificate not reloaded, keeping the previous one: %s", err)
            return
        self._stamp = stamp
        self._current = ctx
        self.reloads += 1
        log.info("webhook certificate reloaded from %s", self.cert_file)

    def _on_hello(self, sslobj: ssl.SSLObject, server_name: str | None, ctx: ssl.SSLContext) -> None:
        # OpenSSL calls this for every ClientHello (with or without SNI): switch to the newest context.
        sslobj.context = self.current()
