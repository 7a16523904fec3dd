"""The `pod_network` collector (pod scope, off by default): bytes per second each pod's own network namespace
received and sent, from /proc/<pid>/net/dev of one of its processes (the kernel shows a process the
interfaces of its namespace: no namespace switch, one small file per pod and pass). The process is found
once from the pod's cgroup and kept while it lives; a pod whose processes are all in the host's namespace is
hostNetwork (its traffic is the node's), one with no process yet is looked at again some passes later."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.sense.collectors.context import CollectorDeps, PassContext
from agent.sense.collectors.registry import register
from agent.sense.pod_netns import host_netns, pod_pid, read_dev
from agent.sense.rates import CounterRates
from agent.snapshot import NetworkRates, PodSample
from common.exposition import LabelShapes
from common.families import Family, FamilyLines, PutLine
from contract.agent_api import json_number

RECEIVE = Family("colo_pod_network_receive_bytes_per_second", "Bytes per second the pod's network namespace received.")
TRANSMIT = Family("colo_pod_network_transmit_bytes_per_second", "Bytes per second the pod's network namespace sent.")
#: passes before a pod without a process of its own namespace is looked at again
RETRY_EVERY = 10


class PodNetworkCollector:
    def __init__(self, deps: CollectorDeps) -> None:
        self.reader = deps.reader
        self.proc_root = f"{deps.host_root.rstrip('/')}/proc"
        self.host_ns = host_netns(self.proc_root)
        self.pids: dict[str, int] = {}  # pod cgroup -> a process in its own namespace
        self.retry: dict[str, tuple[int, bool]] = {}  # pod cgroup -> (pass to look again at, hostNetwork)
        self.rx, self.tx = CounterRates(), CounterRates()

    def _pid(self, cgroup: str, seq: int) -> int | None:
        pid = pod_pid(self.reader, cgroup, self.proc_root, self.host_ns)
        if pid is None:
            self.retry[cgroup] = (seq + RETRY_EVERY, self._host_network(cgroup))
        else:
            self.pids[cgroup] = pid
            self.retry.pop(cgroup, None)
        return pid

    def _host_network(self, cgroup: str) -> bool:
        try:
            pids = self.reader.procs_recursive(cgroup)
        except OSError:
            return False
        return bool(pids)  # processes, none in a namespace of its own (pod_pid found none)

    def collect(self, ctx: PassContext) -> NetworkRates | None:
        assert ctx.pod is not None
        cg = ctx.pod.path
        pid = self.pids.get(cg)
        if pid is None:
            again, host = self.retry.get(cg, (ctx.seq, False))
            if ctx.seq < again:
                return NetworkRates(None, None, True) if host else None
            pid = self._pid(cg, ctx.seq)
            if pid is None:
                return NetworkRates(None, None, True) if self.retry[cg][1] else None
        try:
            links = read_dev(self.proc_root, pid)
        except OSError:  # the process ended: another of the pod's, next time
            self.pids.pop(cg, None)
            return None
        rx = self.rx.rate(cg, sum(c.rx_bytes for c in links), ctx.now)
        tx = self.tx.rate(cg, sum(c.tx_bytes for c in links), ctx.now)
        return NetworkRates(rx, tx)

    def forget(self, cgroup: str) -> None:
        self.pids.pop(cgroup, None)
        self.retry.pop(cgroup, None)
        self.rx.forget(cgroup)
        self.tx.forget(cgroup)

    def close(self) -> None:
        return None


def _store(sample: PodSample, part: NetworkRates | None) -> None:
    sample.network = part


def _series(put: PutLine, lines: Sequence[FamilyLines], labels: LabelShapes, pod: PodSample) -> None:
    n = pod.network
    if n is not None and not n.host_network:
        rx, tx = lines
        put(rx, labels.base, n.rx_bytes_per_second)
        put(tx, labels.base, n.tx_bytes_per_second)


def _fields(pod: PodSample) -> Mapping[str, Any]:
    """The pod's own network namespace (null while it is not read)."""
    n = pod.network
    if n is None:
        return {"network": None}
    return {
        "network": {
            "host_network": n.host_network,
            "receive_bytes_per_second": json_number(n.rx_bytes_per_second),
            "transmit_bytes_per_second": json_number(n.tx_bytes_per_second),
        }
    }


register(
    "pod_network",
    False,
    PodNetworkCollector,
    store=_store,
    order=55,
    scope="pod",
    families=(RECEIVE, TRANSMIT),
    pod_series=_series,
    pod_fields=_fields,
    example=NetworkRates(1e3, 2e3),
    what="Each pod's network namespace counters (/proc/<pid>/net/dev of one of its processes); off by default: "
    "one more file per pod and pass, needed by network_qos.",
)
