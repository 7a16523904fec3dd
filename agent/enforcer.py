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

from prometheus_client.metrics_core import Metric

from agent import enforcement_report
from agent.actions import Recorded
from agent.apply_actions import apply as apply_actions
from agent.config import EnforcementConfig
from agent.cpu_budget import exclusive_cpus, pick_cpuset
from agent.executor import CgroupExecutor, DryRunExecutor
from agent.kubelet import kubelet_oom_score_adj, kubelet_quota, kubelet_shares
from agent.ledger import Ledger, Touched
from agent.node_state import NodeState, node_state
from agent.originals import OFFLINE_SHARES, Originals
from agent.restore import ALL_PARTS, Restorer, parent_cgroup
from agent.snapshot import PodSample, Snapshot
from agent.strategies import cpu_quota, memory_high, release
from agent.strategies.batch_limits import BatchLimits
from cgroup import CgroupError, CgroupReader, Layout, LimitChange, PathModel
from cgroup.files import format_cpuset

__all__ = ["Enforcer", "kubelet_oom_score_adj", "kubelet_quota", "kubelet_shares"]

log = logging.getLogger(__name__)


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
        batch: BatchLimits | None = None,
    ) -> None:
        self.layout, self.model, self.reader, self.config = layout, model, reader, config
        # batch pods' own limits, planned after suppression in each pass (see batch_limits for why)
        self.batch = batch if batch is not None and batch.config.enabled else None
        self._batch_memo: object = None
        self.batch_report: dict[str, Any] = {}
        self.memory_high_watermark = memory_high_watermark
        self.allocatable = allocatable
        self.dry_run = dry_run
        self.host_root = host_root
        self.clock = clock
        # dry run: a ledger in memory only; the file (and what it says a previous run changed) stays as it is
        self.ledger = Ledger("" if dry_run else config.ledger_file)
        self.ledger.load()
        # dry run swaps the executor, not the decisions
        self.executor = (DryRunExecutor if dry_run else CgroupExecutor)(layout, reader, self.ledger)
        self.originals = Originals(layout, reader, self.ledger, config, host_root,
                                   self.batch.targets if self.batch else None)  # fmt: skip
        self.restorer = Restorer(layout, model, reader, self.ledger, self.executor, self.originals, host_root)
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

    @property
    def writes(self) -> int:
        return self.executor.writes

    @property
    def errors(self) -> int:
        return self.executor.errors

    @property
    def last_error(self) -> str | None:
        return self.executor.last_error

    def restore(self, entry: Touched, parts: frozenset[str] = ALL_PARTS) -> bool:
        """Put back what Colo changed on one pod, for the given parts (see Restorer.restore)."""
        return self.restorer.restore(entry, parts)

    # -- baseline isolation ------------------------------------------------------------------------
    def _baseline(self, pod: PodSample, entry: Touched) -> None:
        """Weight 2/1, SCHED_IDLE and oom_score_adj 1000; re-checked every oom_reapply_seconds."""
        cg, w = pod.cgroup, self.executor.writer
        try:
            settings = self.reader.cpu_settings(cg)
        except CgroupError:
            return
        weight = settings.weight if self.layout.is_v2 else settings.shares
        # a SCHED_IDLE group refuses weight changes (and reports the kernel's idle weight, 3 shares):
        # weight first, then idle
        if settings.idle is not True and weight != (1 if self.layout.is_v2 else OFFLINE_SHARES):
            self.executor.write(f"set cpu weight of {cg} to the minimum", partial(w.set_cpu_shares, cg, OFFLINE_SHARES))
        if settings.idle is False:
            entry.idle = True
            self.executor.write(f"set cpu.idle=1 on {cg}", partial(w.set_cpu_idle, cg, True))
        proc = os.path.join(self.host_root, "proc")
        score = self.config.oom_score_adj
        self.executor.write(
            f"set oom_score_adj {score} in {cg}", partial(w.set_oom_score_adj, cg, score, proc_root=proc)
        )

    # -- CPU -----------------------------------------------------------------------------------------
    def _suppress_changes(self, pod: PodSample, entry: Touched, cores: float) -> list[LimitChange]:
        """The changes giving the pod (and where needed its containers) the quota the strategy chose. When
        the pod's own quota is already within `cpu_change_threshold` of it, only containers that do not fit
        under the quota the pod holds change (one first seen since, e.g. restarted)."""
        (pod_cg, quota, period), *containers = cpu_quota.pod_targets(cores, entry, self.config)
        pod_change = self.executor.quota_change(pod_cg, quota, period, self.config.cpu_change_threshold)
        changes = []
        if pod_change is None:
            try:
                held = self.reader.cpu_settings(pod_cg)
            except CgroupError:
                return []
            if held.quota_us is None:
                return []
            containers = cpu_quota.container_targets(held.quota_us, held.period_us, entry)
        else:
            changes.append(pod_change)
        for path, target, target_period in containers:
            change = self.executor.quota_change(path, target, target_period)
            if change is not None:
                changes.append(change)
        return changes

    def _tier_changes(
        self, state: NodeState, besteffort_cores: float | None, quotas: dict[str, float] | None = None
    ) -> tuple[list[LimitChange], str | None]:
        """Cap the best-effort tier at the best-effort slice while only offline pods live there; otherwise
        (an online pod in the tier, no offline pod left, pods released, another policy) it has no quota,
        as kubelet left it. Returns the changes and the tier when they uncap it."""
        tier = self.model.tier("besteffort")
        try:
            cur = self.reader.cpu_settings(tier)
        except CgroupError:
            return [], None
        quota = cpu_quota.tier_cap(state, besteffort_cores, self.config, quotas)
        period = self.config.cpu_period_us
        if quota is not None:
            self.tier_cap_cores = quota / period
            self.ledger.record_tier(tier, cur.period_us)
            change = self.executor.quota_change(tier, quota, period)
            return ([change] if change else []), None
        self.tier_cap_cores = None
        if tier not in self.ledger.tiers and cur.quota_us is None:
            return [], None
        change = self.executor.quota_change(tier, None, self.ledger.tiers.get(tier, cur.period_us))
        return ([change] if change else []), tier

    def _apply_quotas(self, what: str, changes: list[LimitChange], uncap: str | None) -> set[str]:
        if not self.executor.recorded(what):  # flags and tier caps are on disk before the writes they describe
            return {c.cgroup for c in changes} | ({uncap} if uncap else set())
        failed = self.executor.apply(what, changes)
        if uncap is not None and uncap not in failed:
            self.ledger.drop_tier(uncap)
        return failed

    def _cpu(self, state: NodeState, offline: list[PodSample], entries: dict[str, Touched]) -> None:
        c = self.config
        if c.cpu_policy == "none":
            self.budget_cores, self.quotas, self.besteffort_cores = None, {}, 0.0
            self.cpuset, self.released = None, False
            changes, uncap = self._tier_changes(state, None)
            self._apply_quotas("uncap the best-effort tier", changes, uncap)
            return
        budget = cpu_quota.budget(state, self.budget_cores, c)
        if budget is None:
            # the first pass after a start has no CPU rate yet: unknown is not idle, so nothing is released
            # or re-budgeted; the quotas the cgroups hold (a previous run's, or none) stay one more interval
            return
        load = state.cpu.online_and_system_ratio()
        self._update_release(1.0 if load is None else load)  # no allocatable: never quiet
        self.budget_cores = budget
        if c.cpu_policy == "cpuset":
            changes, uncap = self._tier_changes(state, None)
            self._apply_quotas("uncap the best-effort tier", changes, uncap)
            self.quotas, self.besteffort_cores = {}, 0.0
            if self.released:
                self.cpuset = None
                for p in offline:
                    if entries[p.uid].cpuset is not None:
                        self.restorer.restore(entries[p.uid], frozenset({"cpuset"}))
            else:
                self._cpuset(offline, entries)
            return
        self.cpuset = None
        if self.released:
            self.quotas, self.besteffort_cores = {}, 0.0
            changes, uncap = self._tier_changes(state, None)
            restoring = [e for e in (entries[p.uid] for p in offline) if e.quota]
            for e in restoring:
                changes += self.restorer.quota_changes(e)
            failed = self._apply_quotas("release offline pods to their own CPU limits", changes, uncap)
            for e in restoring:
                if not {e.cgroup, *e.containers} & failed:
                    e.quota = False
                    self.ledger.changed()
            return
        quotas, besteffort = cpu_quota.split(budget, offline, c)
        changes = []
        for p in offline:
            pod_changes = self._suppress_changes(p, entries[p.uid], quotas[p.uid])
            if pod_changes and not entries[p.uid].quota:
                entries[p.uid].quota = True
                self.ledger.changed()
            changes += pod_changes
        tier_changes, uncap = self._tier_changes(state, besteffort, quotas)
        self._apply_quotas("set offline CFS quotas", changes + tier_changes, uncap)
        self.quotas, self.besteffort_cores = quotas, besteffort

    def _update_release(self, load: float) -> None:
        """Release offline pods while online + system CPU is below `cpu_release_below` of allocatable;
        suppress them again above it plus the hysteresis, so a quiet node is not throttled for nothing."""
        released = release.plan(load, self.released, self.config.cpu_release_below)
        if released != self.released and self.config.cpu_release_below > 0:
            what = "released" if released else "suppressed again"
            log.info("online and system CPU at %.0f%% of allocatable: offline pods %s", 100 * load, what)
        self.released = released

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
                available = self.reader.cpuset(parent_cgroup(pod.cgroup), effective=True)
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
            if not self.executor.recorded(f"confine {pod.cgroup} to a cpuset"):
                continue
            self.executor.move_cpuset(pod.cgroup, current, cpus, dict.fromkeys(entry.containers, cpus))
        self.cpuset = chosen

    # -- memory --------------------------------------------------------------------------------------
    def _memory(self, state: NodeState, offline: list[PodSample], entries: dict[str, Touched], high: float) -> None:
        """v2: offline pods' memory.high so offline memory stays under what the high watermark leaves."""
        if not self.layout.is_v2 or not self.config.memory_high or not offline:
            self.memory_high = {}
            return
        shares = memory_high.plan(state.memory, offline, high, self.config.memory_high_min_bytes)
        writes: list[tuple[str, int]] = []
        for p in offline:
            share = shares[p.uid]
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
        if not self.executor.recorded("set memory.high"):
            return
        for cg, share in writes:
            what = f"set memory.high of {cg} to {share}"
            self.executor.write(what, partial(self.executor.writer.set_memory_high, cg, share))

    def restore_all(self) -> None:
        # the tier first: v1 refuses a pod quota above its parent's, and a batch pod's own quota may be
        self.restorer.uncap_tier()
        for entry in list(self.ledger.entries.values()):
            self.restorer.restore(entry)
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
        self._suppress(state)
        self._batch(state)

    def _batch(self, state: NodeState) -> None:
        """Batch pods' own limits, after suppression: it sees the ledger entries this pass recorded."""
        if self.batch is None:
            return
        recorded = Recorded(self.ledger.entries, self.ledger.tiers, self._batch_memo, self.clock())
        plan = self.batch.plan(state, recorded)
        self._batch_memo, self.batch_report = plan.memo, dict(plan.report)
        if plan.actions and self.executor.recorded("set batch pods' own limits"):
            apply_actions(self.executor, self.layout, "batch limits", plan.actions)

    def _suppress(self, state: NodeState) -> None:
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
                self.restorer.restore(entry)
                self._baseline_at.pop(uid, None)
                if uid not in snap.pods:
                    self.restorer.forget(entry)
        # every original value on disk before the first write of this pass
        entries: dict[str, Touched] = {}
        for p in offline:
            known = self.originals.entry(p, snap)
            if known is not None:
                entries[p.uid] = known
        offline = [p for p in offline if p.uid in entries]
        now = self.clock()
        due = [p for p in offline if now - self._baseline_at.get(p.uid, -1e18) >= self.config.oom_reapply_seconds]
        for p in due:
            self.originals.record_oom(entries[p.uid])
        if not self.executor.recorded("protect offline pods"):
            self.touched = tuple(sorted(self.ledger.entries))
            return
        for p in offline:
            off = self._parts_switched_off(entries[p.uid])
            if off:
                self.restorer.restore(entries[p.uid], off)
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
        """The `enforcement` key of /api/v1/node."""
        return enforcement_report.section(self)

    def metrics(self) -> Iterable[Metric]:
        return enforcement_report.metrics(self)
