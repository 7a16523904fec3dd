"""Putting back what Colo changed on a pod, part by part (baseline, CFS quotas, cpuset, memory.high), from
its ledger entry; and the best-effort tier it capped."""

from __future__ import annotations

import os
from functools import partial

from agent.executor import CgroupExecutor
from agent.ledger import Ledger, Touched
from agent.originals import Originals
from cgroup import CgroupError, CgroupGone, CgroupReader, Layout, LimitChange, PathModel
from cgroup.files import parse_cpuset

ALL_PARTS = frozenset({"baseline", "quota", "cpuset", "memory"})


def _depth(cgroup: str) -> int:
    return cgroup.rstrip("/").count("/")


def parent_cgroup(cgroup: str) -> str:
    return cgroup.rsplit("/", 1)[0] or "/"


class Restorer:
    def __init__(
        self,
        layout: Layout,
        model: PathModel,
        reader: CgroupReader,
        ledger: Ledger,
        executor: CgroupExecutor,
        originals: Originals,
        host_root: str,
    ) -> None:
        self.layout, self.model, self.reader, self.ledger = layout, model, reader, ledger
        self.executor, self.originals, self.host_root = executor, originals, host_root

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

    def restore(self, entry: Touched, parts: frozenset[str] = ALL_PARTS) -> bool:
        """Put back what Colo changed on one pod, for the given parts: baseline (idle off first, weight,
        oom_score_adj), CFS quotas, cpuset, memory.high. The entry goes when all is back or the pod is gone."""
        cg = entry.cgroup
        if not self.reader.exists(cg):
            self.ledger.drop(entry.uid)
            return True
        ok = True
        if "baseline" in parts:
            ok &= self.baseline(entry)
        if "quota" in parts and entry.quota:
            if self.executor.apply(f"restore CFS quotas of {cg}", self.quota_changes(entry)):
                ok = False
            else:
                entry.quota = False
                self.ledger.changed()
        if "cpuset" in parts and entry.cpuset is not None:
            if self.cpuset(entry):
                entry.cpuset, entry.container_cpusets = None, {}
                self.ledger.changed()
            else:
                ok = False
        if "memory" in parts and entry.memory_high:
            before = entry.memory_high_before
            if self.executor.write(
                f"restore memory.high of {cg}", partial(self.executor.writer.set_memory_high, cg, before)
            ):
                entry.memory_high, entry.memory_high_before = False, None
                self.ledger.changed()
            else:
                ok = False
        if ok and parts == ALL_PARTS:
            self.ledger.drop(entry.uid)
        return ok

    def forget(self, entry: Touched) -> None:
        """Close the descriptors restore opened on a pod the sampler no longer reads (it left the API before
        its cgroup went, kubelet's usual order): each one would keep the removed cgroup alive in the kernel."""
        for path in (entry.cgroup, *entry.containers):
            self.reader.forget(path)

    def uncap_tier(self) -> None:
        tier = self.model.tier("besteffort")
        try:
            cur = self.reader.cpu_settings(tier)
        except CgroupError:
            return
        if tier in self.ledger.tiers or cur.quota_us is not None:  # kubelet never sets a quota on a QoS tier
            period = self.ledger.tiers.get(tier, cur.period_us)
            if self.executor.write(f"uncap {tier}", partial(self.executor.writer.set_cpu_quota, tier, None, period)):
                self.ledger.drop_tier(tier)
