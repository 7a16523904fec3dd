"""Egress limits of offline pods (the `net_egress` part): a node budget split equally among the offline pods
that have a network namespace of their own (no Kubernetes resource names a pod's network share), each at
least the floor; tightened while the online traffic on the node's uplink (what the uplink sends minus what
the offline pods send) is above the high mark, released once it falls under the low mark (hysteresis).

A limit is asked for when it changes, and in between once every `verify_every` passes on the pod's own turn:
each check enters the pod's namespace over netlink, which a 1 s pass cannot afford for every offline pod."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.config import AgentConfig
from agent.config_sections.pod_qos import NetworkQosConfig
from agent.enforce.actions import Part, Plan, Recorded, Report
from agent.enforce.parts.net_egress import NET_EGRESS, SetEgressRate
from agent.enforce.strategies.registry import Facts, register
from agent.node_state import NodeState
from agent.snapshot import InterfaceSample, PodSample


def uplink_tx(interfaces: Sequence[InterfaceSample], uplinks: Sequence[str]) -> float | None:
    """Bytes per second the node sends on its uplinks (every physical interface when none is named)."""
    chosen = [i for i in interfaces if (i.name in uplinks if uplinks else i.physical)]
    rates = [i.tx_bytes_per_second for i in chosen if i.tx_bytes_per_second is not None]
    return sum(rates) if rates else None


def online_tx(uplink: float | None, offline: Sequence[PodSample]) -> float | None:
    """What the uplink sends that offline pods did not: online (and the node's own) traffic."""
    if uplink is None:
        return None
    sent = sum(p.network.tx_bytes_per_second or 0.0 for p in offline if p.network is not None)
    return max(0.0, uplink - sent)


def tightened(online: float | None, was: bool, config: NetworkQosConfig) -> bool:
    """Tightened above the high mark, released under the low mark, as it was in between (and when unknown)."""
    if online is None:
        return was
    if online > config.online_high_bytes_per_second:
        return True
    if online < config.online_low_bytes_per_second:
        return False
    return was


def turn(uid: str, every: int) -> int:
    """The pass (modulo `every`) a pod's unchanged limit is checked in: spread, so no pass checks them all."""
    return zlib.crc32(uid.encode()) % every


def split(budget: int, uids: Sequence[str], floor: int) -> dict[str, int]:
    """Equal shares of the budget, each at least the floor."""
    if not uids:
        return {}
    share = max(floor, budget // len(uids))
    return {uid: share for uid in uids}


@dataclass(frozen=True, slots=True)
class NetEgressMemo:
    tightened: bool = False
    rates: Mapping[str, int] = field(default_factory=dict)  # uid -> the rate last asked for


@dataclass(frozen=True, slots=True)
class NetEgressReport(Report):
    rates: Mapping[str, int]  # offline pod uid -> its egress limit, bytes/s
    tightened: bool
    online_tx: float | None
    host_network: tuple[str, ...]  # offline pods skipped: they share the host's namespace

    def fields(self) -> dict[str, Any]:
        return {
            "network_qos": {
                "offline_egress_bytes_per_second": dict(self.rates),
                "tightened": self.tightened,
                "online_uplink_tx_bytes_per_second": self.online_tx,
                "host_network_pods": list(self.host_network),
            }
        }


class NetEgress:
    """Registered when network_qos.enabled: the rate of each offline pod (with its own namespace) that
    `split` gives the budget of the pass."""

    name = "net_egress"
    parts: frozenset[Part] = frozenset({NET_EGRESS})

    def __init__(self, config: NetworkQosConfig) -> None:
        self.config = config

    def plan(self, state: NodeState, recorded: Recorded) -> Plan:
        c = self.config
        memo = recorded.memo if isinstance(recorded.memo, NetEgressMemo) else NetEgressMemo()
        online = online_tx(uplink_tx(state.snapshot.interfaces, c.uplinks), state.offline)
        tight = tightened(online, memo.tightened, c)
        budget = c.offline_egress_bytes_per_second * (c.tightened_percent if tight else 100) // 100
        host = tuple(sorted(p.uid for p in state.offline if p.network is not None and p.network.host_network))
        pods = [p for p in state.offline if p.uid not in host]
        rates = split(budget, [p.uid for p in pods], c.min_pod_bytes_per_second)
        seq = state.snapshot.seq
        actions = []
        for p in pods:
            entry = recorded.entries.get(p.uid)
            changed = memo.rates.get(p.uid) != rates[p.uid] or entry is None or NET_EGRESS not in entry.parts
            if changed or seq % c.verify_every == turn(p.uid, c.verify_every):
                actions.append(SetEgressRate(p.cgroup, rates[p.uid], NET_EGRESS, p.uid))
        return Plan(tuple(actions), NetEgressMemo(tight, rates), NetEgressReport(rates, tight, online, host))


def _build(config: AgentConfig, facts: Facts) -> NetEgress | None:
    return NetEgress(config.network_qos) if config.network_qos.enabled else None


register(NetEgress.name, _build, order=100)
