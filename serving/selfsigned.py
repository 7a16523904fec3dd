"""A self-signed serving certificate, made in memory at start when the configured certificate files are not
there yet (an optional Secret volume before its Secret exists), as controller-runtime's metrics server does.

Clients cannot verify it, but the traffic is encrypted from the first request and nothing waits for a
Secret to start; the reloader (serving/tls.py) replaces it with the mounted certificate once it appears.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

#: Long enough never to expire under a running process; short enough to be plainly temporary.
VALIDITY = datetime.timedelta(days=365)


def default_names() -> tuple[str, ...]:
    """What the certificate is issued for: this host's name, localhost and the loopback addresses."""
    return (socket.gethostname(), "localhost", "127.0.0.1", "::1")


def make_pem(names: Sequence[str], now: datetime.datetime | None = None) -> tuple[bytes, bytes]:
    """(certificate, private key) in PEM: a P-256 key and a certificate it signs itself for `names`
    (DNS names, or IP addresses where they parse as one)."""
    now = now or datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0] if names else "colo")])
    sans: list[x509.GeneralName] = []
    for name in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            sans.append(x509.DNSName(name))
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # clock skew between nodes
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def load_self_signed(context: ssl.SSLContext, names: Sequence[str]) -> None:
    """Load a new self-signed pair into `context`. `load_cert_chain` reads only files: the PEMs go to
    anonymous in-memory files (memfd), read through /proc/self/fd and closed at once, so nothing touches a
    disk and a read-only root filesystem (the controller's pod) is no obstacle."""
    cert_pem, key_pem = make_pem(names)
    fds = [os.memfd_create(name, os.MFD_CLOEXEC) for name in ("colo-tls.crt", "colo-tls.key")]
    try:
        for fd, data in zip(fds, (cert_pem, key_pem), strict=True):
            os.write(fd, data)
        context.load_cert_chain(f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}")
    finally:
        for fd in fds:
            os.close(fd)
