"""The window names the agent computes and serves, and the crane-named node keys built from them."""

from __future__ import annotations

#: Every window of a series, in the agent's order (see agent.windows.store for their definitions).
WINDOW_NAMES: tuple[str, ...] = (
    "avg_1m",
    "avg_5m",
    "max_avg_1h",
    "max_avg_1d",
    "p50_5m",
    "p90_5m",
    "p95_5m",
    "p99_5m",
    "p50_1h",
    "p90_1h",
    "p95_1h",
    "p99_1h",
)

#: Node window key prefix per resource: crane-scheduler's gauge names, so crane users recognise them.
NODE_WINDOW_PREFIX: dict[str, str] = {"cpu": "cpu_usage_", "memory": "mem_usage_"}

#: Pod window field per resource: the pod document's own field for the current value, so units match.
POD_WINDOW_FIELD: dict[str, str] = {"cpu": "cpu_cores", "memory": "memory_working_set_bytes"}

#: Every key of /api/v1/node's `windows` object (`cpu_usage_avg_5m`, `mem_usage_max_avg_1h`, ...): the
#: metric names a crane DynamicSchedulerPolicy may sync from Colo.
NODE_WINDOW_KEYS: tuple[str, ...] = tuple(
    prefix + name for prefix in NODE_WINDOW_PREFIX.values() for name in WINDOW_NAMES
)
