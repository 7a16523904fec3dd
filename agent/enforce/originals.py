"""What a pod's cgroups held before Colo's first write, recorded in the ledger: read from the cgroups (which
know of overhead, sidecars, in-place resizes and kubelet's CFS period, unlike the pod spec), or kubelet's
values from the spec when the cgroups cannot be trusted (a damaged ledger, or Colo's own marks on the pod)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from agent.config_sections.enforcement import EnforcementConfig
from agent.enforce.ledger import Ledger, Touched
from agent.enforce.parts.baseline import OFFLINE_SHARES
from agent.snapshot import PodSample, Snapshot
from cgroup import CgroupError, CgroupReader, Layout, shares_to_weight, weight_to_shares
from cgroup.files import read_once
from cgroup.kubelet_rules import QUOTA_PERIOD_US, kubelet_oom_score_adj, kubelet_quota, kubelet_shares

#: (entry, pod, is_v2) -> the entry changed: a strategy whose values are a pod's own limits makes them the
#: pod's originals (batch pods: their batch values, not what kubelet left in their cgroups)
OwnOriginals = Callable[[Touched, PodSample, bool], bool]


class Originals:
    """`own`: the strategies' hooks that make a pod's own limits its originals (see `OwnOriginals`)."""

    def __init__(
        self,
        layout: Layout,
        reader: CgroupReader,
        ledger: Ledger,
        config: EnforcementConfig,
        host_root: str,
        own: Sequence[OwnOriginals] = (),
    ) -> None:
        self.layout, self.reader, self.ledger, self.config, self.host_root = layout, reader, ledger, config, host_root
        self.proc_root = os.path.join(host_root, "proc")
        self.own = tuple(own)
        self.is_v2 = layout.is_v2

    def entry(self, pod: PodSample, snap: Snapshot) -> Touched | None:
        """The pod's ledger entry: created from what its cgroups hold at first sight, its containers kept in
        step with the snapshot (a restarted container's new cgroup gets its own values recorded)."""
        entry = self.ledger.entries.get(pod.meta.uid)
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
                quota, period = kubelet_quota(pod.meta.cpu_limit_cores), QUOTA_PERIOD_US
                shares, v2_weight = spec, (shares_to_weight(spec) if self.layout.is_v2 else None)
            elif self.layout.is_v2:
                quota, period = s.quota_us, s.period_us
                v2_weight = s.weight or shares_to_weight(spec)
                shares = weight_to_shares(v2_weight)
            else:
                quota, period = s.quota_us, s.period_us
                shares, v2_weight = s.shares or spec, None
            oom = kubelet_oom_score_adj(pod.qos, pod.meta.memory_request_bytes, snap.node.memory_total_bytes)
            entry = Touched(
                pod.uid, pod.cgroup, shares, quota, period, weight=v2_weight, oom_default=oom, from_spec=from_spec
            )
            self.ledger.record(entry)
        known, containers = entry.containers, pod.containers
        if len(known) != len(containers) or not all([c.cgroup in known for c in containers]):
            self._containers(entry, pod)  # a container started, restarted or ended
        for hook in self.own:
            if hook(entry, pod, self.is_v2):
                self.ledger.changed()
        return entry

    def _containers(self, entry: Touched, pod: PodSample) -> None:
        """The entry's containers as the snapshot's: a new one's own quota recorded, a vanished one forgotten."""
        current = {c.cgroup: c.id for c in pod.containers}
        for path in current.keys() - entry.containers.keys():
            if entry.from_spec:
                own = kubelet_quota(pod.meta.container_cpu_limits.get(current[path]))
                entry.containers[path], entry.container_periods[path] = own, QUOTA_PERIOD_US
            else:
                try:
                    s = self.reader.cpu_settings(path)
                except CgroupError:
                    continue
                entry.containers[path], entry.container_periods[path] = s.quota_us, s.period_us
            self.ledger.changed()
        for path in [p for p in entry.containers if p not in current and not self.reader.exists(p)]:
            entry.containers.pop(path, None)
            entry.container_periods.pop(path, None)
            self.reader.forget(path)  # read by earlier passes: an open descriptor keeps a removed cgroup alive
            self.ledger.changed()

    def read_oom(self, pid: int) -> int | None:
        try:
            return int(read_once(f"{self.proc_root}/{pid}/oom_score_adj"))
        except (CgroupError, ValueError):  # the process ended meanwhile
            return None

    def record_oom(self, entry: Touched, scores: dict[str, int]) -> None:
        """kubelet's oom_score_adj of each cgroup of the pod that holds processes (the sandbox's -998
        included) into `scores`, read before Colo writes its own; cgroups that are gone are forgotten."""
        root = self.layout.dir("cpu", entry.cgroup)
        found: set[str] = set()
        for dirpath, pids in self.reader.procs_tree(entry.cgroup):  # the walk the write that follows reuses
            cgroup = entry.cgroup + dirpath[len(root) :]
            found.add(cgroup)
            if cgroup in scores or isinstance(pids, CgroupError):
                continue
            value = next((v for v in map(self.read_oom, pids) if v is not None), None)
            if value is None:
                continue
            if value == self.config.oom_score_adj and entry.oom_default is not None:
                value = entry.oom_default  # kubelet gives 1000 to best-effort pods only: this one is Colo's
            scores[cgroup] = value
            self.ledger.changed()
        for cgroup in [c for c in scores if c not in found]:
            del scores[cgroup]
            self.ledger.changed()
