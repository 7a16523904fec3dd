"""The `disk_qos` strategy: offline pods held to a node-level disk budget per block device, like their CPU.

Per device and direction (read/write bytes per second, read/write operations per second) the configured
budget is what all offline pods together may use. It is split among them as the CPU budget is
(cpu_suppression.split_budget: in proportion to their CPU requests, batch-cpu requests included; best-effort
pods share `besteffort_share`), each pod keeping at least `min_pod_bps` / `min_pod_iops`.

While a device is busy (its io_ticks share above `busy_ratio`) or online pods move more than `online_bps` on
it, its budget is tightened to `tightened_share`; it goes back to the full budget with hysteresis, as the CPU
release does (cpu_suppression.release): the device's pressure (the larger of busy / busy_ratio and online
bytes / online_bps, 1.0 at the threshold) must stay above 1.0 for `confirm_passes` passes in a row to
tighten, and below 0.9 as long to release. A pressure not known yet (the first pass) changes nothing.

Devices are the node's block devices the disk_devices collector reports, without loop, ram and zram devices
unless `include_devices` names them. Always registered: switched off, it puts back what it wrote. Pure: no
I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.config import AgentConfig
from agent.config_sections.enforcement import DiskQosConfig
from agent.enforce.actions import Action, Part, Plan, Recorded, Report, Restore
from agent.enforce.parts.disk import NAME, SetIoLimits
from agent.enforce.strategies.cpu_suppression import OfflineCpu, cpu_demand, release, split_budget
from agent.enforce.strategies.registry import Facts, register
from agent.node_state import NodeState
from agent.sense.pace import NOTHING_MORE, PassNeeds
from agent.snapshot import DiskSample, PodSample
from cgroup.blkio import KEYS, IoLimit

SKIPPED = ("loop", "ram", "zram")  # device name prefixes left alone unless named in include_devices
RELEASE_BELOW = 0.9  # pressure under which a tightened device is released (tightened above 0.9 + 0.1)
PARTS: frozenset[Part] = frozenset({NAME})


def chosen_devices(disks: Sequence[DiskSample], include: Sequence[str]) -> list[DiskSample]:
    """The devices limited: every reported one but loop, ram and zram devices, and those `include` names."""
    return [d for d in disks if d.name in include or not d.name.startswith(SKIPPED)]


def pressure(busy: float | None, online_bps: float, config: DiskQosConfig) -> float | None:
    """1.0 at the tighter threshold: busy share over `busy_ratio`, online bytes over `online_bps` (when set);
    None while the busy share is not known yet."""
    if busy is None:
        return None
    ratio = busy / config.busy_ratio
    if config.online_bps > 0:
        ratio = max(ratio, online_bps / config.online_bps)
    return ratio


def online_bytes(online: Sequence[PodSample], device: str) -> float:
    """Bytes per second online pods read and wrote on the device (unknown rates count 0)."""
    total = 0.0
    for p in online:
        r = (p.disk or {}).get(device)
        if r is not None:
            total += (r.read_bytes_per_second or 0.0) + (r.write_bytes_per_second or 0.0)
    return total


def asked_keys(config: DiskQosConfig) -> tuple[str, ...]:
    """The limits the budget has (a direction of budget 0 is left as the cgroup has it)."""
    values = (config.read_bps, config.write_bps, config.read_iops, config.write_iops)
    return tuple(k for k, v in zip(KEYS, values, strict=True) if v)


def budgets(config: DiskQosConfig, share: float) -> tuple[int, int, int, int]:
    """(rbps, wbps, riops, wiops) of all offline pods together at `share` of the configured budget (0: none)."""
    values = (config.read_bps, config.write_bps, config.read_iops, config.write_iops)
    return tuple(max(1, int(v * share)) if v else 0 for v in values)  # type: ignore[return-value]


def split_limits(
    total: tuple[int, int, int, int], pods: Sequence[OfflineCpu], besteffort_share: float, config: DiskQosConfig
) -> dict[str, IoLimit]:
    """Each offline pod's limits of one device: the budget split like the CPU budget, floored per pod."""
    floors = (config.min_pod_bps, config.min_pod_bps, config.min_pod_iops, config.min_pod_iops)
    demand = [OfflineCpu(p.uid, p.request_cores, None) for p in pods]  # a CPU limit does not cap disk
    per_key: list[dict[str, float] | None] = []
    for budget in total:
        per_key.append(split_budget(float(budget), demand, besteffort_share)[0] if budget else None)
    out: dict[str, IoLimit] = {}
    for p in pods:
        pairs = zip(per_key, floors, strict=True)
        values = [None if shares is None else max(floor, int(shares[p.uid])) for shares, floor in pairs]
        out[p.uid] = IoLimit(*values)
    return out


def per_container(limit: IoLimit, n: int) -> IoLimit:
    """A pod's limit shared by its `n` containers (v1 throttles each cgroup on its own), each at least 1."""
    if n <= 1:
        return limit
    return IoLimit(*(None if v is None else max(1, v // n) for v in limit.values()))


@dataclass(frozen=True, slots=True)
class DiskMemo:
    """Per device ('MAJ:MIN'): whether its budget is released (not tightened), and its latest pressures."""

    released: Mapping[str, bool] = field(default_factory=dict)
    loads: Mapping[str, tuple[float, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DiskQosReport(Report):
    enabled: bool
    devices: Mapping[str, Any]  # name -> {device, busy_ratio, online_bytes_per_second, tightened, budget}
    pods: Mapping[str, Any]  # offline pod uid -> device -> {rbps, wbps, riops, wiops}

    def fields(self) -> dict[str, Any]:
        return {"offline_disk": {"enabled": self.enabled, "devices": self.devices, "pods": self.pods}}


def step(memo: DiskMemo, device: str, load: float | None, confirm: int) -> tuple[bool, tuple[float, ...]]:
    """Whether the device's budget is released after this pass, and its loads to remember."""
    was = memo.released.get(device, True)
    loads = memo.loads.get(device, ())
    if load is None:
        return was, loads
    loads = (*loads, load)[-confirm:]
    return release(loads, was, RELEASE_BELOW, confirm), loads


class DiskQos:
    name = "disk_qos"
    parts = PARTS

    def __init__(self, config: DiskQosConfig, besteffort_share: float, is_v2: bool) -> None:
        self.config, self.besteffort_share, self.is_v2 = config, besteffort_share, is_v2
        # on, it decides on each pod's I/O each second
        self.reads = PassNeeds(online_pods=True) if config.enabled else NOTHING_MORE

    def plan(self, state: NodeState, recorded: Recorded) -> Plan:
        c = self.config
        if not c.enabled:
            back = tuple(Restore(uid, PARTS) for uid, e in recorded.entries.items() if NAME in e.parts)
            return Plan(back, None, DiskQosReport(False, {}, {}))
        memo: DiskMemo = recorded.memo or DiskMemo()
        offline = list(state.offline)
        demands = [cpu_demand(p) for p in offline]
        released: dict[str, bool] = {}
        loads: dict[str, tuple[float, ...]] = {}
        devices: dict[str, Any] = {}
        by_pod: dict[str, list[tuple[str, IoLimit]]] = {p.uid: [] for p in offline}
        for d in chosen_devices(state.snapshot.disks, c.include_devices):
            online = online_bytes(state.online, d.device)
            free, loads[d.device] = step(memo, d.device, pressure(d.busy_ratio, online, c), c.confirm_passes)
            released[d.device] = free
            total = budgets(c, 1.0 if free else c.tightened_share)
            devices[d.name] = {
                "device": d.device,
                "busy_ratio": d.busy_ratio,
                "online_bytes_per_second": online,
                "tightened": not free,
                "budget": dict(zip(KEYS, total, strict=True)),
            }
            if not any(total):
                continue
            for uid, limit in split_limits(total, demands, self.besteffort_share, c).items():
                by_pod[uid].append((d.device, limit))
        actions: list[Action] = []
        report_pods: dict[str, Any] = {}
        keys = asked_keys(c)
        for p in offline:
            limits = tuple(by_pod[p.uid])
            if not limits:
                continue
            actions.append(SetIoLimits(p.cgroup, limits, NAME, p.uid, keys))
            if not self.is_v2:  # v1 throttling is flat: each container holds its share
                shared = tuple((dev, per_container(lim, len(p.containers))) for dev, lim in limits)
                actions += [SetIoLimits(ctr.cgroup, shared, NAME, p.uid, keys) for ctr in p.containers]
            report_pods[p.uid] = {dev: _fields(lim) for dev, lim in limits}
        return Plan(tuple(actions), DiskMemo(released, loads), DiskQosReport(True, devices, report_pods))


def _fields(limit: IoLimit) -> dict[str, int | None]:
    return dict(zip(KEYS, limit.values(), strict=True))


def _build(config: AgentConfig, facts: Facts) -> DiskQos:
    """Always active: switched off, it puts back what it wrote."""
    e = config.enforcement
    return DiskQos(e.disk, e.besteffort_share, facts.is_v2)


register(DiskQos.name, _build, order=90)
