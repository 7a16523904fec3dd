"""What a strategy asks for: cgroup actions as plain values, applied by the one executor (agent/enforce/executor.py).

A strategy is `plan(state, recorded) -> Plan`: a pure function of the pass's NodeState and of what the ledger
recorded (the originals, and what the strategy itself remembered from its previous pass). It reads no file
and writes none; the executor compares each desired value with what the cgroup holds, skips what already
holds, records originals before the first write of a part, refuses every write when the record cannot be
saved, and applies limit changes in the order cgroup v1 accepts. Dry run swaps the executor, never a plan.

Every write is a `Knob`: it says which file it asks a value of, how to read and compare it (`probe`, or
`prepare` for a knob whose write is more than one plain write), how to write it, and how two wishes for the
same cgroup in one pass merge (`merge`: the tightest quota, the union of cpusets). What `prepare` finds
(`Found`) says the level the write goes at: a plain write, in the order the actions came, or limit changes
for the executor's safe-order batch (the CFS quota: v1 refuses a child above its parent), written after
the plain writes. A knob on a cgroup no pod owns (`uid` SHARED) may keep what it needs to put that cgroup
back (`record_shared`; the CFS quota keeps a QoS tier's period before its cap, `forget_shared` once it is
uncapped). `part` names the ledger record the original goes to (agent/enforce/parts/registry.py); a part
protecting "own" limits is never recorded nor put back. `Restore` puts back what the ledger recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Literal, Protocol, TypeVar

from agent.enforce.ledger import Touched
from cgroup import CgroupReader, CgroupWriter, CpuSettings, Layout, LimitChange, shares_to_weight

#: The name of a registered part (agent/enforce/parts/registry.py): the ledger record a write's original goes to.
Part = str
#: The `uid` of actions on cgroups no pod owns (QoS tiers, kubepods): a Restore of it puts back those cgroups.
SHARED = ""
#: (what the cgroup holds, whether that is what the action wants, the write)
Probe = tuple[Any, bool, Callable[[], Any]]


class CgroupIO(Protocol):
    """What a knob's probe reads and writes through (the executor)."""

    @property
    def layout(self) -> Layout: ...

    @property
    def reader(self) -> CgroupReader: ...

    @property
    def writer(self) -> CgroupWriter: ...

    @property
    def proc_root(self) -> str: ...

    def cpu_settings(self, cgroup: str) -> CpuSettings:
        """The cgroup's CPU settings to compare a wish with (the executor's may be a few seconds old: see
        agent/enforce/executor.py `ConfirmedSettings`)."""
        ...

    def move_cpuset(
        self, pod: str, current: frozenset[int], pod_cpus: frozenset[int], containers: dict[str, frozenset[int]]
    ) -> bool: ...


class TierRecords(Protocol):
    """What a knob keeps of a cgroup no pod owns (the ledger's QoS tiers: their period before Colo's cap)."""

    def record_tier(self, cgroup: str, period_us: int) -> None: ...

    def drop_tier(self, cgroup: str) -> None: ...


_K = TypeVar("_K", bound="Knob")


class PrepareIO(CgroupIO, Protocol):
    """What a knob's `prepare` reads through beyond a probe's (the executor)."""

    @property
    def tiers(self) -> TierRecords: ...

    def first_write(self, action: _K, current: Any) -> _K:
        """The action as its part adjusts it while the pod's entry does not hold the part yet."""
        ...

    def restarted_quotas(self, containers: Mapping[str, tuple[int | None, int]], pod: CpuSettings) -> list[LimitChange]:
        """The quotas of containers (re)started under a pod quota that holds (agent/enforce/quota_changes.py)."""
        ...

    def quota_change_below(self, path: str, quota: int | None, period: int) -> LimitChange | None:
        """A container's quota change that goes with its pod's (None: it holds, or cannot be read)."""
        ...


@dataclass(slots=True)
class Found:
    """What a knob found in its cgroup and how it is written: `write`, one plain write in the order the
    actions came; `batch`, limit changes for the executor's safe-order batch (after the plain writes);
    `confirms`, the CFS quotas (cgroup, quota, period) the cgroups hold once the batch wrote them."""

    current: Any = None
    write: Callable[[], Any] | None = None
    batch: list[LimitChange] = field(default_factory=list)
    confirms: list[tuple[str, int | None, int]] = field(default_factory=list)


class Knob:
    """A write of one cgroup file (a frozen dataclass with `cgroup`, `part` and `uid` fields)."""

    __slots__ = ()
    cgroup: str
    part: Part
    uid: str

    #: the file it asks a value of (restore does not put back a file a strategy asks for in the pass)
    file: str = ""
    #: its write is several guarded, counted executor writes of its own (a cpuset's move through the union)
    writes_itself: bool = False
    #: it has a `merge` rule (the pass looks for a second wish only then)
    merges: bool = False

    @property
    def puts_back(self) -> bool:
        """It puts back what Colo recorded (a QoS tier uncapped): it needs no new record, and goes when the
        ledger cannot be saved."""
        return False

    def probe(self, io: CgroupIO) -> Probe | None:
        """(current, holds, write); None when it cannot be written now. A CgroupError: unreadable."""
        raise NotImplementedError

    def prepare(self, io: PrepareIO) -> Found | None:
        """What the executor writes; None when it holds or cannot be written now. A CgroupError: unreadable.
        A plain knob's is its `probe`."""
        probe = self.probe(io)
        if probe is None or probe[1]:
            return None
        return Found(probe[0], probe[2])

    def merge(self, other: Any) -> Any:
        """The one write of two wishes for the same file of the same cgroup in a pass; None: both go."""
        return None

    def asks(self) -> Iterable[tuple[str, str]]:
        """The (cgroup, file) it asks a value of: restore does not put those back in the same pass."""
        return ((self.cgroup, self.file),)

    def record_shared(self, tiers: TierRecords, current: Any) -> None:
        """Before a write to a cgroup no pod owns (`uid` SHARED): what the knob keeps to put it back."""
        return None

    def forget_shared(self, tiers: TierRecords) -> None:
        """A write that `puts_back` holds (written, or found): what was kept for it goes."""
        return None


@dataclass(frozen=True, slots=True)
class SetCpuQuota(Knob):
    """CFS quota (None: unlimited) at a period; `tolerance` skips a change smaller than that share of the
    current quota. `containers` (cgroup -> (quota, period)) change with it, in the same safe-order batch,
    and are skipped with it. `period_us` 0 with `quota_us` None: unlimited at whatever period the cgroup
    has. With `uid` "" the cgroup is a QoS tier: its period is recorded (`Recorded.tiers`) before a cap,
    dropped once it is uncapped. Two in a pass for one cgroup: the tightest goes (the first on a tie): a
    pod's own limit and suppression may both ask, and suppression works on top of the limit, never looser."""

    cgroup: str
    quota_us: int | None
    period_us: int
    part: Part
    uid: str = ""  # the pod the cgroup belongs to ("" for a QoS tier)
    tolerance: float = 0.0
    containers: Mapping[str, tuple[int | None, int]] = field(default_factory=dict)

    file = "cpu quota"
    merges = True

    @property
    def puts_back(self) -> bool:
        return self.uid == SHARED and self.quota_us is None

    def prepare(self, io: PrepareIO) -> Found | None:
        """Limit changes for the safe-order batch: the pod's (its part may adjust a first write) and its
        containers' with it; while the pod's holds, only containers (re)started without a quota."""
        cur = io.cpu_settings(self.cgroup)
        a = io.first_write(self, cur)
        period = a.period_us or cur.period_us
        change = quota_change(io.writer, a.cgroup, cur, a.quota_us, period, a.tolerance)
        if change is None:
            if a.puts_back:
                a.forget_shared(io.tiers)  # uncapped already: nothing left to put back
            # the containers follow their pod: within its tolerance none is written, but for one without any
            # quota (first seen since: restarted), which gets its own, never above its pod's
            fresh = io.restarted_quotas(a.containers, cur)
            return Found(cur, batch=fresh) if fresh else None
        found = Found(cur, batch=[change], confirms=[(a.cgroup, a.quota_us, period)])
        for path, (quota, own_period) in a.containers.items():
            below = io.quota_change_below(path, quota, own_period)
            if below is not None:
                found.batch.append(below)
                found.confirms.append((path, quota, own_period))
        return found

    def merge(self, other: SetCpuQuota) -> SetCpuQuota:
        return other if cpus(other.quota_us, other.period_us) < cpus(self.quota_us, self.period_us) else self

    def asks(self) -> Iterable[tuple[str, str]]:
        return ((self.cgroup, self.file), *((c, self.file) for c in self.containers))

    def record_shared(self, tiers: TierRecords, current: Any) -> None:
        """A QoS tier's period before Colo's cap (uncapping goes back to it)."""
        if self.quota_us is not None:
            tiers.record_tier(self.cgroup, current.period_us)

    def forget_shared(self, tiers: TierRecords) -> None:
        tiers.drop_tier(self.cgroup)


@dataclass(frozen=True, slots=True)
class SetCpuShares(Knob):
    """v1 cpu.shares; on v2 the executor writes the weight (`weight` when given, else converted)."""

    cgroup: str
    shares: int
    part: Part
    uid: str = ""
    weight: int | None = None

    file = "cpu weight"

    def probe(self, io: CgroupIO) -> Probe | None:
        cur = io.cpu_settings(self.cgroup)
        if cur.idle:  # a SCHED_IDLE group refuses weight changes (and reports the kernel's idle weight)
            return None
        if io.layout.is_v2:
            weight = self.weight or shares_to_weight(self.shares)
            return cur, cur.weight == weight, partial(io.writer.set_cpu_weight, self.cgroup, weight)
        return cur, cur.shares == self.shares, partial(io.writer.set_cpu_shares, self.cgroup, self.shares)


@dataclass(frozen=True, slots=True)
class SetCpuIdle(Knob):
    cgroup: str
    idle: bool
    part: Part
    uid: str = ""

    file = "cpu.idle"

    def probe(self, io: CgroupIO) -> Probe | None:
        idle = io.cpu_settings(self.cgroup).idle  # None: this kernel has no cpu.idle
        return idle, idle is None or idle == self.idle, partial(io.writer.set_cpu_idle, self.cgroup, self.idle)


@dataclass(frozen=True, slots=True)
class SetOomScoreAdj(Knob):
    """oom_score_adj of every process in the cgroup (and its children)."""

    cgroup: str
    score: int
    part: Part
    uid: str = ""

    file = "oom_score_adj"

    def probe(self, io: CgroupIO) -> Probe | None:  # per process, and new processes come: written every time
        return None, False, partial(io.writer.set_oom_score_adj, self.cgroup, self.score, proc_root=io.proc_root)


@dataclass(frozen=True, slots=True)
class SetCpuset(Knob):
    """The pod's cpuset and its containers' (moved through the union, as v1 demands). Two in a pass for one
    cgroup: the union of their CPUs (neither wish is denied a CPU)."""

    cgroup: str
    cpus: frozenset[int]
    part: Part
    uid: str = ""
    containers: Mapping[str, frozenset[int]] = field(default_factory=dict)

    file = "cpuset.cpus"
    writes_itself = True
    merges = True

    def probe(self, io: CgroupIO) -> Probe | None:
        cpus = io.reader.cpuset(self.cgroup)
        write = partial(io.move_cpuset, self.cgroup, cpus, self.cpus, dict(self.containers))
        return cpus, cpus == self.cpus, write

    def merge(self, other: SetCpuset) -> SetCpuset:
        containers = {
            p: self.containers.get(p, frozenset()) | other.containers.get(p, frozenset())
            for p in (*self.containers, *other.containers)
        }
        return replace(self, cpus=self.cpus | other.cpus, containers=containers)


@dataclass(frozen=True, slots=True)
class SetMemoryHigh(Knob):
    """v2 memory.high (None: max)."""

    cgroup: str
    limit: int | None
    part: Part
    uid: str = ""

    file = "memory.high"

    def probe(self, io: CgroupIO) -> Probe | None:
        high = io.reader.memory_high(self.cgroup)
        return high, high == self.limit, partial(io.writer.set_memory_high, self.cgroup, self.limit)


@dataclass(frozen=True, slots=True)
class SetMemoryLimit(Knob):
    """memory.limit_in_bytes (v1) / memory.max (v2); None: unlimited."""

    cgroup: str
    limit: int | None
    part: Part
    uid: str = ""

    file = "memory limit"

    def probe(self, io: CgroupIO) -> Probe | None:
        limit = io.reader.memory_limit(self.cgroup)
        return limit, limit == self.limit, partial(io.writer.set_memory_limit, self.cgroup, self.limit)


@dataclass(frozen=True, slots=True)
class SetMemoryProtection(Knob):
    """v2 memory.min or memory.low (bytes; 0 clears it)."""

    cgroup: str
    kind: Literal["min", "low"]
    value: int
    part: Part
    uid: str = ""

    @property
    def file(self) -> str:  # type: ignore[override]
        return f"memory.{self.kind}"

    def probe(self, io: CgroupIO) -> Probe | None:
        prot = io.reader.memory_protection(self.cgroup)
        held = prot.min_bytes if self.kind == "min" else prot.low_bytes
        setter = io.writer.set_memory_min if self.kind == "min" else io.writer.set_memory_low
        return prot, held == self.value, partial(setter, self.cgroup, self.value)


@dataclass(frozen=True, slots=True)
class SetCpuBurst(Knob):
    """cpu.cfs_burst_us (v1) / cpu.max.burst (v2), in microseconds; never above the quota."""

    cgroup: str
    burst_us: int
    part: Part
    uid: str = ""

    file = "cpu burst"

    def probe(self, io: CgroupIO) -> Probe | None:
        burst = io.reader.cpu_burst(self.cgroup)
        return burst, burst == self.burst_us, partial(io.writer.set_cpu_burst, self.cgroup, self.burst_us)


@dataclass(frozen=True, slots=True)
class Restore:
    """Put back what the ledger recorded for these parts of one pod."""

    uid: str
    parts: frozenset[Part]


#: A strategy's wish: a write (a `Knob`: a CFS quota, a plain write) or a restore.
Action = Knob | Restore


def cpus(quota_us: int | None, period_us: int) -> float:
    """CPUs a CFS quota allows (v1 compares parent and child by this ratio, not by the raw quota)."""
    return float("inf") if quota_us is None or period_us <= 0 else quota_us / period_us


def quota_change(
    writer: CgroupWriter, path: str, cur: CpuSettings, quota: int | None, period: int, threshold: float
) -> LimitChange | None:
    """The change giving `path` this quota; None when it holds (or moves by less than `threshold` of it)."""
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
    loosens = cpus(quota, period) >= cpus(cur.quota_us, cur.period_us)
    return LimitChange(path, loosens, partial(writer.set_cpu_quota, path, quota, period))


def merge_wishes(actions: Sequence[Action]) -> list[Action]:
    """The actions with one write per file of a cgroup, two wishes merged by the knob's rule (the tightest
    quota, the union of cpusets): two writes pulling one file two ways in a pass would be a fight. A winner
    keeps its place; a merged write takes the first wish's."""
    best: dict[tuple[str, str], Any] = {}
    many = False
    for a in actions:
        if isinstance(a, Restore) or not a.merges:
            continue
        key = (a.cgroup, a.file)
        held = best.get(key)
        if held is None:
            best[key] = a
            continue
        merged = held.merge(a)
        if merged is not None:
            best[key], many = merged, True
    if not many:
        return list(actions)
    chosen = {id(a) for a in actions}
    out: list[Action] = []
    placed: set[tuple[str, str]] = set()
    for a in actions:
        if isinstance(a, Restore) or not a.merges:  # no merge rule: every wish is written
            out.append(a)
            continue
        key = (a.cgroup, a.file)
        winner = best[key]
        if winner is a or (id(winner) not in chosen and key not in placed):
            out.append(winner)
            placed.add(key)
    return out


@dataclass(frozen=True, slots=True)
class Recorded:
    """What a plan may know beyond the pass's state: the ledger's originals (read-only), the QoS tiers Colo
    capped, what this strategy remembered from its previous pass (`memo`), and the monotonic time."""

    entries: Mapping[str, Touched]
    tiers: Mapping[str, int]
    memo: Any = None
    now: float = 0.0


class Report:
    """What a strategy reports of a pass: a frozen dataclass of typed fields in the strategy's module.
    `fields()` gives the keys it adds to the node's sections, under their JSON names (a strategy that is not
    active adds none: its registration's `report_defaults` hold theirs); `to_log()` what the stage logs
    once per cause (a pod's malformed annotation, ...)."""

    __slots__ = ()

    def fields(self) -> dict[str, Any]:
        return {}

    def to_log(self) -> Sequence[str]:
        return ()


#: the report of a strategy that reports nothing (one object: plans compare equal)
NO_REPORT = Report()


@dataclass(frozen=True, slots=True)
class Plan:
    """A strategy's answer: the actions, what to remember for its next pass, and what it reports (the
    /api/v1/node section and metrics read `report`, never the strategy's internals)."""

    actions: tuple[Action, ...] = ()
    memo: Any = None
    report: Report = field(default_factory=lambda: NO_REPORT)
    # a ceiling on the offline CPU budget for the strategies after this one in the pass (the run-queue
    # protection's; the CPU policies hold offline pods to the lower of it and their own budget)
    offline_cpu_cap: float | None = None
