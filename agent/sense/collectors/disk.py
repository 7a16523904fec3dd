"""The disk collectors, both off by default (disk QoS, `enforcement.disk`, switches them on: it decides on
them): `disk` (pod scope) reads each pod's bytes and operations per device from its cgroup (v1
`blkio.throttle.io_service_bytes_recursive` / `io_serviced_recursive`, v2 `io.stat`); `disk_devices` (node
scope) each block device's rates and busy share from /proc/diskstats (`io_ticks`: milliseconds the device
had I/O in flight). Off by default because the pod collector adds one or two file reads per pod to every
pass, which only disk QoS needs.

Devices are those of /sys/block (whole disks, never partitions: throttle rules take whole devices) with a
non-zero size (an unattached loop device has none), listed again every `LIST_EVERY` passes."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from agent.sense.collectors.context import CollectorDeps, PassContext
from agent.sense.collectors.registry import register
from agent.sense.rates import CounterRates
from agent.snapshot import DiskRates, DiskSample, PodSample, Snapshot
from cgroup import CgroupError
from cgroup.blkio import forget_io, io_counters
from common.exposition import LabelShapes, escape
from common.families import Families, Family, FamilyLines, PutLine
from common.logs import Repeats, repeated
from contract.agent_api import json_number

log = logging.getLogger(__name__)

POD_READ = Family("colo_pod_disk_read_bytes_per_second", "Bytes per second a pod read from a block device.")
POD_WRITE = Family("colo_pod_disk_write_bytes_per_second", "Bytes per second a pod wrote to a block device.")
POD_READS = Family("colo_pod_disk_reads_per_second", "Read operations per second of a pod on a block device.")
POD_WRITES = Family("colo_pod_disk_writes_per_second", "Write operations per second of a pod on a block device.")
DEVICE_BUSY = Family("colo_node_disk_busy_ratio", "Share of the last tick a block device had I/O in flight (0-1).")
DEVICE_READ = Family("colo_node_disk_read_bytes_per_second", "Bytes per second read from a block device.")
DEVICE_WRITE = Family("colo_node_disk_write_bytes_per_second", "Bytes per second written to a block device.")

LIST_EVERY = 10  # passes between two listings of /sys/block
SECTOR = 512  # /proc/diskstats counts 512-byte sectors whatever the device's own sector size


def _rates(rates: CounterRates, key: str, now: float, values: tuple[int, int, int, int]) -> DiskRates:
    rb, wb, r, w = values
    return DiskRates(
        rates.rate((key, 0), rb, now),
        rates.rate((key, 1), wb, now),
        rates.rate((key, 2), r, now),
        rates.rate((key, 3), w, now),
    )


class PodDiskCollector:
    """Each pod's rates per device; one `CounterRates` per pod cgroup, dropped when it vanishes. A device
    that first appears in a pod's counters after its first reading counted 0 at the previous one (the kernel
    prints a device only once the cgroup did I/O on it)."""

    def __init__(self, deps: CollectorDeps) -> None:
        self.reader = deps.reader
        layout = deps.layout
        self.active = layout.is_v2 or "blkio" in layout.v1  # a v1 host without blkio has nothing to read
        self._rates: dict[str, tuple[CounterRates, set[str]]] = {}
        self._last: dict[str, float] = {}

    def collect(self, ctx: PassContext) -> dict[str, DiskRates] | None:
        assert ctx.pod is not None
        if not self.active:
            return None
        path = ctx.pod.path
        try:
            counters = io_counters(self.reader, path)
        except CgroupError:  # the pod's CPU and memory were read: its disk part fails alone, never the pod
            ctx.failed("disk")
            return None
        held = self._rates.get(path)
        if held is None:
            held = self._rates[path] = (CounterRates(), set())
        rates, known = held
        before = self._last.get(path)
        out: dict[str, DiskRates] = {}
        for dev, c in counters.items():
            if dev not in known:
                known.add(dev)
                if before is not None:
                    _rates(rates, dev, before, (0, 0, 0, 0))
            out[dev] = _rates(rates, dev, ctx.now, (c.read_bytes, c.write_bytes, c.reads, c.writes))
        self._last[path] = ctx.now
        return out

    def forget(self, cgroup: str) -> None:
        self._last.pop(cgroup, None)
        self._rates.pop(cgroup, None)
        forget_io(self.reader, cgroup)  # pods' and containers' (enforcement reads their limits)

    def close(self) -> None:
        return None


def parse_diskstats(text: str) -> dict[str, tuple[str, tuple[int, int, int, int], int]]:
    """name -> ('MAJ:MIN', (read bytes, written bytes, reads, writes), io_ticks ms) of /proc/diskstats."""
    out: dict[str, tuple[str, tuple[int, int, int, int], int]] = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) < 13:
            continue
        counters = (int(f[5]) * SECTOR, int(f[9]) * SECTOR, int(f[3]), int(f[7]))
        out[f[2]] = (f"{f[0]}:{f[1]}", counters, int(f[12]))
    return out


class DeviceDiskCollector:
    """Every block device's rates and busy share."""

    def __init__(self, deps: CollectorDeps) -> None:
        self.diskstats = os.path.join(deps.host_root, "proc", "diskstats")
        self.sys_block = os.path.join(deps.host_root, "sys", "block")
        self.rates = CounterRates()
        self._devices: frozenset[str] = frozenset()
        self._failures = Repeats()

    def _list(self) -> frozenset[str]:
        names = set()
        for name in os.listdir(self.sys_block):
            try:
                with open(os.path.join(self.sys_block, name, "size"), "rb") as f:
                    if int(f.read() or b"0") > 0:
                        names.add(name)
            except (OSError, ValueError):
                continue
        return frozenset(names)

    def collect(self, ctx: PassContext) -> tuple[DiskSample, ...]:
        try:
            if ctx.seq % LIST_EVERY == 0 or not self._devices:
                self._devices = self._list()
            with open(self.diskstats, encoding="ascii") as f:
                stats = parse_diskstats(f.read())
        except (OSError, ValueError) as exc:
            ctx.failed("disk_devices")
            if (held := self._failures.occurred("diskstats")) is not None:
                log.warning("cannot read the block devices: %s%s", exc, repeated(held))
            return ()
        out = []
        for name in sorted(self._devices & stats.keys()):
            device, counters, ticks = stats[name]
            busy = self.rates.rate((name, "ticks"), ticks / 1000.0, ctx.now)
            rates = _rates(self.rates, name, ctx.now, counters)
            out.append(DiskSample(name, device, None if busy is None else min(1.0, busy), rates))
        return tuple(out)

    def forget(self, cgroup: str) -> None:
        return None

    def close(self) -> None:
        return None


def _store(sample: PodSample, part: dict[str, DiskRates] | None) -> None:
    sample.disk = part


def _pod_series(put: PutLine, lines: Sequence[FamilyLines], labels: LabelShapes, pod: PodSample) -> None:
    if pod.disk:
        read, write, reads, writes = lines
        tmpl = labels.template(("device",))
        for device, r in sorted(pod.disk.items()):
            dl = tmpl % escape(device)
            put(read, dl, r.read_bytes_per_second)
            put(write, dl, r.write_bytes_per_second)
            put(reads, dl, r.reads_per_second)
            put(writes, dl, r.writes_per_second)


def _rates_document(r: DiskRates) -> dict[str, float | None]:
    return {
        "read_bytes_per_second": json_number(r.read_bytes_per_second),
        "write_bytes_per_second": json_number(r.write_bytes_per_second),
        "reads_per_second": json_number(r.reads_per_second),
        "writes_per_second": json_number(r.writes_per_second),
    }


def _pod_fields(pod: PodSample) -> Mapping[str, Any]:
    """Per device 'MAJ:MIN' while the disk collector is on; null while it is off."""
    return {"disk": None if pod.disk is None else {dev: _rates_document(r) for dev, r in sorted(pod.disk.items())}}


def _device_series(f: Families, snap: Snapshot, nl: dict[str, str]) -> None:
    for d in snap.disks:
        dl = {**nl, "device": d.device, "name": d.name}  # MAJ:MIN, as the pods' series have it
        f.add(DEVICE_BUSY, dl, d.busy_ratio)
        f.add(DEVICE_READ, dl, d.rates.read_bytes_per_second)
        f.add(DEVICE_WRITE, dl, d.rates.write_bytes_per_second)


_EXAMPLE_RATES = DiskRates(1.0, 1.0, 1.0, 1.0)

register(
    "disk",
    False,
    PodDiskCollector,
    store=_store,
    order=47,
    scope="pod",
    families=(POD_READ, POD_WRITE, POD_READS, POD_WRITES),
    metrics_order=58,  # a pod's disk series after its network's
    pod_series=_pod_series,
    pod_fields=_pod_fields,
    units={
        "disk.*.read_bytes_per_second": "bytes_per_second",
        "disk.*.write_bytes_per_second": "bytes_per_second",
        "disk.*.reads_per_second": "operations_per_second",
        "disk.*.writes_per_second": "operations_per_second",
    },
    example={"253:0": _EXAMPLE_RATES},
    what="Every pod's disk bytes and operations per device (blkio / io.stat); on with enforcement.disk.",
)
register(
    "disk_devices",
    False,
    DeviceDiskCollector,
    fills="disks",
    order=63,
    families=(DEVICE_BUSY, DEVICE_READ, DEVICE_WRITE),
    node_series=_device_series,
    example=(DiskSample("vda", "253:0", 0.1, _EXAMPLE_RATES),),
    what="Every block device's bytes, operations and busy share (/proc/diskstats); on with enforcement.disk.",
)
