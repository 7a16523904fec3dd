"""Carries out the online QoS strategies' plans (CFS burst, quota burst, memory QoS) through the one
`CgroupExecutor` and a ledger, as enforcement does for offline pods: each desired value is compared with
what the cgroup holds (what holds is skipped), the value found is recorded before Colo's first write of that
file, the ledger is saved before any write (no write at all when it cannot be), and the writes go in the
order the kernel accepts:

    bursts that go down  →  CFS quotas (loosen parents first, tighten children first)  →  bursts that go up

(the kernel refuses a quota below the burst and a burst above the quota). `Restore` actions put the
recorded values back through the same path; an entry goes when nothing of it is left to restore.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from agent.actions import Action, Part, Restore, SetCpuBurst, SetCpuQuota, SetMemoryHigh, SetMemoryProtection
from agent.executor import CgroupExecutor
from agent.ledger import Ledger, Touched
from agent.snapshot import Snapshot
from agent.strategies.memory_qos import SHARED
from agent.strategies.online import PERIOD_US
from cgroup import CgroupError, CgroupGone, CgroupReader, LimitChange, weight_to_shares

log = logging.getLogger(__name__)

QOS_PARTS: frozenset[Part] = frozenset({"burst", "quota_burst", "memory_qos"})
_FILES = ("min", "low", "high")


@dataclass
class _Pass:
    """The writes of one pass, gathered before any is made; `done` runs after each succeeded."""

    lower_bursts: list[tuple[str, str, int, Callable[[], None]]] = field(default_factory=list)
    raise_bursts: list[tuple[str, str, int, Callable[[], None]]] = field(default_factory=list)
    quotas: list[tuple[LimitChange, Callable[[], None]]] = field(default_factory=list)
    memory: list[tuple[str, Callable[[], None], Callable[[], None]]] = field(default_factory=list)
    quota_cgroups: dict[str, set[str]] = field(default_factory=dict)  # uid -> cgroups given a quota this pass
    quota_failed: set[str] = field(default_factory=set)
    after: list[Callable[[], None]] = field(default_factory=list)  # once every write of the pass was made

    def burst(self, cg: str, what: str, current: int, target: int, done: Callable[[], None]) -> None:
        (self.lower_bursts if target < current else self.raise_bursts).append((cg, what, target, done))


def _noop() -> None:
    return None


def _after(n: int, fn: Callable[[], None]) -> Callable[[], None]:
    """Calls `fn` once the returned callable was called `n` times: a record goes when all its writes did."""
    left = [n]

    def step() -> None:
        left[0] -= 1
        if left[0] == 0:
            fn()

    return step


class QosExecutor:
    def __init__(self, reader: CgroupReader, ledger: Ledger, executor: CgroupExecutor) -> None:
        self.reader, self.ledger, self.executor = reader, ledger, executor

    # -- the ledger ----------------------------------------------------------------------------------
    def _entry(self, uid: str, snap: Snapshot | None) -> Touched | None:
        """The pod's entry, created at its first write from what its cgroup holds (the pod's own quota)."""
        entry = self.ledger.entries.get(uid)
        if entry is not None or snap is None:
            return entry
        pod = snap.pods.get(uid)
        if pod is None:
            return None
        try:
            s = self.reader.cpu_settings(pod.cgroup)
        except CgroupError:
            return None
        shares = s.shares if s.shares is not None else weight_to_shares(s.weight or 100)
        entry = Touched(uid, pod.cgroup, shares, s.quota_us, s.period_us, weight=s.weight)
        self.ledger.record(entry)
        return entry

    def _memory_now(self, cg: str) -> dict[str, int | None] | None:
        try:
            m = self.reader.memory_protection(cg)
        except CgroupError:
            return None
        return {"min": m.min_bytes, "low": m.low_bytes, "high": m.high_bytes}

    # -- planning the writes -------------------------------------------------------------------------
    def _burst(self, a: SetCpuBurst, snap: Snapshot | None, p: _Pass) -> None:
        try:
            current = self.reader.cpu_burst(a.cgroup)
        except CgroupError:
            return
        if current == a.burst_us:
            return
        entry = self._entry(a.uid, snap)
        if entry is None:
            return
        if a.cgroup not in entry.burst:
            entry.burst[a.cgroup] = current
            self.ledger.changed()
        p.burst(a.cgroup, f"set CFS burst of {a.cgroup} to {a.burst_us} µs", current, a.burst_us, _noop)

    def _quota(self, a: SetCpuQuota, snap: Snapshot | None, p: _Pass) -> None:
        p.quota_cgroups.setdefault(a.uid, set()).add(a.cgroup)
        change = self.executor.quota_change(a.cgroup, a.quota_us, a.period_us)
        if change is None:
            return
        entry = self._entry(a.uid, snap)
        if entry is None:
            return
        try:
            if not entry.quota_burst:  # a new raise: what the cgroups hold now are the pod's own quotas
                pod = self.reader.cpu_settings(entry.cgroup)
                entry.quota_us, entry.period_us = pod.quota_us, pod.period_us
                entry.containers.clear()
                entry.container_periods.clear()
                entry.quota_burst = True
            if a.cgroup != entry.cgroup and a.cgroup not in entry.containers:
                s = self.reader.cpu_settings(a.cgroup)
                entry.containers[a.cgroup], entry.container_periods[a.cgroup] = s.quota_us, s.period_us
        except CgroupError:
            return
        finally:
            self.ledger.changed()
        p.quotas.append((change, _noop))

    def _memory(self, a: SetMemoryProtection | SetMemoryHigh, snap: Snapshot | None, p: _Pass) -> None:
        now = self._memory_now(a.cgroup)
        if now is None:
            return
        name = a.kind if isinstance(a, SetMemoryProtection) else "high"
        value = a.value if isinstance(a, SetMemoryProtection) else a.limit
        if now[name] == value:
            return
        if a.uid == SHARED:
            record = self.ledger.shared.setdefault(a.cgroup, {})
        else:
            entry = self._entry(a.uid, snap)
            if entry is None:
                return
            record = entry.memory_qos.setdefault(a.cgroup, {})
        if name not in record:
            record[name] = now[name]
            self.ledger.changed()
        p.memory.append((f"set memory.{name} of {a.cgroup} to {value}", self._memory_write(a.cgroup, name, value),
                         _noop))  # fmt: skip

    def _memory_write(self, cg: str, name: str, value: int | None) -> Callable[[], None]:
        w = self.executor.writer
        if name == "high":
            return partial(w.set_memory_high, cg, value)
        assert value is not None
        return partial(w.set_memory_min if name == "min" else w.set_memory_low, cg, value)

    # -- planning the restores -----------------------------------------------------------------------
    def _restore(self, entry: Touched, parts: Iterable[str], p: _Pass) -> None:
        parts = set(parts)
        if "burst" in parts:
            for cg, before in list(entry.burst.items()):
                try:
                    current = self.reader.cpu_burst(cg)
                except CgroupGone:
                    current = before
                except CgroupError:
                    continue
                done = partial(self._forget_burst, entry, cg)
                if current == before:
                    done()
                else:
                    p.burst(cg, f"restore CFS burst of {cg} to {before} µs", current, before, done)
        if "quota_burst" in parts and entry.quota_burst and entry.uid in p.quota_cgroups:
            # the plan gives the pod its own quotas from its current spec (a resize since the raise wins over
            # what was recorded): the part is back once those hold
            cgroups = p.quota_cgroups[entry.uid]
            p.after.append(lambda: None if cgroups & p.quota_failed else self._quota_restored(entry))
        elif "quota_burst" in parts and entry.quota_burst:
            changes = [self.executor.quota_change(entry.cgroup, entry.quota_us, entry.period_us)]
            for cg, own in entry.containers.items():
                changes.append(self.executor.quota_change(cg, own, entry.container_periods.get(cg, PERIOD_US)))
            todo = [c for c in changes if c is not None]
            restored = partial(self._quota_restored, entry)
            if not todo:
                restored()
            step = _after(len(todo), restored)
            p.quotas.extend((c, step) for c in todo)
        if "memory_qos" in parts:
            for cg, record in list(entry.memory_qos.items()):
                self._restore_memory(cg, record, p, partial(self._forget_memory, entry.memory_qos, cg))

    def _restore_memory(self, cg: str, record: dict[str, int | None], p: _Pass, done: Callable[[], None]) -> None:
        now = self._memory_now(cg)
        todo = [(n, v) for n, v in record.items() if now is not None and now.get(n) != v]
        if not todo:
            done()
            return
        step = _after(len(todo), done)
        for name, value in todo:
            p.memory.append((f"restore memory.{name} of {cg}", self._memory_write(cg, name, value), step))

    def _forget_burst(self, entry: Touched, cg: str) -> None:
        entry.burst.pop(cg, None)
        self.ledger.changed()

    def _forget_memory(self, records: dict[str, Any], cg: str) -> None:
        records.pop(cg, None)
        self.ledger.changed()

    def _quota_restored(self, entry: Touched) -> None:
        entry.quota_burst = False
        self.ledger.changed()

    # -- one pass ------------------------------------------------------------------------------------
    def run(self, actions: Sequence[Action], snap: Snapshot | None) -> None:
        """Record, save, then write: every action of the pass, in the kernel's order."""
        p = _Pass()
        targeted: set[str] = set()
        restores: list[Restore] = []
        for a in actions:
            if isinstance(a, SetCpuBurst):
                self._burst(a, snap, p)
            elif isinstance(a, SetCpuQuota):
                self._quota(a, snap, p)
            elif isinstance(a, SetMemoryProtection | SetMemoryHigh):
                targeted.add(a.cgroup)
                self._memory(a, snap, p)
            elif isinstance(a, Restore):
                restores.append(a)
        for r in restores:
            if r.uid == SHARED:
                for cg, record in list(self.ledger.shared.items()):
                    if cg not in targeted:
                        self._restore_memory(cg, record, p, partial(self._forget_memory, self.ledger.shared, cg))
                continue
            entry = self.ledger.entries.get(r.uid)
            if entry is None:
                continue
            if not self.reader.exists(entry.cgroup):  # the pod is gone: nothing left to put back
                self.ledger.drop(r.uid)
                for cg in (entry.cgroup, *entry.containers, *entry.burst, *entry.memory_qos):
                    self.reader.forget(cg)
                continue
            self._restore(entry, r.parts, p)
        if not self.executor.recorded("online QoS"):
            return
        self._write(p)
        for uid, entry in list(self.ledger.entries.items()):
            if not (entry.burst or entry.quota_burst or entry.memory_qos):
                self.ledger.drop(uid)
        self.ledger.save()

    def _write(self, p: _Pass) -> None:
        w = self.executor.writer
        for cg, what, target, done in p.lower_bursts:
            if self.executor.write(what, partial(w.set_cpu_burst, cg, target)):
                done()
        if p.quotas:
            p.quota_failed = self.executor.apply("online QoS CFS quotas", [c for c, _ in p.quotas])
            for change, done in p.quotas:
                if change.cgroup not in p.quota_failed:
                    done()
        for cg, what, target, done in p.raise_bursts:
            if self.executor.write(what, partial(w.set_cpu_burst, cg, target)):
                done()
        for what, write, done in p.memory:
            if self.executor.write(what, write):
                done()
        for fn in p.after:
            fn()

    def restore_all(self) -> None:
        """Shutdown: every recorded value back (pods and the cgroups above them)."""
        actions: list[Action] = [Restore(uid, QOS_PARTS) for uid in self.ledger.entries]
        actions.append(Restore(SHARED, frozenset({"memory_qos"})))
        self.run(actions, None)
