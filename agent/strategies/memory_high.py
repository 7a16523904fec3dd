"""memory.high for offline pods (cgroup v2): together they may use what the high memory watermark leaves
after online pods and the system, split in proportion to their working sets, each at least `min_bytes`."""

from __future__ import annotations

from collections.abc import Sequence

from agent.node_state import Usage
from agent.snapshot import PodSample


def plan(memory: Usage, offline: Sequence[PodSample], high_percent: float, min_bytes: int) -> dict[str, int]:
    """memory.high in bytes by offline pod UID."""
    allowance = max(0, int(memory.allocatable * high_percent / 100.0) - int(memory.online) - int(memory.system or 0))
    total = sum(p.memory_working_set_bytes for p in offline) or 1
    return {p.uid: max(min_bytes, allowance * p.memory_working_set_bytes // total) for p in offline}
