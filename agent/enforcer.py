"""Protects online pods: offline pods get the smallest CPU weight, SCHED_IDLE, OOM preference, a CPU budget
(CFS quota or a cpuset) and, on cgroup v2, memory.high. Online pods are never written to.

Runs in the sampling thread on every snapshot; only cgroup writes, no API calls. Everything it changes is
recorded in a ledger and put back at shutdown, when the feature is switched off, when a pod stops being
offline, and after a restart (the ledger is a file). `dry_run` computes, logs and exports every decision
and writes nothing.
"""

from __future__ import annotations

import contextlib
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
)
from cgroup.files import format_cpuset, parse_cpuset

log = logging.getLogger(__name__)
OFFLINE_SHARES = 2  # v2: weight 1


def kubelet_shares(request_cores: float) -> int:
    """cpu.shares kubelet gives a pod for its CPU request (2 for none)."""
    return max(2, min(262144, int(request_cores * 1024)))


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
        self.ledger = Ledger(config.ledger_file)
        self.ledger.load()
        self._reconciled = False
        self._baseline_at: dict[str, float] = {}
        self.budget_cores: float | None = None
        self.quotas: dict[str, float] = {}
        self.besteffort_cores = 0.0
        self.cpuset: frozenset[int] | None = None
        self.memory_high: dict[str, int] = {}
        self.memory_status = "v2 memory.high" if layout.is_v2 else "unsupported on cgroup v1: eviction protects memory"
        self.writes = 0
        self.errors = 0
        self.last_error: str | None = None

    # -- writing -------------------------------------------------------------------------------------
    def _write(self, what: str, fn: Callable[[], Any]) -> bool:
        if self.dry_run:
            log.debug("dry-run: would %s", what)
            return True
        try:
            fn()
        except CgroupGone:
            return False
        except CgroupError as exc:
            self.errors += 1
            self.last_error = f"{what}: {exc}"
            log.warning("enforcement: %s failed: %s", what, exc)
            return False
        self.writes += 1
        return True

    def _entry(self, pod: PodSample) -> Touched:
        entry = self.ledger.entries.get(pod.uid)
        if entry is None:
            period = self.config.cpu_period_us
            own = pod.meta.cpu_limit_cores
            containers = {}
            for c in pod.containers:
                limit = pod.meta.container_cpu_limits.get(c.id)
                containers[c.cgroup] = None if limit is None else max(1000, int(limit * period))
            entry = Touched(
                uid=pod.uid,
                cgroup=pod.cgroup,
                shares=kubelet_shares(pod.meta.cpu_request_cores),
                quota_us=None if own is None else max(1000, int(own * period)),
                period_us=period,
                containers=containers,
            )
            self.ledger.record(entry)
        return entry

    # -- baseline isolation ------------------------------------------------------------------------
    def _baseline(self, pod: PodSample, now: float) -> None:
        """Weight 2/1, SCHED_IDLE and oom_score_adj 1000; re-checked every oom_reapply_seconds."""
        last = self._baseline_at.get(pod.uid)
        if last is not None and now - last < self.config.oom_reapply_seconds:
            return
        self._baseline_at[pod.uid] = now
        entry = self._entry(pod)
        cg, w = pod.cgroup, self.writer
        with contextlib.suppress(CgroupError):
            settings = self.reader.cpu_settings(cg)
            weight = settings.weight if self.layout.is_v2 else settings.shares
            # a SCHED_IDLE group refuses weight changes (and reports the kernel's idle weight, 3 shares):
            # weight first, then idle
            if settings.idle is not True and weight != (1 if self.layout.is_v2 else OFFLINE_SHARES):
                self._write(f"set cpu weight of {cg} to the minimum", partial(w.set_cpu_shares, cg, OFFLINE_SHARES))
            if settings.idle is False and self._write(f"set cpu.idle=1 on {cg}", partial(w.set_cpu_idle, cg, True)):
                entry.idle = True
        if not self.dry_run:
            with contextlib.suppress(CgroupError):
                proc = os.path.join(self.host_root, "proc")
                w.set_oom_score_adj(cg, self.config.oom_score_adj, proc_root=proc)

    # -- CPU -----------------------------------------------------------------------------------------
    def _set_quota(self, pod: PodSample, cores: float | None) -> None:
        """The pod's CFS quota and, where needed, its containers' (cgroup v1 refuses a parent quota below a
        child's): tighten children first, loosen the pod first."""
        entry = self._entry(pod)
        period, w = entry.period_us, self.writer
        new = None if cores is None else max(1000, int(cores * period))
        try:
            current = self.reader.cpu_settings(pod.cgroup)
        except CgroupError:
            return
        old = current.quota_us
        if old == new and current.period_us == period:
            return
        small = new is not None and old is not None and abs(new - old) < self.config.cpu_change_threshold * old
        if small and current.period_us == period:
            return  # under 1%: not worth a write
        changes = [LimitChange(pod.cgroup, _looser(new, old), partial(w.set_cpu_quota, pod.cgroup, new, period))]
        for path, own in entry.containers.items():
            # a container keeps its own quota when it is tighter; an unlimited one inherits the pod's
            target = own if new is None or own is None or own <= new else new
            try:
                cur = self.reader.cpu_settings(path).quota_us
            except CgroupError:
                continue
            if cur != target:
                changes.append(LimitChange(path, _looser(target, cur), partial(w.set_cpu_quota, path, target, period)))
        self._write(f"set CFS quota of {pod.cgroup} to {new} per {period} µs", partial(apply_in_safe_order, changes))

    def _cpu(self, snap: Snapshot, offline: list[PodSample], alloc_cpu: float) -> None:
        pods = list(snap.pods.values())
        online_cores = sum(p.cpu_cores or 0.0 for p in pods if p.meta.pod_class != "offline")
        system = max(0.0, (snap.node.cpu_cores or 0.0) - sum(p.cpu_cores or 0.0 for p in pods))
        c = self.config
        self.budget_cores = offline_budget(
            alloc_cpu, c.cpu_suppress_threshold, online_cores, system, c.cpu_min_offline_cores,
            self.budget_cores, c.cpu_growth_per_interval * alloc_cpu,
        )  # fmt: skip
        if c.cpu_policy == "cfsQuota":
            demands = [OfflineCpu(p.uid, p.meta.cpu_request_cores, p.meta.cpu_limit_cores) for p in offline]
            self.quotas, self.besteffort_cores = split_budget(self.budget_cores, demands, c.besteffort_share)
            for p in offline:
                self._set_quota(p, self.quotas[p.uid])
            self._cap_besteffort_tier(snap)
        elif c.cpu_policy == "cpuset":
            self._cpuset(offline)

    def _cap_besteffort_tier(self, snap: Snapshot) -> None:
        """Cap the best-effort tier at the best-effort slice, unless an online pod lives there."""
        tier = self.model.tier("besteffort")
        in_tier = [p for p in snap.pods.values() if p.qos == "besteffort"]
        if not in_tier or any(p.meta.pod_class != "offline" for p in in_tier):
            return
        slice_cores = max(self.config.cpu_min_offline_cores, self.besteffort_cores)
        quota = max(1000, int(slice_cores * self.config.cpu_period_us))
        with contextlib.suppress(CgroupError):
            if self.reader.cpu_settings(tier).quota_us != quota:
                cap = partial(self.writer.set_cpu_quota, tier, quota, self.config.cpu_period_us)
                self._write(f"cap {tier} at {slice_cores:.2f} cores", cap)

    def _cpuset(self, offline: list[PodSample]) -> None:
        assert self.budget_cores is not None
        try:
            with open(os.path.join(self.host_root, self.config.cpu_manager_state.lstrip("/"))) as f:
                exclusive = exclusive_cpus(f.read())
        except OSError:
            exclusive = frozenset()
        for pod in offline:
            entry = self._entry(pod)
            parent = pod.cgroup.rsplit("/", 1)[0] or "/"
            try:
                available = self.reader.cpuset(parent)
                current = self.reader.cpuset(pod.cgroup)
            except CgroupError:
                continue
            cpus = pick_cpuset(self.budget_cores, available, exclusive)
            self.cpuset = cpus
            if current == cpus:
                continue
            entry.cpuset = format_cpuset(available)
            paths = [pod.cgroup, *(c.cgroup for c in pod.containers)]
            changes = [LimitChange(p, cpus >= current, partial(self.writer.set_cpuset, p, cpus)) for p in paths]
            self._write(f"confine {pod.cgroup} to CPUs {format_cpuset(cpus)}", partial(apply_in_safe_order, changes))

    # -- memory --------------------------------------------------------------------------------------
    def _memory(self, snap: Snapshot, offline: list[PodSample], alloc_mem: int, high_watermark: float) -> None:
        """v2: offline pods' memory.high so offline memory stays under what the high watermark leaves."""
        if not self.layout.is_v2 or not self.config.memory_high or not offline:
            return
        pods = list(snap.pods.values())
        online = sum(p.memory_working_set_bytes for p in pods if p.meta.pod_class != "offline")
        system = max(0, snap.node.memory_used_bytes - sum(p.memory_working_set_bytes for p in pods))
        allowance = max(0, int(alloc_mem * high_watermark / 100.0) - online - system)
        total = sum(p.memory_working_set_bytes for p in offline) or 1
        self.memory_high = {}
        for p in offline:
            share = max(self.config.memory_high_min_bytes, allowance * p.memory_working_set_bytes // total)
            self.memory_high[p.uid] = share
            entry = self._entry(p)
            try:
                if self.reader.memory_high(p.cgroup) == share:
                    continue
            except CgroupError:
                continue
            if self._write(
                f"set memory.high of {p.cgroup} to {share}", partial(self.writer.set_memory_high, p.cgroup, share)
            ):
                entry.memory_high = True

    # -- restore -------------------------------------------------------------------------------------
    def restore(self, entry: Touched) -> None:
        """Put back what Colo changed on one pod: idle off, kubelet's weight, own quotas, cpuset, memory.high."""
        cg, w = entry.cgroup, self.writer
        ok = True
        if entry.idle:  # a SCHED_IDLE group refuses weight changes: idle off first
            ok &= self._write(f"clear cpu.idle on {cg}", partial(w.set_cpu_idle, cg, False))
        ok &= self._write(f"restore cpu weight of {cg}", partial(w.set_cpu_shares, cg, entry.shares))
        changes = [LimitChange(cg, True, partial(w.set_cpu_quota, cg, entry.quota_us, entry.period_us))]
        for path, own in entry.containers.items():
            changes.append(LimitChange(path, True, partial(w.set_cpu_quota, path, own, entry.period_us)))
        if entry.cpuset:
            cpus = parse_cpuset("ledger", entry.cpuset.encode())
            changes += [LimitChange(p, True, partial(w.set_cpuset, p, cpus)) for p in (cg, *entry.containers)]
        ok &= self._write(f"restore CPU limits of {cg}", partial(apply_in_safe_order, changes))
        if entry.memory_high:
            ok &= self._write(f"restore memory.high of {cg}", partial(w.set_memory_high, cg, None))
        if ok or not self.reader.exists(cg):
            self.ledger.drop(entry.uid)

    def restore_all(self) -> None:
        for entry in list(self.ledger.entries.values()):
            self.restore(entry)
        tier = self.model.tier("besteffort")
        with contextlib.suppress(CgroupError):
            if self.reader.cpu_settings(tier).quota_us is not None:
                self._write(f"uncap {tier}", partial(self.writer.set_cpu_quota, tier, None, self.config.cpu_period_us))
        self.ledger.save()
        self.quotas, self.budget_cores = {}, None

    # -- the stage -----------------------------------------------------------------------------------
    def on_snapshot(self, snap: Snapshot) -> None:
        if not self.config.enabled:
            if self.ledger.entries:
                self.restore_all()
            return
        offline = [p for p in snap.pods.values() if p.meta.pod_class == "offline"]
        offline_uids = {p.uid for p in offline}
        # reconcile: whatever the ledger holds for pods no longer offline (or gone) goes back
        for uid, entry in list(self.ledger.entries.items()):
            if uid not in offline_uids:
                self.restore(entry)
                self._baseline_at.pop(uid, None)
        now = self.clock()
        for p in offline:
            self._baseline(p, now)
        alloc_cpu, alloc_mem = self.allocatable()
        cpu_alloc = alloc_cpu if alloc_cpu is not None else snap.node.cpu_capacity_cores
        mem_alloc = alloc_mem if alloc_mem is not None else snap.node.memory_total_bytes
        if self.config.cpu_policy != "none":
            self._cpu(snap, offline, cpu_alloc)
        self._memory(snap, offline, mem_alloc, self.memory_high_watermark())
        self.ledger.save()

    def stop(self) -> None:
        if not self.dry_run:
            self.restore_all()

    # -- reporting -----------------------------------------------------------------------------------
    def section(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "cpu_policy": self.config.cpu_policy,
            "offline_cpu_budget_cores": self.budget_cores,
            "offline_cpu_quota_cores": dict(self.quotas),
            "besteffort_cpu_cores": self.besteffort_cores,
            "offline_cpuset": None if self.cpuset is None else format_cpuset(self.cpuset),
            "memory": self.memory_status,
            "offline_memory_high_bytes": dict(self.memory_high),
            "pods_touched": sorted(self.ledger.entries),
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


def _looser(new: int | None, old: int | None) -> bool:
    """Does the new quota allow at least as much as the old one?"""
    if new is None:
        return True
    if old is None:
        return False
    return new >= old
