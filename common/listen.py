"""Listening sockets bound before anything else starts, so an address problem is one line and exit 2
before the program samples, elects a leader or writes anything."""

from __future__ import annotations

import errno
import socket
from typing import Annotated

from pydantic import AfterValidator

from common.config import ConfigError


def split_host_port(text: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 as `[::1]:8090`, empty host = all addresses) -> (host, port); ValueError otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not HOST:PORT with a port 0-65535, e.g. 127.0.0.1:9817")
    return host.strip("[]") or "0.0.0.0", int(port)


def _valid_listen(text: str) -> str:
    split_host_port(text)
    return text


#: A `listen` setting: `HOST:PORT` validated where the config is read, so a bad address is a config error
#: naming its key (the one validator of every program's `listen`).
ListenAddress = Annotated[str, AfterValidator(_valid_listen)]


def _reason(err: OSError) -> str:
    if err.errno == errno.EADDRINUSE:
        return "address already in use (another process listens there)"
    if err.errno == errno.EACCES:
        return "permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE)"
    if err.errno == errno.EADDRNOTAVAIL:
        return "no interface of this machine has that address"
    return err.strerror or str(err)


def bind(host: str, port: int, what: str) -> socket.socket:
    """A listening TCP socket on host:port; ConfigError naming `what` (the flag or key) when that fails."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise ConfigError(f"{what}: cannot resolve host {host!r}: {err.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        sock.listen(2048)
    except OSError as err:
        sock.close()
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        raise ConfigError(f"{what}: cannot listen on {shown}: {_reason(err)}") from None
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket, tls: bool = False) -> str:
    """`http://host:port` (`https://` with `tls`) of a bound socket (the real port when 0 was asked)."""
    host, port = sock.getsockname()[:2]
    scheme = "https" if tls else "http"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"
