"""A pod's network namespace, found from one of its processes: its interfaces' counters (the process's
/proc/<pid>/net/dev, no namespace switch) and its interfaces' root qdisc (netlink through pyroute2, inside the
namespace). cgroup/ knows cgroup files; this module knows what the network side of a pod is.

A pod's egress is shaped inside its namespace, on the egress of its interfaces (eth0): there a token bucket is
a real queue that pushes back on the sender's sockets. The host-side veth sees the pod's egress as ingress,
where only a policer (drops) or an IFB redirect could hold it."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from dataclasses import dataclass, field, replace
from typing import Any

from cgroup import CgroupError, CgroupReader

log = logging.getLogger(__name__)

#: interfaces of a pod's namespace never shaped nor counted
LOOPBACK = "lo"
#: a root qdisc whose removal gives the interface back its default (nothing of its own to put back)
DEFAULT_KINDS = frozenset({"noqueue", "pfifo_fast", "mq", "fq_codel", ""})
#: the token bucket's queue: at most this long a packet waits before the bucket drops it (microseconds)
LATENCY_US = 50_000
#: handle of the qdisc Colo installs (1:0), to tell it from a root qdisc someone else put there
HANDLE = 0x10000


CLONE_NEWNET = 0x40000000
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class NetnsError(Exception):
    """The pod's namespace cannot be found or changed (no process, host network, netlink refused)."""


@dataclass(frozen=True, slots=True)
class LinkCounters:
    name: str
    rx_bytes: int
    tx_bytes: int


@dataclass(frozen=True, slots=True)
class RootQdisc:
    """An interface's root qdisc as Colo needs it: its kind, its handle, and a token bucket's rate (bytes/s)."""

    kind: str
    handle: int = 0
    rate: int | None = None
    index: int = field(default=0, compare=False)  # the interface's index as read (not recorded: 0)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "handle": self.handle, "rate": self.rate}

    @staticmethod
    def from_json(data: dict[str, Any]) -> RootQdisc:
        return RootQdisc(str(data.get("kind", "")), int(data.get("handle", 0)), data.get("rate"))


def netns_inode(proc_root: str, pid: int | str) -> int:
    """The inode of a process's network namespace (equal inodes: one namespace). OSError when it is gone."""
    return os.stat(f"{proc_root}/{pid}/ns/net").st_ino


def host_netns(proc_root: str) -> int:
    """The host's network namespace (of pid 1 under the host's /proc): pods in it are hostNetwork."""
    try:
        return netns_inode(proc_root, 1)
    except OSError:
        return os.stat("/proc/self/ns/net").st_ino


def pod_pid(reader: CgroupReader, cgroup: str, proc_root: str, host_ns: int) -> int | None:
    """A process of the pod that is in a namespace of its own; None when the pod has none (no process, or
    hostNetwork: every process is in the host's namespace)."""
    try:
        pids = reader.procs_recursive(cgroup)
    except CgroupError:
        return None
    for pid in pids:
        try:
            if netns_inode(proc_root, pid) != host_ns:
                return pid
        except OSError:
            continue
    return None


def read_dev(proc_root: str, pid: int) -> list[LinkCounters]:
    """The pod's interfaces (loopback left out) from /proc/<pid>/net/dev. OSError when the process is gone."""
    with open(f"{proc_root}/{pid}/net/dev", "rb") as f:
        lines = f.read().decode().splitlines()[2:]
    out = []
    for line in lines:
        name, _, rest = line.partition(":")
        name = name.strip()
        fields = rest.split()
        if name == LOOPBACK or len(fields) < 9:
            continue
        out.append(LinkCounters(name, int(fields[0]), int(fields[8])))
    return out


def _iproute_class() -> Any:
    """pyroute2's IPRoute, imported on first use: an agent without network QoS never pays its megabytes of
    modules."""
    from pyroute2 import IPRoute

    return IPRoute


def _setns(fd: int) -> None:
    if _LIBC.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _return_home(fd: int) -> None:
    """Back into the agent's own namespace; a thread that cannot get back would go on reading and writing in
    a pod's network namespace, so the process ends (the DaemonSet restarts it; the ledger keeps originals)."""
    try:
        _setns(fd)
    except OSError as e:
        log.critical("cannot return to the agent's network namespace (%s): exiting", e)
        os._exit(70)


def _iproute(proc_root: str, pid: int) -> Any:
    """A netlink socket in the namespace of `pid`: this thread enters it, opens the socket (which stays
    there), and comes back; pyroute2's own `netns=` forks a helper for that, several times dearer."""
    try:
        here = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            there = os.open(f"{proc_root}/{pid}/ns/net", os.O_RDONLY)
            try:
                _setns(there)
                try:
                    return _iproute_class()()
                finally:
                    _return_home(here)
            finally:
                os.close(there)
        finally:
            os.close(here)
    except Exception as e:  # OSError, netlink errors, and whatever else pyroute2 raises: one line
        raise NetnsError(f"network namespace of pid {pid}: {e}") from e


def _links(ipr: Any) -> list[tuple[int, str]]:
    return [(m["index"], m.get_attr("IFLA_IFNAME")) for m in ipr.get_links() if m.get_attr("IFLA_IFNAME") != LOOPBACK]


def _root(ipr: Any, index: int) -> RootQdisc:
    for m in ipr.get_qdiscs(index):
        if m["parent"] == 0xFFFFFFFF:
            kind = m.get_attr("TCA_KIND") or ""
            rate = None
            if kind == "tbf":
                parms = (m.get_attr("TCA_OPTIONS") or {}).get("attrs", [])
                rate = next((v["rate"] for k, v in parms if k == "TCA_TBF_PARMS"), None)
            return RootQdisc(kind, m["handle"], rate)
    return RootQdisc("noqueue")


def root_qdiscs(proc_root: str, pid: int) -> dict[str, RootQdisc]:
    """Interface name -> its root qdisc, in the namespace of `pid`."""
    ipr = _iproute(proc_root, pid)
    try:
        return {name: replace(_root(ipr, index), index=index) for index, name in _links(ipr)}
    except Exception as e:  # OSError, netlink errors, and whatever else pyroute2 raises: one line
        raise NetnsError(f"qdiscs in the namespace of pid {pid}: {e}") from e
    finally:
        ipr.close()


def burst_bytes(rate: int) -> int:
    """The bucket: a 100th of a second at the rate, and never less than a few full-size packets."""
    return max(16 * 1024, rate // 100)


def set_roots(proc_root: str, pid: int, wanted: dict[str, RootQdisc]) -> None:
    """Each named interface's root qdisc as wanted: a token bucket at `rate` bytes/s, a kind without
    options, or its default back (a default kind: Colo's root removed). A wish with the `index` just read
    (a probe's) is written without looking the interfaces up again."""
    ipr = _iproute(proc_root, pid)
    try:
        links = {} if all(q.index for q in wanted.values()) else {name: index for index, name in _links(ipr)}
        for name, q in wanted.items():
            index = q.index or links.get(name)
            if index is None:
                continue
            if q.kind == "tbf" and q.rate:
                ipr.tc(
                    "replace",
                    "tbf",
                    index,
                    handle=q.handle or HANDLE,
                    rate=q.rate,
                    burst=burst_bytes(q.rate),
                    latency=LATENCY_US,
                )
            elif q.kind in DEFAULT_KINDS:
                if _root(ipr, index).kind not in DEFAULT_KINDS:
                    ipr.tc("del", index=index, handle=0, parent=0xFFFFFFFF)
            else:
                ipr.tc("replace", q.kind, index, handle=q.handle or HANDLE)
    except Exception as e:  # OSError, netlink errors, and whatever else pyroute2 raises: one line
        raise NetnsError(f"qdisc in the namespace of pid {pid}: {e}") from e
    finally:
        ipr.close()
