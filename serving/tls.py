"""HTTPS from certificate files that change under us (a mounted Secret, cert-manager renewals).

One SSLContext serves every connection; reloading calls `load_cert_chain` on it again, which new
handshakes pick up while open connections keep theirs. A reload that fails (a half-written file) keeps
the previous certificate and is retried at the next check.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading

log = logging.getLogger(__name__)


def _stamp(path: str) -> tuple[int, int, int]:
    st = os.stat(path)  # follows the ..data symlink swap of a mounted Secret
    return st.st_mtime_ns, st.st_size, st.st_ino


class CertReloader:
    """An SSLContext for a server, kept in step with `cert_file` and `key_file`."""

    def __init__(self, cert_file: str, key_file: str, interval: float = 10.0) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.interval = interval
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._stamps: tuple[tuple[int, int, int], ...] | None = None
        self.reloads = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reload()  # at start-up a missing or bad file is an error the caller reports

    def reload(self) -> bool:
        """Load the files if they changed since the last load; True when loaded."""
        stamps = (_stamp(self.cert_file), _stamp(self.key_file))
        if stamps == self._stamps:
            return False
        self.context.load_cert_chain(self.cert_file, self.key_file)
        self._stamps = stamps
        self.reloads += 1
        return True

    def check(self) -> None:
        """One watcher step: reload if changed; a failure is logged and the old certificate kept."""
        try:
            if self.reload() and self.reloads > 1:
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
