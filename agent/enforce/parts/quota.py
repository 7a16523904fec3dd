"""CFS quotas, two parts over the entry's own quotas (`quota_us`, `period_us`, `containers`, taken at first
sight and kept in step with the pod's containers): `quota` holds offline pods down (suppression), and
`quota_burst` raises a throttled online pod above its own. Both are put back in the executor's safe-order
quota batch (v1 refuses a parent quota below a child's), so neither has a restore step of its own."""

from __future__ import annotations

import dataclasses
from typing import Any

from agent.enforce.actions import SetCpuQuota, cpus
from agent.enforce.ledger import Touched
from agent.enforce.parts.registry import register
from agent.enforce.parts.spec import PartSpec, RecordIO, mark
from cgroup import CgroupError, CpuSettings

QUOTA, QUOTA_BURST = "quota", "quota_burst"


def _record_quota(io: RecordIO, entry: Touched, action: Any, current: Any) -> bool:
    """The pod's and its containers' quotas were recorded with the entry (kept in step each pass)."""
    return mark(entry, QUOTA)


def _record_quota_burst(io: RecordIO, entry: Touched, action: Any, current: Any) -> bool:
    """At the first raise (again after each give-back) the pod's and its containers' quotas as they are
    now, its own: an in-place resize since the entry was made is what goes back."""
    assert isinstance(action, SetCpuQuota)
    changed = mark(entry, QUOTA_BURST)
    if changed:
        for path in (entry.cgroup, *entry.containers):
            try:
                s = io.reader.cpu_settings(path)
            except CgroupError:
                entry.containers.pop(path, None)
                entry.container_periods.pop(path, None)
                continue
            if path == entry.cgroup:
                entry.quota_us, entry.period_us = s.quota_us, s.period_us
            else:
                entry.containers[path], entry.container_periods[path] = s.quota_us, s.period_us
    if action.cgroup != entry.cgroup and action.cgroup not in entry.containers:
        entry.containers[action.cgroup], entry.container_periods[action.cgroup] = current.quota_us, current.period_us
        changed = True
    return changed


def never_lower(a: SetCpuQuota, cur: CpuSettings) -> SetCpuQuota:
    """A raise that asks for less than the cgroup holds keeps what it holds (unlimited stays unlimited)."""
    if a.quota_us is None or cpus(a.quota_us, a.period_us) >= cpus(cur.quota_us, cur.period_us):
        return a
    return dataclasses.replace(a, quota_us=cur.quota_us, period_us=cur.period_us if cur.quota_us is not None else 0)


QUOTA_SPEC = PartSpec(QUOTA, "offline", record=_record_quota, quota_batch=True)
# a first raise starts from the spec's base: kubelet's quota may be above it, and a raise never lowers it
QUOTA_BURST_SPEC = PartSpec(
    QUOTA_BURST, "online", record=_record_quota_burst, quota_batch=True, first_write=never_lower
)
register(QUOTA_SPEC, order=20)
register(QUOTA_BURST_SPEC, order=60)
