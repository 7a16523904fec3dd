"""Putting back what Colo changed, part by part, from the ledger: each part's own `restore` step
(agent/enforce/parts/), run by the executor for `Restore` actions; the CFS quotas (parts with `quota_batch`) as
limit changes in the executor's safe-order batch (`quota_changes`). The `Restorer` is the narrow view of
the executor a part's restore step writes through (agent/enforce/parts/spec.py `RestoreIO`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from agent.enforce.actions import Action, Restore
from agent.enforce.ledger import Ledger, Touched
from agent.enforce.originals import Originals
from agent.enforce.parts.registry import PARTS
from cgroup import CgroupReader, CgroupWriter, CpuSettings, Layout, LimitChange


class Writes(Protocol):
    """What the restore steps write through: the executor's guarded, counted writes (a protocol, so this
    module does not import the executor that runs it)."""

    @property
    def writer(self) -> CgroupWriter: ...

    def write(self, what: str, fn: Callable[[], Any]) -> bool: ...

    def quota_change(self, path: str, quota: int | None, period: int, threshold: float = 0.0) -> LimitChange | None: ...

    def move_cpuset(
        self, pod: str, current: frozenset[int], pod_cpus: frozenset[int], containers: dict[str, frozenset[int]]
    ) -> bool: ...


class Restorer:
    def __init__(
        self,
        layout: Layout,
        reader: CgroupReader,
        ledger: Ledger,
        executor: Writes,
        originals: Originals,
        proc_root: str,
    ) -> None:
        self.layout, self.reader, self.ledger = layout, reader, ledger
        self.executor, self.originals, self.proc_root = executor, originals, proc_root
        self._wishes: Sequence[Action] = ()
        self._asked: frozenset[tuple[str, str]] | None = frozenset()

    def wished(self, actions: Sequence[Action]) -> None:
        """The actions of this pass (set by the executor before it prepares them)."""
        self._wishes, self._asked = actions, None

    @property
    def asked(self) -> frozenset[tuple[str, str]]:
        """(cgroup, file) a strategy asks a value of in this pass: not put back (read only by a restore)."""
        if self._asked is None:
            self._asked = frozenset(asked for a in self._wishes if not isinstance(a, Restore) for asked in a.asks())
        return self._asked

    # -- RestoreIO -------------------------------------------------------------------------------------
    @property
    def writer(self) -> CgroupWriter:
        return self.executor.writer

    def write(self, what: str, fn: Callable[[], Any]) -> bool:
        return self.executor.write(what, fn)

    def cpu_settings(self, cgroup: str) -> CpuSettings:
        """Putting back compares with what the cgroup holds now."""
        return self.reader.cpu_settings(cgroup)

    def move_cpuset(
        self, pod: str, current: frozenset[int], pod_cpus: frozenset[int], containers: dict[str, frozenset[int]]
    ) -> bool:
        return self.executor.move_cpuset(pod, current, pod_cpus, containers)

    def record_oom(self, entry: Touched, scores: dict[str, int]) -> None:
        self.originals.record_oom(entry, scores)

    # -- the steps -------------------------------------------------------------------------------------
    def quota_changes(self, entry: Touched) -> list[LimitChange]:
        """Back to the recorded quotas; a container that is gone has nothing to restore."""
        changes = [self.executor.quota_change(entry.cgroup, entry.quota_us, entry.period_us)]
        for path, own in entry.containers.items():
            changes.append(self.executor.quota_change(path, own, entry.container_periods.get(path, entry.period_us)))
        return [c for c in changes if c is not None]

    def restore_part(self, entry: Touched, part: str) -> bool:
        """Put one part back (CFS quotas go through `quota_changes`, in the executor's safe-order batch);
        the entry forgets the part once it is back."""
        spec = PARTS.get(part)
        if spec is None or spec.restore is None or part not in entry.parts:
            return True  # nothing recorded to put back
        if not spec.restore(self, entry):
            return False
        del entry.parts[part]
        self.ledger.changed()
        return True

    def shared(self, part: str) -> list[str]:
        """The cgroups above pods whose `part` Colo changed and no action of this pass asks a value of: put
        back (returned: those it wrote to)."""
        spec, records = PARTS.get(part), self.ledger.shared.get(part)
        if spec is None or spec.restore_shared is None or not records:
            return []
        asked = {cg for cg, file in self.asked if file in spec.shared_files}
        back = [cg for cg in records if cg not in asked]
        for cg in back:
            if spec.restore_shared(self, cg, records[cg]):
                del records[cg]
                self.ledger.changed()
        if not records:
            del self.ledger.shared[part]
            self.ledger.changed()
        return back

    def forget(self, entry: Touched) -> None:
        """Close the descriptors restore opened on a pod the sampler no longer reads (it left the API before
        its cgroup went, kubelet's usual order): each one would keep the removed cgroup alive in the kernel."""
        for path in (entry.cgroup, *entry.containers):
            self.reader.forget(path)
