"""Both programs serve HTTPS before their Secret exists: a self-signed certificate made at start (logged once),
replaced by the mounted Secret's certificate when it appears. Real processes, real TLS handshakes on loopback,
a Secret directory laid out as kubelet writes it (files behind a `..data` symlink that is swapped)."""

from __future__ import annotations

import datetime
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from controller.httpget import AgentCA
from serving.selfsigned import make_pem
from serving.tls import CertReloader
from testsupport.certs import have_openssl, make_cert
from testsupport.waiting import wait_for

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.skipif(not have_openssl(), reason="openssl (to make the Secret's certificate) missing")


def peer_cert(port: int, cafile: Path | None = None) -> x509.Certificate:
    """The certificate the server on 127.0.0.1:`port` presents (verified against `cafile` when given)."""
    if cafile is None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = ssl.create_default_context(cafile=str(cafile))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def mount_secret(directory: Path, cert: Path, key: Path) -> None:
    """What kubelet does when a Secret appears in an optional volume: a timestamped directory, `..data`
    pointing at it, and `tls.crt`/`tls.key` links through `..data`."""
    stamped = directory / "..2026_11_25_21_00_00.000000001"
    stamped.mkdir()
    (stamped / "tls.crt").write_bytes(cert.read_bytes())
    (stamped / "tls.key").write_bytes(key.read_bytes())
    (directory / "..data_tmp").symlink_to(stamped.name)
    os.rename(directory / "..data_tmp", directory / "..data")
    for name in ("tls.crt", "tls.key"):
        (directory / name).symlink_to(f"..data/{name}")


def serving_yaml(secret: Path) -> str:
    return f"serving:\n  tls_cert_file: {secret}/tls.crt\n  tls_key_file: {secret}/tls.key\n  tls_reload_seconds: 0.2\n"


def program(name: str, tmp_path: Path, secret: Path) -> list[str]:
    config = tmp_path / "config.yaml"
    config.write_text(serving_yaml(secret), encoding="utf-8")
    if name == "colo-agent":
        return [str(BIN / name), "--standalone", "--config", str(config), "--listen", "127.0.0.1:0", "--state-file", ""]
    # standalone controller: an agent that does not answer is fine, only its serving is looked at
    return [str(BIN / name), "--config", str(config), "--listen", "127.0.0.1:0", "--agent", "n=http://127.0.0.1:9"]


@pytest.fixture
def secret_dir(tmp_path: Path) -> Path:
    secret = tmp_path / "secret"  # the optional volume's mount point: there, and empty
    secret.mkdir()
    return secret


def _port(proc: subprocess.Popen[str], log: list[str]) -> int:
    assert proc.stderr is not None and proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = (proc.stdout if "agent" in proc.args[0] else proc.stderr).readline()
        if not line:
            break
        log.append(line)
        m = re.search(r"https://127\.0\.0\.1:(\d+)", line)
        if m:
            return int(m[1])
    proc.kill()
    raise AssertionError(f"{proc.args[0]} did not start: {''.join(log)} {proc.communicate()}")


@pytest.fixture(params=["colo-agent", "colo-controller"])
def served(
    request: pytest.FixtureRequest, tmp_path: Path, secret_dir: Path
) -> Iterator[tuple[int, subprocess.Popen[str], list[str]]]:
    env = {**os.environ, "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state")}
    proc = subprocess.Popen(
        program(request.param, tmp_path, secret_dir), env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    log: list[str] = []  # what the start-up printed, before the address
    try:
        yield _port(proc, log), proc, log
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_serves_self_signed_until_the_secret_appears_then_the_secrets_certificate(
    served: tuple[int, subprocess.Popen[str], list[str]], tmp_path: Path, secret_dir: Path
) -> None:
    port, proc, started = served
    first = peer_cert(port)
    assert first.issuer == first.subject, "self-signed"
    sans = first.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in sans.get_values_for_type(x509.DNSName)

    cert, key = make_cert(tmp_path / "issued", "colo", san="IP:127.0.0.1")
    mount_secret(secret_dir, cert, key)
    wanted = x509.load_pem_x509_certificate(cert.read_bytes())
    wait_for(lambda: peer_cert(port) == wanted, timeout=30, what="the Secret's certificate served")
    assert peer_cert(port, cafile=cert) == wanted  # and a client holding the CA now verifies it

    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    err = "".join(started) + out + err  # the agent prints its address on stdout, the controller on stderr
    assert err.count("serving a self-signed certificate") == 1, err
    assert err.count("replaces the self-signed one") == 1, err
    assert "Traceback" not in err


def test_a_secret_already_there_is_served_from_the_start(tmp_path: Path, secret_dir: Path) -> None:
    cert, key = make_cert(tmp_path / "issued", "colo", san="IP:127.0.0.1")
    mount_secret(secret_dir, cert, key)
    reloader = CertReloader(str(secret_dir / "tls.crt"), str(secret_dir / "tls.key"), self_signed_when_missing=True)
    assert not reloader.self_signed and reloader.reloads == 1


def test_without_the_fallback_a_missing_file_is_still_an_error(secret_dir: Path) -> None:
    with pytest.raises(FileNotFoundError):
        CertReloader(str(secret_dir / "tls.crt"), str(secret_dir / "tls.key"))


def test_the_self_signed_certificate_names_what_it_is_for() -> None:
    now = datetime.datetime(2026, 11, 25, tzinfo=datetime.UTC)
    cert = x509.load_pem_x509_certificate(make_pem(["node-a", "10.0.0.7"], now)[0])
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["node-a"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["10.0.0.7"]
    assert cert.not_valid_before_utc < now < cert.not_valid_after_utc
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_the_agents_ca_is_used_once_it_appears(tmp_path: Path) -> None:
    cafile = tmp_path / "agent-ca" / "ca.crt"
    now = [0.0]
    ca = AgentCA(str(cafile), interval=10.0, clock=lambda: now[0])
    assert not ca.verified and ca.context.verify_mode == ssl.CERT_NONE
    assert not ca.refresh()
    cert, _ = make_cert(tmp_path / "issued", "colo-agent")
    cafile.parent.mkdir()
    cafile.write_bytes(cert.read_bytes())
    now[0] = 5.0
    assert not ca.refresh(), "looked for at most every interval"
    now[0] = 10.0
    assert ca.refresh() and ca.verified and ca.context.verify_mode == ssl.CERT_REQUIRED
    assert not ca.refresh()
