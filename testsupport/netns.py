"""Network namespaces the tests make themselves: "pod" namespaces joined by veth pairs to one "sink" namespace,
with TEST-NET-1 addresses (192.0.2.0/24, RFC 5737) that exist only inside them: nothing touches the host's
interfaces or routes. A sink counts what each connection brought and in what time; a sender sends a bounded
number of bytes. Everything is removed afterwards (namespaces deleted even on failure)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

#: reads every connection to the end; prints one JSON line per connection: bytes, first to last byte seconds
SINK = """
import json, socket, sys, threading, time
def serve(conn):
    n, first, last = 0, None, None
    while True:
        b = conn.recv(1 << 16)
        if not b:
            break
        now = time.monotonic()
        first = first or now
        last, n = now, n + len(b)
    print(json.dumps({"peer": conn.getpeername()[0], "bytes": n, "seconds": (last or 0) - (first or 0)}), flush=True)
    conn.close()
socks = []
for addr in sys.argv[1:]:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((addr, 5001)); s.listen()
    socks.append(s)
print("ready", flush=True)
def accept(s):
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()
for s in socks:
    threading.Thread(target=accept, args=(s,), daemon=True).start()
sys.stdin.read()
"""
#: sends argv[2] bytes to argv[1]:5001 and exits
SENDER = """
import socket, sys
s = socket.create_connection((sys.argv[1], 5001), timeout=60)
left, chunk = int(sys.argv[2]), b"x" * 65536
while left > 0:
    s.sendall(chunk[:left]); left -= min(left, len(chunk))
s.shutdown(socket.SHUT_WR); s.recv(1); s.close()
"""
#: stays in its namespace (the pod's "pause" process) until stdin closes
PAUSE = "import sys\nsys.stdin.read()\n"


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def kernel_facts() -> str | None:
    """None when this machine can make namespaces and veth pairs and has tbf and htb inside one; else why not
    (the tests then skip: Unsupported here)."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        return "Unsupported: needs root, ip and tc"
    name = "colonetprobe" + uuid.uuid4().hex[:8]
    try:
        ip("netns", "add", name)
        ip("-n", name, "link", "add", "p0", "type", "veth", "peer", "name", "p1")
        for kind in (["tbf", "rate", "1mbit", "burst", "32kb", "latency", "50ms"], ["htb", "default", "1"]):
            subprocess.run(["ip", "netns", "exec", name, "tc", "qdisc", "replace", "dev", "p0", "root", *kind],
                           check=True, capture_output=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as e:
        return f"Unsupported: veth with tbf and htb in a network namespace ({e})"
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


@dataclass
class Pod:
    ns: str
    addr: str  # its own address
    peer: str  # the sink's address on its link
    link: str  # its interface's name


@dataclass
class Namespaces:
    """Owns its namespaces and the sink process; `close()` removes them."""

    tag: str = field(default_factory=lambda: "colonet" + uuid.uuid4().hex[:8])
    names: list[str] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    sink: subprocess.Popen[bytes] | None = None

    @property
    def sink_ns(self) -> str:
        return f"{self.tag}s"

    def add(self, ns: str) -> str:
        ip("netns", "add", ns)
        self.names.append(ns)
        ip("-n", ns, "link", "set", "lo", "up")
        return ns

    def pod(self) -> Pod:
        """A pod namespace with an interface `eth0` linked to the sink, a /30 of TEST-NET-1 each."""
        if not self.names:
            self.add(self.sink_ns)
        n = len(self.pods)
        ns = self.add(f"{self.tag}p{n}")
        base = 4 * n
        addr, peer, sink_link = f"192.0.2.{base + 1}", f"192.0.2.{base + 2}", f"s{n}"
        ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", sink_link, "netns", self.sink_ns)
        ip("-n", ns, "addr", "add", f"{addr}/30", "dev", "eth0")
        ip("-n", self.sink_ns, "addr", "add", f"{peer}/30", "dev", sink_link)
        ip("-n", ns, "link", "set", "eth0", "up")
        ip("-n", self.sink_ns, "link", "set", sink_link, "up")
        pod = Pod(ns, addr, peer, "eth0")
        self.pods.append(pod)
        return pod

    def start_sink(self) -> None:
        cmd = ["ip", "netns", "exec", self.sink_ns, sys.executable, "-c", SINK, *(p.peer for p in self.pods)]
        self.sink = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.sink.stdout is not None and self.sink.stdout.readline() == b"ready\n"

    def received(self) -> dict[str, Any]:
        """The next connection's record from the sink (bytes and first-to-last-byte seconds)."""
        assert self.sink is not None and self.sink.stdout is not None
        return dict(json.loads(self.sink.stdout.readline()))

    def close(self) -> None:
        if self.sink is not None:
            self.sink.kill()
            with contextlib.suppress(Exception):
                self.sink.wait(5)
            for s in (self.sink.stdin, self.sink.stdout):
                if s is not None:
                    s.close()
        for ns in reversed(self.names):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.names.clear()


@contextlib.contextmanager
def namespaces() -> Iterator[Namespaces]:
    nss = Namespaces()
    try:
        yield nss
    finally:
        nss.close()


def in_cgroup_and_netns(procs_files: list[str], ns: str, code: str, *args: str) -> subprocess.Popen[bytes]:
    """A Python process that enters the cgroup (every controller's cgroup.procs) and then the namespace."""

    def enter() -> None:
        for f in procs_files:
            with open(f, "w") as fh:
                fh.write(str(os.getpid()))

    cmd = ["ip", "netns", "exec", ns, sys.executable, "-c", code, *args]
    return subprocess.Popen(cmd, preexec_fn=enter, stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def root_qdisc(ns: str, link: str) -> dict[str, Any]:
    """The interface's root qdisc as `tc -j` shows it (an independent reading of what Colo wrote)."""
    out = subprocess.run(["ip", "netns", "exec", ns, "tc", "-j", "qdisc", "show", "dev", link],
                         check=True, capture_output=True).stdout  # fmt: skip
    roots = [q for q in json.loads(out or b"[]") if q.get("root")]
    return roots[0] if roots else {"kind": "noqueue"}
