"""The one place enforcement changes cgroups: the strategies' actions of a pass (agent/enforce/actions.py) go through
`CgroupExecutor.apply`, which

1. reads each cgroup's current value and skips what already holds (a `SetCpuQuota` within its tolerance,
   and then the changes below that cgroup too);
2. makes sure the ledger holds the original of each part of each pod it is about to change (each part's
   `record`, agent/enforce/parts/; a pod's own limits are neither recorded nor restored);
3. saves the ledger, and refuses every write of the pass that changes a value when it cannot (an error is
   counted and `last_error` says why): a value changed without its original on disk could never be put
   back. Putting recorded originals back (`Restore`, a tier's uncap) needs no new record and still goes, and
   so does a pod's own limit (nothing of it is recorded);
4. writes, at the level each knob's `prepare` (agent/enforce/actions.py `Knob`, `Found`) puts them: plain
   writes in the order the actions came (cpusets through the union of old and new CPUs), then the limit
   changes (CFS quotas, the quotas restores put back) in one batch in the order cgroup v1 accepts; two
   wishes for one file were merged first by the knob's rule. A refused write is logged and counted and the
   pass goes on, so one stuck cgroup does not leave every other pod unprotected.

It tests no action type but `Restore`: what a knob keeps of a cgroup no pod owns (a QoS tier's period before
its cap) and whether it puts back what is on record are the knob's to say.

A dry run swaps in `DryRunExecutor`: same reads and records (the ledger lives in memory), no write.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar, cast

from agent.enforce.actions import (
    SHARED,
    Action,
    Found,
    Knob,
    Restore,
    SetCpuIdle,
    SetCpuQuota,
    SetCpuShares,
    TierRecords,
    merge_wishes,
    quota_change,
)
from agent.enforce.ledger import Ledger, Touched
from agent.enforce.originals import Originals
from agent.enforce.parts.registry import PARTS, parts_protecting
from agent.enforce.quota_changes import RestartedContainers
from agent.enforce.restore import Restorer
from agent.snapshot import Snapshot
from cgroup import (
    CgroupError,
    CgroupGone,
    CgroupReader,
    CgroupWriter,
    CpuSettings,
    Layout,
    LimitChange,
    apply_in_safe_order,
)
from cgroup.files import format_cpuset

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a pass's `apply` did: writes made, cgroups whose write was refused, and whether its changes were
    refused because the ledger could not be saved (only restores went)."""

    writes: int = 0
    failed: frozenset[str] = frozenset()
    refused: bool = False


@dataclass(slots=True)
class _Step:
    """One action that does not hold yet: what its knob found and how it is written (a Restore: the recorded
    quotas it puts back, in `found.batch`)."""

    action: Action
    found: Found = field(default_factory=Found)
    entry: Touched | None = None  # Restore: the entry put back


_K = TypeVar("_K", bound=Knob)


#: How long a cgroup's CPU settings, as Colo last read or wrote them, stand for what the cgroup holds. koordlet's
#: resource executor trusts what it wrote for 60 s (`resource-force-update-seconds`); here a file someone else
#: rewrote (kubelet resizing a pod, a human) is seen within 5 s, as often as the baseline checks every
#: process's oom_score_adj. Each cgroup is read again at its own phase of that period (a hash of its path), so
#: the reads spread over the passes instead of coming back together.
REPROBE_SECONDS = 5.0
SETTINGS_KEPT = 8192


class ConfirmedSettings:
    """The CPU settings (quota, period, weight, idle) of the cgroups the executor compares wishes with, as last
    read: a pass reads a cgroup's four files only when its reading is `REPROBE_SECONDS` old or Colo wrote the
    cgroup since (`drop`). Every decision compares with these values, so a wish that holds is still never
    written and one that does not is written at once; only a change made behind Colo's back waits (at most
    the period) to be seen."""

    __slots__ = ("_clock", "_held", "_reader", "_seconds")

    def __init__(self, reader: CgroupReader, clock: Callable[[], float], seconds: float = REPROBE_SECONDS) -> None:
        self._reader, self._clock, self._seconds = reader, clock, seconds
        self._held: dict[str, tuple[float, CpuSettings]] = {}  # cgroup -> (read again from, its settings)

    def get(self, cgroup: str) -> CpuSettings:
        now = self._clock()
        held = self._held.get(cgroup)
        if held is not None and now < held[0]:
            return held[1]
        settings = self._reader.cpu_settings(cgroup)
        if len(self._held) >= SETTINGS_KEPT:  # cgroups never forgotten: a bound, not a leak
            self._held.clear()
        period = self._seconds
        offset = period * (zlib.crc32(cgroup.encode()) & 0xFFFF) / 0x10000  # the cgroup's phase in the period
        self._held[cgroup] = (now + period - (now + offset) % period, settings)  # its next turn, within a period
        return settings

    def wrote_quota(self, cgroup: str, quota: int | None, period: int) -> None:
        """Colo set this quota: the cgroup holds it (its reading keeps its age)."""
        held = self._held.get(cgroup)
        if held is not None:
            self._held[cgroup] = (held[0], dataclasses.replace(held[1], quota_us=quota, period_us=period))

    def drop(self, cgroups: Iterable[str]) -> None:
        """Colo wrote (or tried to write) these: read them again when next asked."""
        for cgroup in cgroups:
            self._held.pop(cgroup, None)

    def clear(self) -> None:
        self._held.clear()

    def __len__(self) -> int:
        return len(self._held)


class CgroupExecutor:
    """Writes through a CgroupWriter; `writes`, `errors` and `last_error` are exported as they are."""

    def __init__(
        self,
        layout: Layout,
        reader: CgroupReader,
        ledger: Ledger,
        originals: Originals,
        host_root: str = "/",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.layout, self.reader, self.ledger, self.originals = layout, reader, ledger, originals
        self.writer = CgroupWriter(layout, reader)
        self.settings = ConfirmedSettings(reader, clock)
        self.proc_root = os.path.join(host_root, "proc")
        self.restorer = Restorer(layout, reader, ledger, self, originals, self.proc_root)
        self.writes = 0
        self.errors = 0
        self.last_error: str | None = None
        self.restarted = RestartedContainers(reader, self.writer)

    # -- the pass --------------------------------------------------------------------------------------
    def apply(self, actions: Sequence[Action], snapshot: Snapshot | None = None) -> Outcome:
        """Carry out one pass's actions (see the module). `snapshot` gives the pods whose ledger entry an
        action may have to create (a part first written to a pod the ledger does not know yet). A pod's
        cgroup tree and its processes are read once in the pass (the baseline's record and write of
        oom_score_adj both need them)."""
        with self.reader.one_procs_reading():
            return self._apply(actions, snapshot)

    def _apply(self, actions: Sequence[Action], snapshot: Snapshot | None) -> Outcome:
        writes = self.writes
        ours = merge_wishes(actions)  # one write per file: suppression on top of a pod's own limit, never looser
        # a value a strategy asks for in this pass wins over putting back a recorded one of the same file
        self.restorer.wished(ours)
        own = parts_protecting("own")
        prepared = [step for a in ours if (step := self._prepare(a)) is not None]
        steps = [s for s in prepared if self._record(s, snapshot, own)]
        # putting back what is on record, and a pod's own limits, need no new record: only those go without it
        refused = not all(_needs_no_record(s, own) for s in steps) and not self.recorded("protect pods")
        if refused:
            steps = [s for s in steps if _needs_no_record(s, own)]
        steps += self._displaced_own_quotas(actions, ours, prepared, steps, own)
        failed: set[str] = set()
        batch: list[LimitChange] = []
        for step in steps:
            a, found = step.action, step.found
            batch += [self._guarded(c, failed) for c in found.batch]
            if isinstance(a, Restore):
                self._restore_parts(step)
            elif found.write is not None:
                if a.writes_itself:
                    found.write()  # each of its writes is counted (and guarded) on its own
                else:
                    self._write_action(a, found.write)
        apply_in_safe_order(batch)
        for step in steps:
            self._confirm(step, failed)
            self._settle(step, failed)
        self.ledger.save()
        return Outcome(self.writes - writes, frozenset(failed), refused)

    def _displaced_own_quotas(
        self,
        actions: Sequence[Action],
        ours: list[Action],
        prepared: list[_Step],
        steps: list[_Step],
        own_parts: frozenset[str],
    ) -> list[_Step]:
        """A pod's own value (a quota) that a tighter wish took the place of, which is not written now (refused,
        or no original of it could be had): the pod's own limit still goes, on every pass until it holds."""
        if len(ours) == len(actions):
            return []  # no wish took another's place (the common pass)
        kept, chosen = {id(s) for s in steps}, {id(a) for a in ours}
        dropped = {
            (s.action.cgroup, s.action.file)
            for s in prepared
            if not isinstance(s.action, Restore) and id(s) not in kept
        }
        own = [a for a in actions if not isinstance(a, Restore) and a.part in own_parts and id(a) not in chosen]
        return [step for a in own if (a.cgroup, a.file) in dropped and (step := self._prepare(a)) is not None]

    def _prepare(self, a: Action) -> _Step | None:
        """The step for an action; None when it holds already, or its cgroup cannot be read."""
        if isinstance(a, Restore):
            if a.uid == SHARED:  # the cgroups above pods: those no action of this pass asks a value of
                for part in a.parts:
                    self.settings.drop(self.restorer.shared(part))  # what it wrote is read again
                return None
            entry = self.ledger.entries.get(a.uid)
            if entry is None:
                return None
            if not self.reader.exists(entry.cgroup):
                self.ledger.drop(a.uid)  # the pod's cgroups are gone: nothing left to put back
                return None
            quotas = any(p in entry.parts and p in PARTS and PARTS[p].quota_batch for p in a.parts)
            asked = self.restorer.asked
            back = [c for c in self.restorer.quota_changes(entry) if (c.cgroup, SetCpuQuota.file) not in asked]
            return _Step(a, Found(batch=back if quotas else []), entry)
        try:
            found = a.prepare(self)
        except CgroupError:
            return None  # unreadable (gone, or no such controller): nothing to compare with, nothing written
        return None if found is None else _Step(a, found)

    # -- what a knob's prepare reads through (agent/enforce/actions.py `PrepareIO`) ------------------------
    @property
    def tiers(self) -> TierRecords:
        return self.ledger

    def first_write(self, action: _K, current: Any) -> _K:
        """The part's adjustment of a first write (quota burst: a first raise never lowers what is there),
        while the pod's entry does not hold the part yet."""
        spec = PARTS.get(action.part)
        if spec is None or spec.first_write is None:
            return action
        entry = self.ledger.entries.get(action.uid)
        if entry is not None and action.part in entry.parts:
            return action
        return cast(_K, spec.first_write(action, current))

    def restarted_quotas(self, containers: Mapping[str, tuple[int | None, int]], pod: CpuSettings) -> list[LimitChange]:
        return self.restarted.changes(containers, pod)

    def _record(self, step: _Step, snapshot: Snapshot | None, own: frozenset[str]) -> bool:
        """The original of the step's part in the ledger (in memory; saved before any write); False when it
        cannot be had, and the step is dropped."""
        a = step.action
        if isinstance(a, Restore) or a.part in own:
            return True
        spec, current = PARTS.get(a.part), step.found.current
        if a.uid == SHARED:
            a.record_shared(self.ledger, current)
            shared = spec.record_shared if spec is not None else None
            if shared is not None and shared(self.ledger.shared.setdefault(a.part, {}), a, current):
                self.ledger.changed()
            return True
        entry = self.ledger.entries.get(a.uid)
        if entry is None:
            pod = snapshot.pods.get(a.uid) if snapshot is not None else None
            entry = self.originals.entry(pod, snapshot) if pod is not None and snapshot is not None else None
        if entry is None or spec is None or spec.record is None:
            self.errors += 1
            self.last_error = f"{_describe(a)}: refused, no original of its {a.part} can be recorded"
            log.warning("enforcement: %s", self.last_error)
            return False
        if spec.record(self.originals, entry, a, current):
            self.ledger.changed()
        return True

    def _restore_parts(self, step: _Step) -> None:
        """A Restore's parts other than the CFS quotas (those are in the batch), in the registry's order."""
        assert isinstance(step.action, Restore) and step.entry is not None
        for part, spec in PARTS.items():
            if part in step.action.parts and part in step.entry.parts and not spec.quota_batch:
                self.restorer.restore_part(step.entry, part)

    def quota_change_below(self, path: str, quota: int | None, period: int) -> LimitChange | None:
        """A container's quota change that goes with its pod's, compared with its confirmed settings."""
        try:
            cur = self.settings.get(path)
        except CgroupError:
            return None
        return quota_change(self.writer, path, cur, quota, period, 0.0)

    def _confirm(self, step: _Step, failed: set[str]) -> None:
        """After the writes: a quota written is what the cgroup holds now; whatever else the step wrote (or
        failed to) is read again when next asked."""
        confirmed: set[str] = set()
        for cgroup, quota, period in step.found.confirms:
            if cgroup not in failed:
                self._wrote_quota(cgroup, quota, period)
                confirmed.add(cgroup)
        self.settings.drop(cgroup for cgroup in _written(step) if cgroup not in confirmed)

    def _wrote_quota(self, cgroup: str, quota: int | None, period: int) -> None:
        self.settings.wrote_quota(cgroup, quota, period)

    def _settle(self, step: _Step, failed: set[str]) -> None:
        """After the writes: a restored quota is forgotten, an entry holding nothing more goes, a tier whose
        cap was lifted is dropped."""
        a = step.action
        if isinstance(a, Restore):
            entry = step.entry
            assert entry is not None  # a Restore's step always has its entry
            # back to the recorded quotas, or to those this pass asked for: kept while a write to any of the
            # pod's cgroups failed (the next pass puts it back again; a part is never forgotten unrestored)
            if not {entry.cgroup, *entry.containers} & failed:
                for part in [p for p in a.parts if p in entry.parts and p in PARTS and PARTS[p].quota_batch]:
                    del entry.parts[part]
                    self.ledger.changed()
            if not any(part in PARTS for part in entry.parts):
                self.ledger.drop(entry.uid)
        elif a.puts_back and a.cgroup not in failed:
            a.forget_shared(self.ledger)

    def forget(self, entry: Touched) -> None:
        """A pod that left: its readings and the descriptors restore opened go."""
        self.settings.drop((entry.cgroup, *entry.containers))
        self.restorer.forget(entry)

    def cpu_settings(self, cgroup: str) -> CpuSettings:
        """What a knob compares with: the settings as last confirmed (`ConfirmedSettings`)."""
        return self.settings.get(cgroup)

    # -- the writes ------------------------------------------------------------------------------------
    def failed(self, what: str, exc: CgroupError) -> None:
        self.errors += 1
        self.last_error = f"{what}: {exc}"
        log.warning("enforcement: %s failed: %s", what, exc)

    def recorded(self, what: str) -> bool:
        """Save the ledger; False (and nothing may be written) when it could not be."""
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

    def _write_action(self, action: Action, fn: Callable[[], Any]) -> bool:
        """`write`, the action described only when it fails (most passes write only what is due: each
        process's oom_score_adj, every few seconds)."""
        try:
            fn()
        except CgroupGone:
            return True
        except CgroupError as exc:
            self.failed(_describe(action), exc)
            return False
        self.writes += 1
        return True

    def _guarded(self, change: LimitChange, failed: set[str]) -> LimitChange:
        """A change whose refusal is logged and counted, and the batch goes on."""

        def run() -> None:
            try:
                change.apply()
            except CgroupGone:
                return
            except CgroupError as exc:
                failed.add(change.cgroup)
                self.failed(f"set the CFS quota of {change.cgroup}", exc)
                return
            self.writes += 1

        return LimitChange(change.cgroup, change.loosens, run)

    def quota_change(self, path: str, quota: int | None, period: int, threshold: float = 0.0) -> LimitChange | None:
        """The change giving `path` this CFS quota; None when it has it (within `threshold`) or is unreadable."""
        try:
            cur = self.reader.cpu_settings(path)
        except CgroupError:
            return None
        return quota_change(self.writer, path, cur, quota, period, threshold)

    def move_cpuset(
        self, pod: str, current: frozenset[int], pod_cpus: frozenset[int], containers: dict[str, frozenset[int]]
    ) -> bool:
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


#: the files `ConfirmedSettings` holds, as the knobs writing them name them
CPU_SETTINGS_FILES = frozenset({SetCpuQuota.file, SetCpuShares.file, SetCpuIdle.file})


def _written(step: _Step) -> Iterable[str]:
    """The cgroups whose CPU settings a step writes (or may have: a refused write leaves what it found, or
    not); a restore may put any of them back."""
    a = step.action
    if isinstance(a, Restore):
        if step.entry is not None:
            yield step.entry.cgroup
            yield from step.entry.containers
        return
    if a.file in CPU_SETTINGS_FILES:
        yield a.cgroup
    for change in step.found.batch:
        yield change.cgroup


def _puts_back(step: _Step) -> bool:
    a = step.action
    return isinstance(a, Restore) or a.puts_back


def _needs_no_record(step: _Step, own: frozenset[str]) -> bool:
    """A write that goes on when the ledger cannot be saved: putting back what is on record, or a pod's own
    limit (never recorded, never put back, written on every pass until it holds)."""
    return _puts_back(step) or (not isinstance(step.action, Restore) and step.action.part in own)


def _describe(a: Action) -> str:
    """The action in a log line or `last_error`."""
    values = (
        f"{f.name}={getattr(a, f.name)}" for f in dataclasses.fields(cast(Any, a)) if f.name not in ("part", "uid")
    )
    return f"{type(a).__name__} {' '.join(values)}"


class DryRunExecutor(CgroupExecutor):
    """Decides nothing differently and writes nothing: each write is logged and counts as done."""

    def recorded(self, what: str) -> bool:
        return True  # the dry run's ledger lives in memory

    def write(self, what: str, fn: Callable[[], Any]) -> bool:
        log.debug("dry-run: would %s", what)
        return True

    def _write_action(self, action: Action, fn: Callable[[], Any]) -> bool:
        return self.write(_describe(action), fn)

    def _wrote_quota(self, cgroup: str, quota: int | None, period: int) -> None:
        self.settings.drop((cgroup,))  # nothing was written: the cgroup holds what it held

    def _guarded(self, change: LimitChange, failed: set[str]) -> LimitChange:
        def log_only() -> None:
            log.debug("dry-run: would set the CFS quota of %s", change.cgroup)

        return LimitChange(change.cgroup, change.loosens, log_only)
