"""Online QoS as a stage of the agent's pass: the three strategies (`cpu_burst`, `quota_burst`, `memory_qos`)
plan on the pass's NodeState and their ledger record; `QosExecutor` writes what they planned.

A stage of its own, after enforcement, with its own ledger file (`<enforcement.ledger_file>` with `-qos`
before the extension): enforcement's ledger holds offline pods only and puts back whatever it holds for a pod
that is not offline. Dry run swaps the executor (nothing written, the ledger in memory), never a plan.
Shutdown puts every recorded value back; a feature switched off (a restart with another configuration) and
a pod that stops being online or goes away get theirs back through the plans; after a crash the ledger
file tells what to put back.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from prometheus_client.metrics_core import Metric

from agent import qos_report
from agent.actions import Action, Part, Plan, Recorded
from agent.config import QosConfig
from agent.executor import CgroupExecutor, DryRunExecutor
from agent.ledger import Ledger
from agent.node_state import NodeState
from agent.qos_executor import QosExecutor
from agent.strategies.cpu_burst import CpuBurst
from agent.strategies.memory_qos import MemoryQos
from agent.strategies.quota_burst import QuotaBurst
from cgroup import CgroupReader, Layout, PathModel

log = logging.getLogger(__name__)


class Strategy(Protocol):
    name: str
    parts: frozenset[Part]

    def plan(self, state: NodeState, recorded: Recorded) -> Plan: ...


def qos_ledger_file(enforcement_ledger: str) -> str:
    """Where the online QoS ledger lives: beside enforcement's ("" keeps both in memory)."""
    if not enforcement_ledger:
        return ""
    root, ext = os.path.splitext(enforcement_ledger)
    return f"{root}-qos{ext or '.json'}"


class QosStage:
    name = "qos"

    def __init__(
        self,
        layout: Layout,
        model: PathModel,
        reader: CgroupReader,
        config: QosConfig,
        ledger_file: str,
        *,
        dry_run: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.layout, self.model, self.reader, self.config = layout, model, reader, config
        self.dry_run, self.clock = dry_run, clock
        self.ledger = Ledger("" if dry_run else ledger_file)
        self.ledger.load()
        self.executor = (DryRunExecutor if dry_run else CgroupExecutor)(layout, reader, self.ledger)
        self.qos = QosExecutor(reader, self.ledger, self.executor)
        self.burst_supported: bool | None = None  # asked of kubepods once it exists
        self.strategies: list[Strategy] = self._strategies(False)
        self.memos: dict[str, Any] = {}
        # exported to the HTTP thread: only ever replaced, never changed in place
        self.reports: dict[str, dict[str, Any]] = {}
        self.warned: set[str] = set()

    def _strategies(self, burst_supported: bool) -> list[Strategy]:
        """The registry: one line per strategy."""
        return [
            CpuBurst(self.config.cpu_burst, burst_supported),
            QuotaBurst(self.config.quota_burst),
            MemoryQos(self.config.memory, self.layout.is_v2, self.model.kubepods()),
        ]

    def _detect(self) -> None:
        if self.burst_supported is not None:
            return
        kubepods = self.model.kubepods()
        if not self.reader.exists(kubepods):
            return
        self.burst_supported = self.reader.supports_cpu_burst(kubepods)
        if not self.burst_supported:
            log.info("online QoS: this kernel has no CFS burst (Linux 5.14+): cpu_burst reports unsupported")
        self.strategies = self._strategies(self.burst_supported)

    def on_state(self, state: NodeState) -> None:
        self._detect()
        now = self.clock()
        actions: list[Action] = []
        reports: dict[str, dict[str, Any]] = {}
        for s in self.strategies:
            plan = s.plan(state, Recorded(self.ledger.entries, self.ledger.tiers, self.memos.get(s.name), now))
            self.memos[s.name] = plan.memo
            reports[s.name] = dict(plan.report)
            actions += plan.actions
            for warning in plan.report.get("warnings", ()):
                if warning not in self.warned:  # once per cause, not every second
                    if len(self.warned) >= 1000:
                        self.warned.clear()
                    self.warned.add(warning)
                    log.warning("online QoS: %s", warning)
        self.qos.run(actions, state.snapshot)
        self.reports = reports

    def stop(self) -> None:
        if not self.dry_run:
            self.qos.restore_all()

    # -- reporting -----------------------------------------------------------------------------------
    def section(self) -> dict[str, Any]:
        """The `qos` key of /api/v1/node."""
        return qos_report.section(self)

    def metrics(self) -> Iterable[Metric]:
        return qos_report.metrics(self)
