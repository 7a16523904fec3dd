"""The `net_egress` part: an offline pod's egress rate, a token bucket (tbf) as the root qdisc of each of its
interfaces inside its network namespace (agent/sense/pod_netns.py says why there). Its record: each interface's
root qdisc before Colo's first write (kind, handle, a token bucket's rate); restore puts that back (a default
kind: Colo's root qdisc removed, the kernel's default returns). The namespace is found again from one of the
pod's processes each time: a pod without processes or without a namespace of its own is left alone."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from agent.enforce.actions import CgroupIO, Knob, Part, Probe
from agent.enforce.ledger import Touched
from agent.enforce.parts.registry import register
from agent.enforce.parts.spec import PartSpec, RecordIO, RestoreIO
from agent.sense.pod_netns import NetnsError, RootQdisc, host_netns, pod_pid, root_qdiscs, set_roots
from cgroup import CgroupError

NET_EGRESS = "net_egress"


@dataclass(frozen=True, slots=True)
class SetEgressRate(Knob):
    """A token bucket at `rate` bytes/s on each interface of the pod's namespace (loopback left out)."""

    cgroup: str
    rate: int
    part: Part
    uid: str = ""

    file = "egress qdisc"

    def probe(self, io: CgroupIO) -> Probe | None:
        pid = pod_pid(io.reader, self.cgroup, io.proc_root, host_netns(io.proc_root))
        if pid is None:
            return None  # no process yet, or hostNetwork: nothing of its own to shape
        try:
            roots = root_qdiscs(io.proc_root, pid)
        except NetnsError as e:
            raise CgroupError(self.cgroup, str(e)) from e
        holds = all(q.kind == "tbf" and q.rate == self.rate for q in roots.values())
        wanted = {
            name: RootQdisc("tbf", q.handle if q.kind == "tbf" else 0, self.rate, q.index) for name, q in roots.items()
        }
        return roots, holds, partial(_write, self.cgroup, io.proc_root, pid, wanted)


def _write(cgroup: str, proc_root: str, pid: int, wanted: dict[str, RootQdisc]) -> None:
    try:
        set_roots(proc_root, pid, wanted)
    except NetnsError as e:
        raise CgroupError(cgroup, str(e)) from e


def _record(io: RecordIO, entry: Touched, action: Any, current: Any) -> bool:
    """Each interface's root qdisc before the first write (an interface seen later is added as it was)."""
    record = entry.parts.setdefault(NET_EGRESS, {})
    new = {name: q.to_json() for name, q in current.items() if name not in record}
    record.update(new)
    return bool(new)


def _restore(io: RestoreIO, entry: Touched) -> bool:
    if (entry.cgroup, SetEgressRate.file) in io.asked:
        return True
    pid = pod_pid(io.reader, entry.cgroup, io.proc_root, host_netns(io.proc_root))
    if pid is None:
        return True  # no process left: its namespace, and the qdisc with it, is gone
    before = {name: RootQdisc.from_json(q) for name, q in entry.parts[NET_EGRESS].items()}
    return io.write(f"restore egress qdisc of {entry.cgroup}", partial(_write, entry.cgroup, io.proc_root, pid, before))


SPEC = PartSpec(NET_EGRESS, "offline", record=_record, restore=_restore)
register(SPEC, order=90)
