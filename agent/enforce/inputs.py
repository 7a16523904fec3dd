"""What the enforcement strategies need beyond the snapshot, read once per pass into the NodeState before
they plan (they read no file themselves): eviction's high memory watermark, for the cpuset policy the CPUs
kubelet's CPU manager gave containers exclusively and the effective CPUs of offline pods' parents, and for
the run-queue protection's opt-in SLO feedback the latest readings of the pods that declare an SLO (scraped on
the scraper's own thread: a pass only hands it the targets and takes what it has)."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable

from agent.node_state import NodeState
from agent.sense.slo_scrape import SloScraper
from cgroup import CgroupError, CgroupReader, parent_cgroup
from cgroup.files import parse_cpuset


def exclusive_cpus(state_json: str) -> frozenset[int]:
    """CPUs kubelet's static CPU manager gave exclusively to guaranteed containers (its state file)."""
    try:
        doc = json.loads(state_json)
    except ValueError:
        return frozenset()
    cpus: set[int] = set()
    entries = doc.get("entries") if isinstance(doc, dict) else None
    for containers in (entries or {}).values():
        if isinstance(containers, dict):
            for value in containers.values():
                if isinstance(value, str):
                    try:
                        cpus |= parse_cpuset("cpu_manager_state", value.encode())
                    except ValueError:
                        continue
    return frozenset(cpus)


class EnforcementInputs:
    def __init__(
        self,
        reader: CgroupReader,
        cpu_manager_state: str,
        *,
        cpuset: bool,
        host_root: str = "/",
        memory_high_watermark: Callable[[], float] = lambda: 80.0,
        slo: SloScraper | None = None,
    ) -> None:
        self.reader, self.cpuset, self.watermark = reader, cpuset, memory_high_watermark
        self.cpu_manager_state = os.path.join(host_root, cpu_manager_state.lstrip("/"))
        self.slo = slo

    def collect(self, state: NodeState) -> NodeState:
        if self.slo is not None:
            self.slo.set_targets(
                {p.uid: (p.meta.pod_ip, p.meta.annotations) for p in state.online if p.meta.annotations}
            )
            self.slo.start()
            state = dataclasses.replace(state, slo=self.slo.readings())
        watermark = float(self.watermark())
        if not self.cpuset:  # only the cpuset policy reads CPUs: no file read for nothing every pass
            return dataclasses.replace(state, memory_high_percent=watermark)
        try:
            with open(self.cpu_manager_state) as f:
                exclusive = exclusive_cpus(f.read())
        except OSError:
            exclusive = frozenset()
        parents: dict[str, frozenset[int]] = {}
        for pod in state.offline:
            parent = parent_cgroup(pod.cgroup)
            if parent not in parents:
                try:
                    parents[parent] = self.reader.cpuset(parent, effective=True)
                except CgroupError:
                    continue
        return dataclasses.replace(state, memory_high_percent=watermark, exclusive_cpus=exclusive, parent_cpus=parents)

    def close(self) -> None:
        if self.slo is not None:
            self.slo.stop()
