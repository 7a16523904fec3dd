"""Putting back what Colo changed on a pod, part by part (baseline, CFS quotas, cpuset, memory.high), from
its ledger entry. The executor runs these steps for `Restore` actions: CFS quotas as limit changes in its
safe-order batch, every other part through `restore_part`. Adding a part: one step in `_steps`."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

from agent.actions import Part
from agent.ledger import Ledger, Touched
from agent.originals import Originals
from cgroup import CgroupError, CgroupGone, CgroupReader, CgroupWriter, Layout, LimitChange, parent_cgroup
from cgroup.files import parse_cpuset


class Writes(Protocol):
    """What the restore steps write through: the executor's guarded, counted writes (a protocol, so this
    module does not import the executor that runs it)."""

    @property
    def writer(self) -> CgroupWriter: ...

    def write(self, what: str, fn: Callable[[], Any]) -> bool: ...

    def quota_change(self, path: str, quota: int | None, period: int, threshold: float = 0.0) -> LimitChange | None: ...

    def move_cpuset(self, pod: str, current: frozenset[int], pod_cpus: frozenset[int],
                    containers: dict[str, frozenset[int]]) -> bool: ...  # fmt: skip


def _depth(cgroup: str) -> int:
    return cgroup.rstrip("/").count("/")


def _forget_baseline(entry: Touched) -> None:
    entry.baseline = False  # cpu.idle is cleared whatever the entry says: nothing else to forget


def _forget_cpuset(entry: Touched) -> None:
    entry.cpuset, entry.container_cpusets = None, {}


def _forget_memory_high(entry: Touched) -> None:
    entry.memory_high, entry.memory_high_before = False, None


def _forget_burst(entry: Touched) -> None:
    entry.burst = {}


def _forget_memory_qos(entry: Touched) -> None:
    entry.memory_qos = {}


class Restorer:
    def __init__(
        self,
        layout: Layout,
        reader: CgroupReader,
        ledger: Ledger,
        executor: Writes,
        originals: Originals,
        host_root: str,
    ) -> None:
        self.layout, self.reader, self.ledger = layout, reader, ledger
        self.executor, self.originals, self.host_root = executor, originals, host_root
        # (cgroup, memory file) a strategy asks a value of in this pass (set by the executor): not put back
        self.asked_files: frozenset[tuple[str, str]] = frozenset()
        # part -> (put it back, then make the entry forget it)
        self._steps: dict[str, tuple[Callable[[Touched], bool], Callable[[Touched], None]]] = {
            "baseline": (self.baseline, _forget_baseline),
            "cpuset": (self.cpuset, _forget_cpuset),
            "memory_high": (self.memory_high, _forget_memory_high),
            "burst": (self.burst, _forget_burst),
            "memory_qos": (lambda e: self.memory_qos(e.memory_qos), _forget_memory_qos),
        }

    def quota_changes(self, entry: Touched) -> list[LimitChange]:
        """Back to the recorded quotas; a container that is gone has nothing to restore."""
        changes = [self.executor.quota_change(entry.cgroup, entry.quota_us, entry.period_us)]
        for path, own in entry.containers.items():
            changes.append(self.executor.quota_change(path, own, entry.container_periods.get(path, entry.period_us)))
        return [c for c in changes if c is not None]

    def baseline(self, entry: Touched) -> bool:
        cg, w = entry.cgroup, self.executor.writer
        try:
            idle = self.reader.cpu_settings(cg).idle
        except CgroupGone:
            return True
        except CgroupError:
            idle = True  # unknown: clear it anyway
        ok = True
        if idle:  # whatever the ledger says (kubelet never sets it); a SCHED_IDLE group refuses weight changes
            ok &= self.executor.write(f"clear cpu.idle on {cg}", partial(w.set_cpu_idle, cg, False))
        if self.layout.is_v2 and entry.weight is not None:
            ok &= self.executor.write(f"restore cpu.weight of {cg}", partial(w.set_cpu_weight, cg, entry.weight))
        else:
            ok &= self.executor.write(f"restore cpu.shares of {cg}", partial(w.set_cpu_shares, cg, entry.shares))
        # kubelet's values, shallow cgroups first (the write covers descendants; deeper records follow). Back to
        # them needs no CAP_SYS_RESOURCE: the runtime set each process's floor to that very value. Best effort:
        # a refusal is logged but does not keep the entry (a retry would be refused again, every pass).
        self.originals.record_oom(entry)  # processes started since the last pass still have kubelet's value
        proc = os.path.join(self.host_root, "proc")
        for path, score in sorted(entry.oom_score_adj.items(), key=lambda kv: _depth(kv[0])):
            self.executor.write(
                f"restore oom_score_adj {score} in {path}", partial(w.set_oom_score_adj, path, score, proc_root=proc)
            )
        return ok

    def cpuset(self, entry: Touched) -> bool:
        try:
            current = self.reader.cpuset(entry.cgroup)
            available = self.reader.cpuset(parent_cgroup(entry.cgroup), effective=True)
        except CgroupGone:
            return True
        except CgroupError:
            return False

        def recorded(text: str | None, fallback: frozenset[int]) -> frozenset[int]:
            # v2 pods usually inherit ("" in cpuset.cpus), which the writer cannot write back: the parent's
            cpus = parse_cpuset("ledger", text.encode()) if text else frozenset()
            return cpus or fallback

        pod_cpus = recorded(entry.cpuset, available)
        containers = {
            path: (recorded(entry.container_cpusets.get(path), pod_cpus) & pod_cpus) or pod_cpus
            for path in entry.containers
            if self.reader.exists(path, "cpuset")
        }
        return self.executor.move_cpuset(entry.cgroup, current, pod_cpus, containers)

    def memory_high(self, entry: Touched) -> bool:
        cg, before, w = entry.cgroup, entry.memory_high_before, self.executor.writer
        if (cg, "high") in self.asked_files:
            return True  # memory QoS asks for it now and holds the same original (agent/recorders.py)
        return self.executor.write(f"restore memory.high of {cg}", partial(w.set_memory_high, cg, before))

    def burst(self, entry: Touched) -> bool:
        """Each cgroup's burst as it was (run before the CFS quota batch: a burst only ever goes down here)."""
        ok, w = True, self.executor.writer
        for cg, before in entry.burst.items():
            try:
                if self.reader.cpu_burst(cg) == before:
                    continue
            except CgroupGone:
                continue
            except CgroupError:
                ok = False
                continue
            ok &= self.executor.write(f"restore the CFS burst of {cg}", partial(w.set_cpu_burst, cg, before))
        return ok

    def memory_qos(self, records: dict[str, dict[str, int | None]]) -> bool:
        """memory.min / low / high of each recorded cgroup as they were."""
        ok, w = True, self.executor.writer
        for cg, record in records.items():
            try:
                now = self.reader.memory_protection(cg)
            except CgroupGone:
                continue
            except CgroupError:
                ok = False
                continue
            held = {"min": now.min_bytes, "low": now.low_bytes, "high": now.high_bytes}
            for name, before in record.items():
                if held.get(name) == before or (cg, name) in self.asked_files:
                    continue
                if name == "high":
                    write = partial(w.set_memory_high, cg, before)
                else:
                    write = partial(w.set_memory_min if name == "min" else w.set_memory_low, cg, before or 0)
                ok &= self.executor.write(f"restore memory.{name} of {cg}", write)
        return ok

    def shared_memory(self, asked: set[str]) -> None:
        """The cgroups above pods whose protection online QoS changed and no action asks a value of now."""
        for cg in [cg for cg in self.ledger.shared if cg not in asked]:
            if self.memory_qos({cg: self.ledger.shared[cg]}):
                del self.ledger.shared[cg]
                self.ledger.changed()

    def restore_part(self, entry: Touched, part: Part) -> bool:
        """Put one part back (CFS quotas go through `quota_changes`, in the executor's safe-order batch);
        the entry forgets the part once it is back."""
        step = self._steps.get(part)
        if step is None:
            return True  # nothing recorded to put back
        restore, forget = step
        if not restore(entry):
            return False
        forget(entry)
        self.ledger.changed()
        return True

    def forget(self, entry: Touched) -> None:
        """Close the descriptors restore opened on a pod the sampler no longer reads (it left the API before
        its cgroup went, kubelet's usual order): each one would keep the removed cgroup alive in the kernel."""
        for path in (entry.cgroup, *entry.containers):
            self.reader.forget(path)
