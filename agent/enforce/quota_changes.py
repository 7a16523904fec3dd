"""The quota a container gets when it (re)starts under a pod quota that already holds (whether a cgroup needs
a quota change, and whether it loosens, for v1's safe order, is agent/enforce/actions.py `quota_change`)."""

from __future__ import annotations

from collections.abc import Mapping

from agent.enforce.actions import cpus, quota_change
from cgroup import CgroupError, CgroupReader, CgroupWriter, CpuSettings, LimitChange

#: container cgroups remembered by RestartedContainers before the memory starts over (bounded for dead paths)
MAX_REMEMBERED = 65536


class RestartedContainers:
    """While a pod's quota holds its containers are not written, but one without any quota (first seen since:
    restarted) gets its own, never above its pod's. A container seen holding a quota under the same pod quota
    is not read again (a restarted container is a new cgroup), so a steady pass reads no container file."""

    def __init__(self, reader: CgroupReader, writer: CgroupWriter) -> None:
        self.reader, self.writer = reader, writer
        self._seen: dict[str, tuple[int | None, int]] = {}  # container -> its pod's (quota, period) then

    def changes(self, containers: Mapping[str, tuple[int | None, int]], pod: CpuSettings) -> list[LimitChange]:
        held = (pod.quota_us, pod.period_us)
        seen = self._seen
        for path in containers:  # the common pass: each container seen holding a quota under this pod quota
            if seen.get(path) != held:
                break
        else:
            return []
        out: list[LimitChange] = []
        if len(seen) > MAX_REMEMBERED:
            seen.clear()
        for path, (quota, period) in containers.items():
            if seen.get(path) == held:
                continue
            if cpus(quota, period) > cpus(pod.quota_us, pod.period_us):
                quota, period = pod.quota_us, pod.period_us
            try:
                cur = self.reader.cpu_settings(path)
            except CgroupError:
                continue
            if cur.quota_us is not None:
                seen[path] = held
            change = quota_change(self.writer, path, cur, quota, period, 0.0) if cur.quota_us is None else None
            if quota is not None and change is not None:
                out.append(change)
        return out
