"""A certificate reload never fails a handshake: while the files are swapped and reloaded again and again, every
handshake on loopback completes, with the old pair or the new one (the served context never holds a new
certificate with the old key), and a pair that fails to load leaves the previous one served."""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from serving.tls import CertReloader
from testsupport.certs import have_openssl, make_cert

pytestmark = pytest.mark.skipif(not have_openssl(), reason="openssl (to make the certificates) missing")


def _serve(listener: socket.socket, context: ssl.SSLContext, stop: threading.Event) -> None:
    """Accept and complete handshakes until `stop`; a failed one only ends its connection."""
    listener.settimeout(0.2)
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(5.0)  # a connection the client dropped mid-way never holds the loop
        try:
            with context.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)  # until the client closes
        except (OSError, ssl.SSLError):
            conn.close()


def _handshake(port: int) -> bytes:
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=30) as raw,
        client.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def _install(live: Path, cert: Path, key: Path) -> None:
    shutil.copyfile(cert, live / "tls.crt.tmp")
    shutil.copyfile(key, live / "tls.key.tmp")
    (live / "tls.crt.tmp").rename(live / "tls.crt")
    (live / "tls.key.tmp").rename(live / "tls.key")


@contextlib.contextmanager
def _served(live: Path, cert: Path, key: Path) -> Iterator[tuple[CertReloader, int, threading.Event]]:
    """`cert`/`key` installed in `live` and served over loopback from a CertReloader of those files: (the
    reloader, the port, the event that stops the server); the server is stopped on the way out."""
    live.mkdir()
    _install(live, cert, key)
    reloader = CertReloader(str(live / "tls.crt"), str(live / "tls.key"))
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    server = threading.Thread(target=_serve, args=(listener, reloader.context, stop), daemon=True)
    server.start()
    try:
        yield reloader, listener.getsockname()[1], stop
    finally:
        stop.set()
        server.join(10)
        listener.close()


def test_handshakes_never_fail_while_the_certificate_is_reloaded(tmp_path: Path) -> None:
    pairs = [make_cert(tmp_path / "made", name) for name in ("first", "second")]
    live = tmp_path / "live"
    seen: set[bytes] = set()
    failures: list[BaseException] = []
    with _served(live, *pairs[0]) as (reloader, port, stop):

        def clients() -> None:
            while not stop.is_set():
                try:
                    seen.add(_handshake(port))
                except (OSError, ssl.SSLError) as exc:
                    failures.append(exc)

        client = threading.Thread(target=clients, daemon=True)
        client.start()
        try:
            for i in range(200):
                _install(live, *pairs[(i + 1) % 2])
                assert reloader.reload()
                time.sleep(0.001)  # the handshakes' threads get the interpreter between reloads
        finally:
            stop.set()
            client.join(10)
    assert not failures, failures[:3]
    names = {x509.load_der_x509_certificate(der).subject.rfc4514_string() for der in seen}
    assert names == {"CN=first", "CN=second"}


def test_a_pair_that_fails_to_load_leaves_the_previous_one_served(tmp_path: Path) -> None:
    first, second = make_cert(tmp_path / "made", "first"), make_cert(tmp_path / "made", "second")
    live = tmp_path / "live"
    with _served(live, *first) as (reloader, port, _):
        shutil.copyfile(second[0], live / "tls.crt")  # the new certificate, the old key: a mismatch
        reloader.check()  # logged, not raised
        subject = x509.load_der_x509_certificate(_handshake(port)).subject.rfc4514_string()
    assert subject == "CN=first"
