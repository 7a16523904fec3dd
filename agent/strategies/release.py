"""Release: while online + system CPU is below `cpu_release_below` of allocatable, offline pods run at their
own limits (a quiet node is not throttled for nothing); above it plus the hysteresis they are suppressed
again. The state switches only when the last `cpu_release_confirm_passes` passes all agree (issue 22): a
one-second spike neither cuts released pods to their quota nor releases suppressed ones, and a real rise is
answered on the second pass (within 2 s at the default 1-second interval). An unknown load (no rate yet)
never releases: the caller does not ask."""

from __future__ import annotations

from collections.abc import Sequence

RELEASE_HYSTERESIS = 0.1  # released pods are suppressed again above cpu_release_below + this


def plan(recent: Sequence[float], released: bool, below: float, confirm: int = 1) -> bool:
    """Whether offline pods are released after this pass, from the loads of the latest passes (newest
    last); `below` <= 0 disables release. Fewer than `confirm` loads keep the state as it is."""
    if below <= 0:
        return False
    last = recent[-confirm:]
    if len(last) < confirm:
        return released
    if not released and all(load < below for load in last):
        return True
    if released and all(load > below + RELEASE_HYSTERESIS for load in last):
        return False
    return released
