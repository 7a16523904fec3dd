"""The `network` collector: bytes per second of the physical interfaces, from sysfs counters."""

from __future__ import annotations

from agent.sense.collectors.context import CollectorDeps, PassContext
from agent.sense.collectors.registry import KeepsNothing, register
from agent.sense.netstats import NetCounters
from agent.snapshot import InterfaceSample
from common.families import Family

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


register(
    "network",
    True,
    NetworkCollector,
    fills="interfaces",
    order=60,
    what="Network interface counters from /sys/class/net.",
)
