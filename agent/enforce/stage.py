"""Protects online pods: the enforcement stage of a pass. Offline pods get the smallest CPU weight,
SCHED_IDLE, OOM preference, a CPU budget (CFS quota or a cpuset) and, on cgroup v2, memory.high.

The stage is thin: it reads the pass's inputs into the NodeState (agent/enforce/inputs.py), makes sure
the ledger knows every offline pod's cgroups, asks the restore planner (agent/enforce/strategies/reconcile.py) and
each registered strategy (agent/enforce/strategies/registry.py) for their actions, and hands them all to the one
executor (agent/enforce/executor.py), which records originals before the first write and refuses to write when
the ledger cannot be saved. Each strategy's memo and report are kept here; `enforcement_report` turns the
reports into the `enforcement` section and metrics. `dry_run` swaps the executor: the same decisions,
logged and exported, nothing written (the ledger, and its file, included).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from prometheus_client.metrics_core import Metric

from agent.config_sections.enforcement import EnforcementConfig
from agent.enforce import report as enforcement_report
from agent.enforce.actions import SHARED, Action, Recorded, Report, Restore
from agent.enforce.executor import CgroupExecutor, DryRunExecutor
from agent.enforce.inputs import EnforcementInputs
from agent.enforce.ledger import Ledger
from agent.enforce.originals import Originals
from agent.enforce.parts.registry import parts_protecting
from agent.enforce.strategies import reconcile
from agent.enforce.strategies.cpu_suppression import CpuReport
from agent.enforce.strategies.memory_high import MemoryHighReport
from agent.enforce.strategies.registry import Facts, Strategy, own_originals, pass_needs, report_defaults
from agent.node_state import NodeState, node_state
from agent.sense.slo_scrape import SloScraper
from agent.snapshot import Snapshot
from cgroup import CgroupError, CgroupReader, Layout, PathModel
from cgroup.kubelet_rules import kubelet_oom_score_adj, kubelet_quota, kubelet_shares

__all__ = ["Enforcer", "kubelet_oom_score_adj", "kubelet_quota", "kubelet_shares"]

log = logging.getLogger(__name__)


def detect_facts(layout: Layout, model: PathModel, reader: CgroupReader) -> Facts:
    """What the registry's choice of strategies may depend on, asked of the host once at start."""
    kubepods = model.kubepods()
    return Facts(layout.is_v2, model.tier("besteffort"), reader.supports_cpu_burst(kubepods), kubepods)


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
        memory_high_watermark: Callable[[], float] = lambda: 80.0,
        clock: Callable[[], float] = time.monotonic,
        registered: Sequence[Strategy],
        facts: Facts | None = None,
    ) -> None:
        """`registered`: the strategies, built by the composition root (agent/enforce/strategies/registry.py
        `strategies`). `facts`: what the composition root detected for them (detected here when not given)."""
        self.layout, self.reader, self.config = layout, reader, config
        self.allocatable, self.dry_run, self.clock = allocatable, dry_run, clock
        # dry run: a ledger in memory only; the file (and what it says a previous run changed) stays as it is
        self.ledger = Ledger("" if dry_run else config.ledger_file)
        self.ledger.load()
        self.facts = facts or detect_facts(layout, model, reader)
        self.strategies: tuple[Strategy, ...] = tuple(registered)
        self.reads = pass_needs(self.strategies)  # what they need read each pass (the sampler's pace)
        # a pod's own limits a strategy writes (batch pods' batch values) are its originals: what restore puts back
        self.originals = Originals(layout, reader, self.ledger, config, host_root, own_originals(self.strategies))
        self.executor = (DryRunExecutor if dry_run else CgroupExecutor)(
            layout, reader, self.ledger, self.originals, host_root, clock
        )
        names = [s.name for s in self.strategies]
        if len(set(names)) != len(names):
            raise ValueError(f"two strategies share a name: {names}")
        self.parts = frozenset().union(*(s.parts for s in self.strategies))
        rq = config.rq_protection
        slo = SloScraper() if rq.enabled and rq.slo_feedback and config.cpu_policy != "none" else None
        self.inputs = EnforcementInputs(
            reader,
            config.cpu_manager_state,
            cpuset=config.cpu_policy == "cpuset",
            host_root=host_root,
            memory_high_watermark=memory_high_watermark,
            slo=slo,
        )
        self._memos: dict[str, Any] = {}
        self._warned: set[str] = set()
        # exported to the HTTP thread: only ever replaced, never changed in place
        self.reports: Mapping[str, Report] = {}
        self.touched: tuple[str, ...] = ()
        self.qos_touched: tuple[str, ...] = ()  # online pods the ledger holds QoS values for
        self._publish_touched()
        self.memory_status = "v2 memory.high" if layout.is_v2 else "unsupported on cgroup v1: eviction protects memory"
        self.besteffort_tier_idle: bool | None = None

    # -- what a pass decided (the reports, merged) --------------------------------------------------------
    def report(self) -> dict[str, Any]:
        """Every strategy's report in one mapping, over the defaults of those not active."""
        return enforcement_report.merged(self.reports, report_defaults())

    def _cpu(self) -> CpuReport:
        """The CPU policy's report (an empty one while no pass had a budget, or no CPU policy runs)."""
        return next((r for r in self.reports.values() if isinstance(r, CpuReport)), CpuReport())

    @property
    def budget_cores(self) -> float | None:
        return self._cpu().budget_cores

    @property
    def released(self) -> bool:
        return self._cpu().released

    @property
    def quotas(self) -> dict[str, float]:
        return dict(self._cpu().quota_cores)

    @property
    def memory_high(self) -> dict[str, int]:
        high = next((r for r in self.reports.values() if isinstance(r, MemoryHighReport)), None)
        return dict(high.high_bytes) if high is not None else {}

    @property
    def suppressing(self) -> bool:
        """Offline pods are held by a CPU budget (quotas or a cpuset) rather than released to their limits."""
        cpu = self._cpu()
        return self.config.enabled and (bool(cpu.quota_cores) or cpu.cpuset is not None)

    @property
    def writes(self) -> int:
        return self.executor.writes

    @property
    def errors(self) -> int:
        return self.executor.errors

    @property
    def last_error(self) -> str | None:
        return self.executor.last_error

    # -- the stage -------------------------------------------------------------------------------------
    def on_snapshot(self, snap: Snapshot) -> None:
        """A pass on its own (tests, standalone use): the state from the snapshot and the allocatable."""
        self.on_state(node_state(snap, self.allocatable()))

    def on_state(self, state: NodeState) -> None:
        self._observe_tier()
        if not self.config.enabled:
            if self.ledger.entries or self.ledger.tiers or self.ledger.shared:
                self.restore_all()
            self._own_limits(state)
            return
        state = self.inputs.collect(state)
        snap = state.snapshot
        for p in state.offline:  # the ledger knows every offline pod's cgroups (and their values) at first sight
            self.originals.entry(p, snap)
        gone = [e for uid, e in self.ledger.entries.items() if uid not in snap.pods]
        entries, now = MappingProxyType(self.ledger.entries), self.clock()
        actions: list[Action] = list(reconcile.plan(state, entries, self._tiers(), self.parts))
        memos: dict[str, Any] = {}
        reports: dict[str, Report] = {}
        for strategy in self.strategies:
            recorded = Recorded(entries, MappingProxyType(self.ledger.tiers), self._memos.get(strategy.name), now)
            plan = strategy.plan(state, recorded)
            actions += plan.actions
            memos[strategy.name], reports[strategy.name] = plan.memo, plan.report
            self._log_warnings(plan.report)
            if plan.offline_cpu_cap is not None:  # the strategies after it hold offline pods to it
                state = dataclasses.replace(state, offline_cpu_cap=plan.offline_cpu_cap)
        outcome = self.executor.apply(actions, snap)
        if not outcome.refused:  # refused: nothing happened, the next pass decides again from the same memos
            self._memos, self.reports = memos, reports
        for entry in gone:
            self.executor.forget(entry)  # an open descriptor would keep the removed cgroup alive
        self._publish_touched()

    def _publish_touched(self) -> None:
        """The pods the ledger holds values for, as tuples the HTTP thread reads (the ledger's dict changes
        under the sampling thread)."""
        entries, online = self.ledger.entries, parts_protecting("online")
        self.touched = tuple(sorted(entries))
        self.qos_touched = tuple(uid for uid in self.touched if not online.isdisjoint(entries[uid].parts))

    def _own_limits(self, state: NodeState) -> None:
        """With enforcement off, the strategies of pods' own limits (batch) still run: they are the pods'
        limits as kubelet would have set them, not protection."""
        own = [s for s in self.strategies if s.parts <= parts_protecting("own")]
        entries, now = MappingProxyType(self.ledger.entries), self.clock()
        actions: list[Action] = []
        reports: dict[str, Report] = {}
        for strategy in own:
            plan = strategy.plan(state, Recorded(entries, {}, self._memos.get(strategy.name), now))
            actions += plan.actions
            self._memos[strategy.name], reports[strategy.name] = plan.memo, plan.report
        if actions:
            self.executor.apply(actions, state.snapshot)
        self.reports = reports

    def _observe_tier(self) -> None:
        """Whether the best-effort QoS tier is idle: only there does SCHED_IDLE make a waking online pod run
        before batch (pods' own cpu.idle is weighed against their siblings only; docs/online-qos.md). Colo never
        sets it: today's kubelet fails to start while it is set (kubernetes/kubernetes#136025)."""
        try:
            idle = self.reader.cpu_settings(self.facts.besteffort_tier).idle
        except CgroupError:
            idle = None
        if idle is not None and idle != self.besteffort_tier_idle:
            if idle:
                log.warning(
                    "enforcement: the best-effort QoS tier %s has cpu.idle=1 (not Colo's doing): online pods run "
                    "first; a kubelet without CPU idle for BestEffort cannot start while it is set "
                    "(kubernetes/kubernetes#136025)",
                    self.facts.besteffort_tier,
                )
            elif self.besteffort_tier_idle:
                log.info("enforcement: the best-effort QoS tier %s is no longer idle", self.facts.besteffort_tier)
        self.besteffort_tier_idle = idle

    def _tiers(self) -> dict[str, int]:
        """The QoS tiers a restore looks at: the best-effort one always (a cap left by a run whose ledger was
        lost), every one the ledger recorded, with the period it had before (0: its own)."""
        return {self.facts.besteffort_tier: 0, **self.ledger.tiers}

    def _log_warnings(self, report: Report) -> None:
        """What a report has to log (a pod's malformed annotation, ...): logged once per cause, not every pass."""
        for warning in report.to_log():
            if warning not in self._warned:
                if len(self._warned) >= 1000:
                    self._warned.clear()
                self._warned.add(warning)
                log.warning("enforcement: %s", warning)

    def restore_all(self) -> None:
        shared = (Restore(SHARED, frozenset(self.ledger.shared)),) if self.ledger.shared else ()
        self.executor.apply((*reconcile.everything(self.ledger.entries, self._tiers()), *shared))
        self.ledger.save()
        self._memos, self.reports = {}, {}
        self._publish_touched()

    def stop(self) -> None:
        self.inputs.close()
        if not self.dry_run:
            self.restore_all()

    # -- reporting -------------------------------------------------------------------------------------
    def state(self) -> enforcement_report.EnforcementState:
        """What the section and the metrics show, read once."""
        return enforcement_report.EnforcementState(
            self.dry_run,
            self.config.cpu_policy,
            self.memory_status,
            self.reports,
            self.touched,
            self.writes,
            self.errors,
            self.last_error,
            report_defaults(),
            self.ledger.save_failed,
            not self.ledger.trusted,
            self.besteffort_tier_idle,
        )

    def section(self) -> dict[str, Any]:
        """The `enforcement` key of /api/v1/node."""
        return enforcement_report.section(self.state())

    def metrics(self) -> Iterable[Metric]:
        return enforcement_report.metrics(self.state())
