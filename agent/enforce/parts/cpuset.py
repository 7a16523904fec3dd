"""The cpuset offline pods are confined to. Its record: the pod's and its containers' cpuset.cpus before."""

from __future__ import annotations

from typing import Any

from agent.enforce.ledger import Touched
from agent.enforce.parts.registry import register
from agent.enforce.parts.spec import PartSpec, RecordIO, RestoreIO
from cgroup import CgroupError, CgroupGone, parent_cgroup
from cgroup.files import format_cpuset, parse_cpuset

NAME = "cpuset"


def _record(io: RecordIO, entry: Touched, action: Any, current: Any) -> bool:
    if NAME in entry.parts:
        return False
    containers: dict[str, str] = {}
    for path in entry.containers:
        try:
            containers[path] = format_cpuset(io.reader.cpuset(path))
        except CgroupError:
            continue
    entry.parts[NAME] = {"pod": format_cpuset(current), "containers": containers}
    return True


def _restore(io: RestoreIO, entry: Touched) -> bool:
    try:
        current = io.reader.cpuset(entry.cgroup)
        available = io.reader.cpuset(parent_cgroup(entry.cgroup), effective=True)
    except CgroupGone:
        return True
    except CgroupError:
        return False

    def recorded(text: str | None, fallback: frozenset[int]) -> frozenset[int]:
        # v2 pods usually inherit ("" in cpuset.cpus), which the writer cannot write back: the parent's
        cpus = parse_cpuset("ledger", text.encode()) if text else frozenset()
        return cpus or fallback

    record = entry.parts[NAME]
    pod_cpus = recorded(record.get("pod"), available)
    before: dict[str, str] = record.get("containers", {})
    containers = {
        path: (recorded(before.get(path), pod_cpus) & pod_cpus) or pod_cpus
        for path in entry.containers
        if io.reader.exists(path, "cpuset")
    }
    return io.move_cpuset(entry.cgroup, current, pod_cpus, containers)


SPEC = PartSpec(NAME, "offline", record=_record, restore=_restore)
register(SPEC, order=30)
