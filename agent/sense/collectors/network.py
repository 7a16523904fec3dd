"""The `network` collector: bytes per second of the physical interfaces, from sysfs counters."""

from __future__ import annotations

from agent.sense.collectors.context import CollectorDeps, PassContext
from agent.sense.collectors.registry import KeepsNothing, register
from agent.sense.netstats import NetCounters
from agent.snapshot import InterfaceSample, Snapshot
from common.families import Families, Family

RECEIVE = Family(
    "colo_node_network_receive_bytes_per_second", "Bytes per second received (physical interfaces, and their total)."
)
TRANSMIT = Family(
    "colo_node_network_transmit_bytes_per_second",
    "Bytes per second transmitted (physical interfaces, and their total).",
)


class NetworkCollector(KeepsNothing):
    def __init__(self, deps: CollectorDeps) -> None:
        self.net, self.counters = NetCounters(deps.host_root), deps.counters

    def collect(self, ctx: PassContext) -> tuple[InterfaceSample, ...]:
        out = []
        for c in self.net.read(ctx.now):
            rx = self.counters.rate(("net", c.name, "rx"), c.rx_bytes, ctx.now)
            tx = self.counters.rate(("net", c.name, "tx"), c.tx_bytes, ctx.now)
            out.append(InterfaceSample(c.name, True, rx, tx))
        if not self.net.ok:
            ctx.failed("network")
        return tuple(out)

    def close(self) -> None:
        self.net.close()


def _series(f: Families, snap: Snapshot, nl: dict[str, str]) -> None:
    """Each physical interface, and their total."""
    for iface in snap.interfaces:
        if not iface.physical:
            continue
        il = {**nl, "interface": iface.name}
        f.add(RECEIVE, il, iface.rx_bytes_per_second)
        f.add(TRANSMIT, il, iface.tx_bytes_per_second)
    rx, tx = snap.network_total()
    tl = {**nl, "interface": "total"}
    f.add(RECEIVE, tl, rx)
    f.add(TRANSMIT, tl, tx)


register(
    "network",
    True,
    NetworkCollector,
    fills="interfaces",
    order=60,
    families=(RECEIVE, TRANSMIT),
    node_series=_series,
    what="Network interface counters from /sys/class/net.",
)
