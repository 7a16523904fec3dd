"""Carries out a strategy's actions through the enforcer's executor, skipping what already holds: CFS quotas
as one batch in the order cgroup v1 accepts, weights and memory limits one by one. A stand-in until the
strategy registry's executor runs every plan; it knows only the actions the batch strategy plans."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from agent.actions import Action, SetCpuQuota, SetCpuShares, SetMemoryLimit
from agent.executor import CgroupExecutor
from cgroup import CgroupError, Layout, LimitChange
from cgroup.writer import shares_to_weight


def apply(executor: CgroupExecutor, layout: Layout, what: str, actions: Sequence[Action]) -> None:
    reader, writer = executor.reader, executor.writer
    quotas: list[LimitChange] = []
    for a in actions:
        try:
            if isinstance(a, SetCpuQuota):
                change = executor.quota_change(a.cgroup, a.quota_us, a.period_us, a.tolerance)
                if change is not None:
                    quotas.append(change)
            elif isinstance(a, SetCpuShares):
                held = reader.cpu_settings(a.cgroup)
                if held.idle:  # SCHED_IDLE pins the weight (and refuses changes): the baseline's
                    continue
                if layout.is_v2:
                    weight = a.weight if a.weight is not None else shares_to_weight(a.shares)
                    if held.weight != weight:
                        executor.write(f"{what}: cpu.weight {weight} on {a.cgroup}",
                                       partial(writer.set_cpu_weight, a.cgroup, weight))  # fmt: skip
                elif held.shares != a.shares:
                    executor.write(f"{what}: cpu.shares {a.shares} on {a.cgroup}",
                                   partial(writer.set_cpu_shares, a.cgroup, a.shares))  # fmt: skip
            elif isinstance(a, SetMemoryLimit) and reader.memory_limit(a.cgroup) != a.limit:
                executor.write(f"{what}: memory limit {a.limit} on {a.cgroup}",
                               partial(writer.set_memory_limit, a.cgroup, a.limit))  # fmt: skip
        except CgroupError:
            continue  # unreadable or gone: nothing to compare, retried next pass
    executor.apply(what, quotas)
