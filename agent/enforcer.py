"""Protects online pods: offline pods get the smallest CPU weight, SCHED_IDLE, OOM preference, a CPU budget
(CFS quota or a cpuset) and, on cgroup v2, memory.high. Online pods are never written to.

Runs in the sampling thread on every snapshot; only cgroup writes, no API calls. Before its first write to a
pod it records, in a ledger, the values it found there (read from the cgroups, not derived from the pod
spec, which knows nothing of overhead, sidecars, in-place resizes or kubelet's CFS period), and puts them
back at shutdown, when a feature is switched off, when a pod stops being offline, while the node is quiet
enough to release offline pods, and after a restart (the ledger is a file). `dry_run` computes, logs and
exports every decision and writes nothing, the ledger file included.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from agent.config import EnforcementConfig
from agent.cpu_budget import OfflineCpu, exclusive_cpus, offline_budget, pick_cpuset, split_budget
from agent.ledger import Ledger, Touched
from agent.node_state import NodeState, node_state
from agent.snapshot import PodSample, Snapshot
from cgroup import (
    CgroupError,
    CgroupGone,
    CgroupReader,
    CgroupWriter,
    Layout,
    LimitChange,
    PathModel,
    apply_in_safe_order,
    shares_to_weight,
    weight_to_shares,
)
from cgroup.files import format_cpuset, parse_cpuset

log = logging.getLogger(__name__)
OFFLINE_SHARES = 2  # v2: weight 1
RELEASE_HYSTERESIS = 0.1  # released pods are suppressed again above cpu_release_below + this
ALL_PARTS = frozenset({"baseline", "quota", "cpuset", "memory"})
# kubelet's oom_score_adj (pkg/kubelet/qos/policy.go)
GUARANTEED_OOM_SCORE_ADJ = -997
BESTEFFORT_OOM_SCORE_ADJ = 1000
KUBELET_CFS_PERIOD_US = 100_000  # kubelet's default cpuCFSQuotaPeriod


def kubelet_shares(request_cores: float) -> int:
    """cpu.shares kubelet gives a pod for its CPU request (2 for none)."""
    return max(2, min(262144, int(request_cores * 1024)))


def kubelet_oom_score_adj(qos: str, memory_request_bytes: int, memory_capacity_bytes: int) -> int:
    """kubelet's oom_score_adj for a pod's containers: the fallback when no process could be read."""
    if qos == "guaranteed":
        return GUARANTEED_OOM_SCORE_ADJ
    if qos == "besteffort" or memory_capacity_bytes <= 0:
        return BESTEFFORT_OOM_SCORE_ADJ
    adj = 1000 - (1000 * memory_request_bytes) // memory_capacity_bytes
    return min(max(1000 + GUARANTEED_OOM_SCORE_ADJ, adj), BESTEFFORT_OOM_SCORE_ADJ - 1)


def kubelet_quota(limit_cores: float | None) -> int | None:
    """The CFS quota kubelet gives a CPU limit over its default period (MilliCPUToQuota); None: no limit."""
    if limit_cores is None or limit_cores <= 0:
        return None
    return max(1000, round(limit_cores * 1000) * KUBELET_CFS_PERIOD_US // 1000)


def _ratio(quota_us: int | None, period_us: int) -> float:
    """CPUs a CFS quota allows (v1 compares parent and child by this ratio, not by the raw quota)."""
    return float("inf") if quota_us is None else quota_us / period_us


def _depth(cgroup: str) -> int:
    return cgroup.rstrip("/").count("/")


def _parent(cgroup: str) -> str:
    return cgroup.rsplit("/", 1)[0] or "/"


class Enforcer:
    name = "enforcement"

    def __init__(
        self,
        layout: Layout,
        model: PathModel,
        reader: CgroupReader,
        config: EnforcementConfig,
        allocatable: Callable[[], tuple[float | None, int | None]],
        *,
        dry_run: bool = False,
        host_root: str = "/",
        memory_high_watermark: Callable[[], float] = lambda: 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.layout, self.model, self.reader, self.config = layout, model, reader, config
        self.memory_high_watermark = memory_high_watermark
        self.writer = CgroupWriter(layout, reader)
        self.allocatable = allocatable
        self.dry_run = dry_run
        self.host_root = host_root
        self.clock = clock
        # dry run: a ledger in memory only; the file (and what it says a previous run changed) stays as it is
        self.ledger = Ledger("" if dry_run else config.ledger_file)
        self.ledger.load()
        self._baseline_at: dict[str, float] = {}
        # exported to the HTTP thread: only ever replaced, never changed in place
        self.budget_cores: float | None = None
        self.released = False
        self.quotas: dict[str, float] = {}
        self.besteffort_cores = 0.0
        self.tier_cap_cores: float | None = None
        self.cpuset: frozenset[int] | None = None
        self.memory_high: dict[str, int] = {}
        self.touched: tuple[str, ...] = tuple(sorted(self.ledger.entries))
        self.memory_status = "v2 memory.high" if layout.is_v2 else "unsupported on cgroup v1: eviction protects memory"
        self.writes = 0
        self.errors = 0
        self.last_error: str | None = None

    # -- writing -------------------------------------------------------------------------------------
    def _failed(self, what: str, exc: CgroupError) -> None:
        self.errors += 1
        self.last_error = f"{what}: {exc}"
        log.warning("enforcement: %s failed: %s", what, exc)

    def _recorded(self, what: str) -> bool:
        """Save the ledger; False (and nothing may be written) when it could not be: a value changed without
        its original on disk could never be put back after a crash."""
        if self.dry_run or self.ledger.save():
            return True
        self.errors += 1
        self.last_error = f"{what}: refused, the enforcement ledger could not be saved"
        return False

    def _write(self, what: str, fn: Callable[[], Any]) -> bool:
        """One write; False when refused. A vanished cgroup is no failure: there is nothing left to change."""
        if self.dry_run:
            log.debug("dry-run: would %s", what)
            return True
        try:
            fn()
        except CgroupGone:
            return True
        except CgroupError as exc:
            self._failed(what, exc)
            return False
        self.writes += 1
        return True

    def _apply(self, what: str, changes: list[LimitChange]) -> set[str]:
        """Limit changes in the safe order (loosen parents first, tighten children first), each on its own:
        a refused change is logged and the batch goes on, so one stuck cgroup does not leave every other
        offline pod unlimited. Returns the cgroups whose change was refused."""
        failed: set[str] = set()
        if not changes:
            return failed
        if self.dry_run:
            log.debug("dry-run: would %s (%d cgroups)", what, len(changes))
            return failed

        def guarded(change: LimitChange) -> LimitChange:
            def run() -> None:
                try:
                    change.apply()
                except CgroupGone:
                    return
                except CgroupError as exc:
                    failed.add(change.cgroup)
                    self._failed(f"{what} ({change.cgroup})", exc)
                    return
                self.writes += 1

            return LimitChange(change.cgroup, change.loosens, run)

        apply_in_safe_order([guarded(c) for c in changes])
        return failed

    def _quota_change(self, path: str, quota: int | None, period: int, threshold: float = 0.0) -> LimitChange | None:
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
        loosens = _ratio(quota, period) >= _ratio(cur.quota_us, cur.period_us)
        return LimitChange(path, loosens, partial(self.writer.set_cpu_quota, path, quota, period))

    def _move_cpuset(self, pod: str, current: frozenset[int], pod_cpus: frozenset[int],
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
            ok &= self._write(what, partial(self.writer.set_cpuset, path, cpus))
        return ok

    # -- the ledger ----------------------------------------------------------------------------------
    def _entry(self, pod: PodSample, snap: Snapshot) -> Touched | None:
        """The pod's ledger entry: created from what its cgroups hold at first sight, its containers kept in
        step with the snapshot (a restarted container's new cgroup gets its own values recorded)."""
        entry = self.ledger.entries.get(pod.uid)
        if entry is None:
            try:
                s = self.reader.cpu_settings(pod.cgroup)
            except CgroupError:
                return None
            spec = kubelet_shares(pod.meta.cpu_request_cores)
            # kubelet never sets cpu.idle nor the minimum weight for a pod that requests CPU: such values are
            # Colo's own, left by a run whose ledger was lost; so may be any value when the ledger was damaged.
            # Then what the cgroups hold is no original: kubelet's values come from the spec
            found = s.weight if self.layout.is_v2 else s.shares
            minimal = 1 if self.layout.is_v2 else OFFLINE_SHARES
            from_spec = not self.ledger.trusted or bool(s.idle) or (found == minimal and spec != OFFLINE_SHARES)
            if from_spec:
                quota, period = kubelet_quota(pod.meta.cpu_limit_cores), KUBELET_CFS_PERIOD_US
                shares, v2_weight = spec, (shares_to_weight(spec) if self.layout.is_v2 else None)
            elif self.layout.is_v2:
                quota, period = s.quota_us, s.period_us
                v2_weight = s.weight or shares_to_weight(spec)
                shares = weight_to_shares(v2_weight)
            else:
                quota, period = s.quota_us, s.period_us
                shares, v2_weight = s.shares or spec, None
            oom = kubelet_oom_score_adj(pod.qos, pod.meta.memory_request_bytes, snap.node.memory_total_bytes)
            entry = Touched(pod.uid, pod.cgroup, shares, quota, period, weight=v2_weight, oom_default=oom,
                            from_spec=from_spec)  # fmt: skip
            self.ledger.record(entry)
        current = {c.cgroup: c.id for c in pod.containers}
        for path in current.keys() - entry.containers.keys():
            if entry.from_spec:
                own = kubelet_quota(pod.meta.container_cpu_limits.get(current[path]))
                entry.containers[path], entry.container_periods[path] = own, KUBELET_CFS_PERIOD_US
            else:
                try:
                    s = self.reader.cpu_settings(path)
                except CgroupError:
                    continue
                entry.containers[path], entry.container_periods[path] = s.quota_us, s.period_us
            self.ledger.changed()
        for path in [p for p in entry.containers if p not in current and not self.reader.exists(p)]:
            for recorded in (entry.containers, entry.container_periods, entry.container_cpusets):
                recorded.pop(path, None)
            self.reader.forget(path)  # read by earlier passes: an open descriptor keeps a removed cgroup alive
            self.ledger.changed()
        return entry

    def _read_oom(self, pid: int) -> int | None:
        try:
            with open(os.path.join(self.host_root, "proc", str(pid), "oom_score_adj"), "rb") as f:
                return int(f.read())
        except (OSError, ValueError):
            return None

    def _record_oom(self, entry: Touched) -> None:
        """kubelet's oom_score_adj of each cgroup of the pod that holds processes (the sandbox's -998
        included), read before Colo writes its own; cgroups that are gone are forgotten."""
        root = self.layout.dir("cpu", entry.cgroup)
        found: set[str] = set()
        for dirpath, _dirs, _files in os.walk(root):
            cgroup = entry.cgroup + dirpath[len(root) :]
            found.add(cgroup)
            if cgroup in entry.oom_score_adj:
                continue
            try:
                pids = self.reader.procs(cgroup)
            except CgroupError:
                continue
            value = next((v for v in map(self._read_oom, pids) if v is not None), None)
            if value is None:
                continue
            if value == self.config.oom_score_adj and entry.oom_default is not None:
                value = entry.oom_default  # kubelet gives 1000 to best-effort pods only: this one is Colo's
            entry.oom_score_adj[cgroup] = value
            self.ledger.changed()
        for cgroup in [c for c in entry.oom_score_adj if c not in found]:
            del entry.oom_score_adj[cgroup]
            self.ledger.changed()

    # -- baseline isolation ------------------------------------------------------------------------
    def _baseline(self, pod: PodSample, entry: Touched) -> None:
        """Weight 2/1, SCHED_IDLE and oom_score_adj 1000; re-checked every oom_reapply_seconds."""
        cg, w = pod.cgroup, self.writer
        try:
            settings = self.reader.cpu_settings(cg)
        except CgroupError:
            return
        weight = settings.weight if self.layout.is_v2 else settings.shares
        # a SCHED_IDLE group refuses weight changes (and reports the kernel's idle weight, 3 shares):
        # weight first, then idle
        if settings.idle is not True and weight != (1 if self.layout.is_v2 else OFFLINE_SHARES):
            self._write(f"set cpu weight of {cg} to the minimum", partial(w.set_cpu_shares, cg, OFFLINE_SHARES))
        if settings.idle is False:
            entry.idle = True
            self._write(f"set cpu.idle=1 on {cg}", partial(w.set_cpu_idle, cg, True))
        proc = os.path.join(self.host_root, "proc")
        score = self.config.oom_score_adj
        self._write(f"set oom_score_adj {score} in {cg}", partial(w.set_oom_score_adj, cg, score, proc_root=proc))

    # -- CPU -----------------------------------------------------------------------------------------
    def _suppress_changes(self, pod: PodSample, entry: Touched, cores: float) -> list[LimitChange]:
        """The pod's CFS quota and, where needed, its containers' (v1 refuses a parent quota below a child's):
        a container keeps its own quota when that is tighter; an unlimited one inherits the pod's."""
        period = self.config.cpu_period_us
        new = max(1000, int(cores * period))
        pod_change = self._quota_change(pod.cgroup, new, period, self.config.cpu_change_threshold)
        if pod_change is None:
            return []
        changes = [pod_change]
        for path, own in entry.containers.items():
            own_period = entry.container_periods.get(path, entry.period_us)
            if _ratio(own, own_period) <= _ratio(new, period):
                target, target_period = own, own_period
            else:
                target, target_period = new, period
            change = self._quota_change(path, target, target_period)
            if change is not None:
                changes.append(change)
        return changes

    def _restore_quota_changes(self, entry: Touched) -> list[LimitChange]:
        """Back to the recorded quotas; a container that is gone has nothing to restore."""
        changes = [self._quota_change(entry.cgroup, entry.quota_us, entry.period_us)]
        for path, own in entry.containers.items():
            changes.append(self._quota_change(path, own, entry.container_periods.get(path, entry.period_us)))
        return [c for c in changes if c is not None]

    def _tier_changes(self, snap: Snapshot, besteffort_cores: float | None) -> tuple[list[LimitChange], str | None]:
        """Cap the best-effort tier at the best-effort slice while only offline pods live there; otherwise
        (an online pod in the tier, no offline pod left, pods released, another policy) it has no quota,
        as kubelet left it. Returns the changes and the tier when they uncap it."""
        tier = self.model.tier("besteffort")
        try:
            cur = self.reader.cpu_settings(tier)
        except CgroupError:
            return [], None
        in_tier = [p for p in snap.pods.values() if p.qos == "besteffort"]
        period = self.config.cpu_period_us
        if besteffort_cores is not None and in_tier and all(p.meta.pod_class == "offline" for p in in_tier):
            cores = max(self.config.cpu_min_offline_cores, besteffort_cores)
            quota = max(1000, int(cores * period))
            self.tier_cap_cores = quota / period
            self.ledger.record_tier(tier, cur.period_us)
            change = self._quota_change(tier, quota, period)
            return ([change] if change else []), None
        self.tier_cap_cores = None
        if tier not in self.ledger.tiers and cur.quota_us is None:
            return [], None
        change = self._quota_change(tier, None, self.ledger.tiers.get(tier, cur.period_us))
        return ([change] if change else []), tier

    def _apply_quotas(self, what: str, changes: list[LimitChange], uncap: str | None) -> set[str]:
        if not self._recorded(what):  # flags and tier caps are on disk before the writes they describe
            return {c.cgroup for c in changes} | ({uncap} if uncap else set())
        failed = self._apply(what, changes)
        if uncap is not None and uncap not in failed:
            self.ledger.drop_tier(uncap)
        return failed

    def _cpu(self, state: NodeState, offline: list[PodSample], entries: dict[str, Touched]) -> None:
        c, snap, cpu = self.config, state.snapshot, state.cpu
        if c.cpu_policy == "none":
            self.budget_cores, self.quotas, self.besteffort_cores = None, {}, 0.0
            self.cpuset, self.released = None, False
            changes, uncap = self._tier_changes(snap, None)
            self._apply_quotas("uncap the best-effort tier", changes, uncap)
            return
        if cpu.system is None:
            # the first pass after a start has no CPU rate yet: unknown is not idle, so nothing is released
            # or re-budgeted; the quotas the cgroups hold (a previous run's, or none) stay one more interval
            return
        load = cpu.online_and_system_ratio()
        self._update_release(1.0 if load is None else load)  # no allocatable: never quiet
        self.budget_cores = offline_budget(
            cpu.allocatable, c.cpu_suppress_threshold, cpu.online, cpu.system, c.cpu_min_offline_cores,
            self.budget_cores, c.cpu_growth_per_interval * cpu.allocatable,
        )  # fmt: skip
        if c.cpu_policy == "cpuset":
            changes, uncap = self._tier_changes(snap, None)
            self._apply_quotas("uncap the best-effort tier", changes, uncap)
            self.quotas, self.besteffort_cores = {}, 0.0
            if self.released:
                self.cpuset = None
                for p in offline:
                    if entries[p.uid].cpuset is not None:
                        self.restore(entries[p.uid], frozenset({"cpuset"}))
            else:
                self._cpuset(offline, entries)
            return
        self.cpuset = None
        if self.released:
            self.quotas, self.besteffort_cores = {}, 0.0
            changes, uncap = self._tier_changes(snap, None)
            restoring = [e for e in (entries[p.uid] for p in offline) if e.quota]
            for e in restoring:
                changes += self._restore_quota_changes(e)
            failed = self._apply_quotas("release offline pods to their own CPU limits", changes, uncap)
            for e in restoring:
                if not {e.cgroup, *e.containers} & failed:
                    e.quota = False
                    self.ledger.changed()
            return
        demands = [OfflineCpu(p.uid, p.meta.cpu_request_cores, p.meta.cpu_limit_cores) for p in offline]
        quotas, besteffort = split_budget(self.budget_cores, demands, c.besteffort_share)
        changes = []
        for p in offline:
            pod_changes = self._suppress_changes(p, entries[p.uid], quotas[p.uid])
            if pod_changes and not entries[p.uid].quota:
                entries[p.uid].quota = True
                self.ledger.changed()
            changes += pod_changes
        tier_changes, uncap = self._tier_changes(snap, besteffort)
        self._apply_quotas("set offline CFS quotas", changes + tier_changes, uncap)
        self.quotas, self.besteffort_cores = quotas, besteffort

    def _update_release(self, load: float) -> None:
        """Release offline pods while online + system CPU is below `cpu_release_below` of allocatable;
        suppress them again above it plus the hysteresis, so a quiet node is not throttled for nothing."""
        below = self.config.cpu_release_below
        if below <= 0:
            self.released = False
        elif not self.released and load < below:
            self.released = True
            log.info("online and system CPU at %.0f%% of allocatable: offline pods released", 100 * load)
        elif self.released and load > below + RELEASE_HYSTERESIS:
            self.released = False
            log.info("online and system CPU at %.0f%% of allocatable: offline pods suppressed again", 100 * load)

    def _cpuset(self, offline: list[PodSample], entries: dict[str, Touched]) -> None:
        assert self.budget_cores is not None
        try:
            with open(os.path.join(self.host_root, self.config.cpu_manager_state.lstrip("/"))) as f:
                exclusive = exclusive_cpus(f.read())
        except OSError:
            exclusive = frozenset()
        chosen: frozenset[int] | None = None
        for pod in offline:
            entry = entries[pod.uid]
            try:
                # the parent's effective CPUs: on v2 its cpuset.cpus is usually empty (inherit)
                available = self.reader.cpuset(_parent(pod.cgroup), effective=True)
                current = self.reader.cpuset(pod.cgroup)
            except CgroupError:
                continue
            if not available:
                continue
            cpus = chosen = pick_cpuset(self.budget_cores, available, exclusive)
            if current == cpus:
                continue
            if entry.cpuset is None:
                entry.cpuset = format_cpuset(current)
                for path in entry.containers:
                    try:
                        entry.container_cpusets[path] = format_cpuset(self.reader.cpuset(path))
                    except CgroupError:
                        continue
                self.ledger.changed()
            if not self._recorded(f"confine {pod.cgroup} to a cpuset"):
                continue
            self._move_cpuset(pod.cgroup, current, cpus, dict.fromkeys(entry.containers, cpus))
        self.cpuset = chosen

    # -- memory --------------------------------------------------------------------------------------
    def _memory(self, state: NodeState, offline: list[PodSample], entries: dict[str, Touched], high: float) -> None:
        """v2: offline pods' memory.high so offline memory stays under what the high watermark leaves."""
        if not self.layout.is_v2 or not self.config.memory_high or not offline:
            self.memory_high = {}
            return
        memory = state.memory
        allowance = max(0, int(memory.allocatable * high / 100.0) - int(memory.online) - int(memory.system or 0))
        total = sum(p.memory_working_set_bytes for p in offline) or 1
        shares: dict[str, int] = {}
        writes: list[tuple[str, int]] = []
        for p in offline:
            share = max(self.config.memory_high_min_bytes, allowance * p.memory_working_set_bytes // total)
            shares[p.uid] = share
            entry = entries[p.uid]
            try:
                current = self.reader.memory_high(p.cgroup)
            except CgroupError:
                continue
            if current == share:
                continue
            if not entry.memory_high:
                entry.memory_high, entry.memory_high_before = True, current
                self.ledger.changed()
            writes.append((p.cgroup, share))
        self.memory_high = shares  # built aside: the HTTP thread never sees half a pass
        if not self._recorded("set memory.high"):
            return
        for cg, share in writes:
            self._write(f"set memory.high of {cg} to {share}", partial(self.writer.set_memory_high, cg, share))

    # -- restore -------------------------------------------------------------------------------------
    def _restore_baseline(self, entry: Touched) -> bool:
        cg, w = entry.cgroup, self.writer
        try:
            idle = self.reader.cpu_settings(cg).idle
        except CgroupGone:
            return True
        except CgroupError:
            idle = True  # unknown: clear it anyway
        ok = True
        if idle:  # whatever the ledger says (kubelet never sets it); a SCHED_IDLE group refuses weight changes
            ok &= self._write(f"clear cpu.idle on {cg}", partial(w.set_cpu_idle, cg, False))
        if self.layout.is_v2 and entry.weight is not None:
            ok &= self._write(f"restore cpu.weight of {cg}", partial(w.set_cpu_weight, cg, entry.weight))
        else:
            ok &= self._write(f"restore cpu.shares of {cg}", partial(w.set_cpu_shares, cg, entry.shares))
        # kubelet's values, shallow cgroups first (the write covers descendants; deeper records follow). Back to
        # them needs no CAP_SYS_RESOURCE: the runtime set each process's floor to that very value. Best effort:
        # a refusal is logged but does not keep the entry (a retry would be refused again, every pass).
        self._record_oom(entry)  # processes started since the last pass still have kubelet's value
        proc = os.path.join(self.host_root, "proc")
        for path, score in sorted(entry.oom_score_adj.items(), key=lambda kv: _depth(kv[0])):
            self._write(
                f"restore oom_score_adj {score} in {path}", partial(w.set_oom_score_adj, path, score, proc_root=proc)
            )
        return ok

    def _restore_cpuset(self, entry: Touched) -> bool:
        try:
            current = self.reader.cpuset(entry.cgroup)
            available = self.reader.cpuset(_parent(entry.cgroup), effective=True)
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
        return self._move_cpuset(entry.cgroup, current, pod_cpus, containers)

    def restore(self, entry: Touched, parts: frozenset[str] = ALL_PARTS) -> bool:
        """Put back what Colo changed on one pod, for the given parts: baseline (idle off first, weight,
        oom_score_adj), CFS quotas, cpuset, memory.high. The entry goes when all is back or the pod is gone."""
        cg = entry.cgroup
        if not self.reader.exists(cg):
            self.ledger.drop(entry.uid)
            return True
        ok = True
        if "baseline" in parts:
            ok &= self._restore_baseline(entry)
        if "quota" in parts and entry.quota:
            if self._apply(f"restore CFS quotas of {cg}", self._restore_quota_changes(entry)):
                ok = False
            else:
                entry.quota = False
                self.ledger.changed()
        if "cpuset" in parts and entry.cpuset is not None:
            if self._restore_cpuset(entry):
                entry.cpuset, entry.container_cpusets = None, {}
                self.ledger.changed()
            else:
                ok = False
        if "memory" in parts and entry.memory_high:
            before = entry.memory_high_before
            if self._write(f"restore memory.high of {cg}", partial(self.writer.set_memory_high, cg, before)):
                entry.memory_high, entry.memory_high_before = False, None
                self.ledger.changed()
            else:
                ok = False
        if ok and parts == ALL_PARTS:
            self.ledger.drop(entry.uid)
        return ok

    def _forget(self, entry: Touched) -> None:
        """Close the descriptors restore opened on a pod the sampler no longer reads (it left the API before
        its cgroup went, kubelet's usual order): each one would keep the removed cgroup alive in the kernel."""
        for path in (entry.cgroup, *entry.containers):
            self.reader.forget(path)

    def _uncap_tier(self) -> None:
        tier = self.model.tier("besteffort")
        try:
            cur = self.reader.cpu_settings(tier)
        except CgroupError:
            return
        if tier in self.ledger.tiers or cur.quota_us is not None:  # kubelet never sets a quota on a QoS tier
            period = self.ledger.tiers.get(tier, cur.period_us)
            if self._write(f"uncap {tier}", partial(self.writer.set_cpu_quota, tier, None, period)):
                self.ledger.drop_tier(tier)

    def restore_all(self) -> None:
        for entry in list(self.ledger.entries.values()):
            self.restore(entry)
        self._uncap_tier()
        self.ledger.save()
        self._baseline_at.clear()
        self.quotas, self.budget_cores, self.memory_high, self.cpuset = {}, None, {}, None
        self.released, self.tier_cap_cores = False, None
        self.touched = tuple(sorted(self.ledger.entries))

    # -- the stage -----------------------------------------------------------------------------------
    def _parts_switched_off(self, entry: Touched) -> frozenset[str]:
        """What an entry says Colo changed that the configuration no longer asks for (a restart with another
        cpu_policy or memory_high: false)."""
        c, off = self.config, set()
        if entry.quota and c.cpu_policy != "cfsQuota":
            off.add("quota")
        if entry.cpuset is not None and c.cpu_policy != "cpuset":
            off.add("cpuset")
        if entry.memory_high and not (self.layout.is_v2 and c.memory_high):
            off.add("memory")
        return frozenset(off)

    def on_snapshot(self, snap: Snapshot) -> None:
        """A pass on its own (tests, standalone use): the state from the snapshot and the allocatable."""
        self.on_state(node_state(snap, self.allocatable()))

    def on_state(self, state: NodeState) -> None:
        snap = state.snapshot
        if not self.config.enabled:
            if self.ledger.entries or self.ledger.tiers:
                self.restore_all()
            return
        offline = list(state.offline)
        offline_uids = {p.uid for p in offline}
        # reconcile: whatever the ledger holds for pods no longer offline (or gone) goes back
        for uid, entry in list(self.ledger.entries.items()):
            if uid not in offline_uids:
                self.restore(entry)
                self._baseline_at.pop(uid, None)
                if uid not in snap.pods:
                    self._forget(entry)
        # every original value on disk before the first write of this pass
        entries: dict[str, Touched] = {}
        for p in offline:
            known = self._entry(p, snap)
            if known is not None:
                entries[p.uid] = known
        offline = [p for p in offline if p.uid in entries]
        now = self.clock()
        due = [p for p in offline if now - self._baseline_at.get(p.uid, -1e18) >= self.config.oom_reapply_seconds]
        for p in due:
            self._record_oom(entries[p.uid])
        if not self._recorded("protect offline pods"):
            self.touched = tuple(sorted(self.ledger.entries))
            return
        for p in offline:
            off = self._parts_switched_off(entries[p.uid])
            if off:
                self.restore(entries[p.uid], off)
        for p in due:
            self._baseline_at[p.uid] = now
            self._baseline(p, entries[p.uid])
        self._cpu(state, offline, entries)
        self._memory(state, offline, entries, self.memory_high_watermark())
        self.ledger.save()
        self.touched = tuple(sorted(self.ledger.entries))

    def stop(self) -> None:
        if not self.dry_run:
            self.restore_all()

    # -- reporting -----------------------------------------------------------------------------------
    def section(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "cpu_policy": self.config.cpu_policy,
            "offline_cpu_budget_cores": self.budget_cores,
            "offline_cpu_released": self.released,
            "offline_cpu_quota_cores": dict(self.quotas),
            "besteffort_cpu_cores": self.besteffort_cores,
            "besteffort_tier_cap_cores": self.tier_cap_cores,
            "offline_cpuset": None if self.cpuset is None else format_cpuset(self.cpuset),
            "memory": self.memory_status,
            "offline_memory_high_bytes": dict(self.memory_high),
            "pods_touched": list(self.touched),
            "writes": self.writes,
            "write_errors": self.errors,
            "last_error": self.last_error,
        }

    def metrics(self) -> Iterable[Metric]:
        out: list[Metric] = []
        if self.budget_cores is not None:
            g = GaugeMetricFamily("colo_offline_cpu_budget_cores", "CPU the offline pods may use together, cores")
            g.add_metric([], self.budget_cores)
            out.append(g)
        r = GaugeMetricFamily(
            "colo_offline_cpu_released", "1 while the node is quiet and offline pods run at their own CPU limits"
        )
        r.add_metric([], 1.0 if self.released else 0.0)
        out.append(r)
        q = GaugeMetricFamily(
            "colo_offline_pod_cpu_quota_cores", "CPU quota given to an offline pod, cores", labels=["uid"]
        )
        for uid, cores in self.quotas.items():
            q.add_metric([uid], cores)
        out.append(q)
        m = GaugeMetricFamily(
            "colo_offline_pod_memory_high_bytes", "memory.high given to an offline pod", labels=["uid"]
        )
        for uid, value in self.memory_high.items():
            m.add_metric([uid], float(value))
        out.append(m)
        w = CounterMetricFamily("colo_enforcement_writes", "cgroup writes made by enforcement", labels=["result"])
        w.add_metric(["ok"], float(self.writes))
        w.add_metric(["error"], float(self.errors))
        out.append(w)
        return out
