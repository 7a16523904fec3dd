"""The one place enforcement changes cgroups: every write of a pass goes through a `CgroupExecutor`, which
counts it, contains a refusal (logged, the batch goes on), applies limit changes in the order cgroup v1
accepts, and refuses to write at all while the ledger of originals cannot be saved. A dry run swaps in the
`DryRunExecutor`, which logs what it would do: the decisions are the same, only the executor differs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from agent.ledger import Ledger
from agent.strategies import cpu_quota
from cgroup import CgroupError, CgroupGone, CgroupReader, CgroupWriter, Layout, LimitChange, apply_in_safe_order
from cgroup.files import format_cpuset

log = logging.getLogger("agent.enforcer")


class CgroupExecutor:
    """Writes through a CgroupWriter; `writes`, `errors` and `last_error` are exported as they are."""

    def __init__(self, layout: Layout, reader: CgroupReader, ledger: Ledger) -> None:
        self.reader, self.ledger = reader, ledger
        self.writer = CgroupWriter(layout, reader)
        self.writes = 0
        self.errors = 0
        self.last_error: str | None = None

    def failed(self, what: str, exc: CgroupError) -> None:
        self.errors += 1
        self.last_error = f"{what}: {exc}"
        log.warning("enforcement: %s failed: %s", what, exc)

    def recorded(self, what: str) -> bool:
        """Save the ledger; False (and nothing may be written) when it could not be: a value changed without
        its original on disk could never be put back after a crash."""
        if self.ledger.save():
            return True
        self.errors += 1
        self.last_error = f"{what}: refused, the enforcement ledger could not be saved"
        return False

    def write(self, what: str, fn: Callable[[], Any]) -> bool:
        """One write; False when refused. A vanished cgroup is no failure: there is nothing left to change."""
        try:
            fn()
        except CgroupGone:
            return True
        except CgroupError as exc:
            self.failed(what, exc)
            return False
        self.writes += 1
        return True

    def apply(self, what: str, changes: list[LimitChange]) -> set[str]:
        """Limit changes in the safe order (loosen parents first, tighten children first), each on its own:
        a refused change is logged and the batch goes on, so one stuck cgroup does not leave every other
        offline pod unlimited. Returns the cgroups whose change was refused."""
        failed: set[str] = set()
        if not changes:
            return failed

        def guarded(change: LimitChange) -> LimitChange:
            def run() -> None:
                try:
                    change.apply()
                except CgroupGone:
                    return
                except CgroupError as exc:
                    failed.add(change.cgroup)
                    self.failed(f"{what} ({change.cgroup})", exc)
                    return
                self.writes += 1

            return LimitChange(change.cgroup, change.loosens, run)

        apply_in_safe_order([guarded(c) for c in changes])
        return failed

    def quota_change(self, path: str, quota: int | None, period: int, threshold: float = 0.0) -> LimitChange | None:
        """The change giving `path` this CFS quota; None when it has it (within `threshold`) or is unreadable."""
        try:
            cur = self.reader.cpu_settings(path)
        except CgroupError:
            return None
        if cur.quota_us == quota and cur.period_us == period:
            return None
        if (
            threshold
            and quota is not None
            and cur.quota_us is not None
            and cur.period_us == period
            and abs(quota - cur.quota_us) < threshold * cur.quota_us
        ):
            return None  # not worth a write
        loosens = cpu_quota.cpus(quota, period) >= cpu_quota.cpus(cur.quota_us, cur.period_us)
        return LimitChange(path, loosens, partial(self.writer.set_cpu_quota, path, quota, period))

    def move_cpuset(self, pod: str, current: frozenset[int], pod_cpus: frozenset[int],
                     containers: dict[str, frozenset[int]]) -> bool:  # fmt: skip
        """Pod to the union first, containers to theirs, pod to its own: v1 refuses a child CPU outside its
        parent and a parent that drops a child's CPU, whether the new set grows, shrinks or moves."""
        union = current | pod_cpus
        for cpus in containers.values():
            union |= cpus
        steps = [(pod, union)] if union != current else []
        steps += list(containers.items())
        if pod_cpus != union:
            steps.append((pod, pod_cpus))
        ok = True
        for path, cpus in steps:
            what = f"set cpuset of {path} to {format_cpuset(cpus)}"
            ok &= self.write(what, partial(self.writer.set_cpuset, path, cpus))
        return ok


class DryRunExecutor(CgroupExecutor):
    """Decides nothing differently and writes nothing: each write is logged and counts as done."""

    def recorded(self, what: str) -> bool:
        return True  # the dry run's ledger lives in memory

    def write(self, what: str, fn: Callable[[], Any]) -> bool:
        log.debug("dry-run: would %s", what)
        return True

    def apply(self, what: str, changes: list[LimitChange]) -> set[str]:
        if changes:
            log.debug("dry-run: would %s (%d cgroups)", what, len(changes))
        return set()
