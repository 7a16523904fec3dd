"""Release: while online + system CPU is below `cpu_release_below` of allocatable, offline pods run at their
own limits (a quiet node is not throttled for nothing); above it plus the hysteresis they are suppressed
again. An unknown load (no rate yet) never releases: the caller does not ask."""

from __future__ import annotations

RELEASE_HYSTERESIS = 0.1  # released pods are suppressed again above cpu_release_below + this


def plan(load: float, released: bool, below: float) -> bool:
    """Whether offline pods are released after this pass; `below` <= 0 disables release."""
    if below <= 0:
        return False
    if not released and load < below:
        return True
    if released and load > below + RELEASE_HYSTERESIS:
        return False
    return released
