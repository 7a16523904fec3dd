"""Run-queue protection, in the spirit of Heracles (Lo et al., ISCA 2015): batch CPU steered by what online
pods feel, not by how busy the node looks.

The signal is each online pod's wait share: the share of its threads' runnable time spent waiting for a CPU
since its previous reading (the run_queue collector, /proc schedstat; one reading per pod turn). Each pod is
judged against its own quiet baseline, the lowest share of its last `BASELINE_READINGS` readings:

- a fresh reading *rises* when it is above both baseline × `rise_ratio` and baseline + `rise_points` (and the
  pod waited at least `MIN_DELAY_SECONDS` and was runnable at least `MIN_RUNNABLE_SECONDS` per second: a
  mostly idle pod's share is noise); any rising pod cuts
  the ceiling on the offline CPU budget to `cut_factor` × the lower of the ceiling and the utilization rule's
  budget, at once (a Heracles-style multiplicative decrease: further and faster than the utilization rule);
- a reading is *quiet* below baseline × `quiet_ratio` (or baseline + rise_points / 2); after `quiet_readings`
  quiet fresh readings in a row from every judged pod, each further quiet reading raises the ceiling by
  `grow_share` of allocatable, and once it reaches the utilization rule's budget the ceiling is lifted;
- in between (or a pod with no baseline yet) the ceiling holds: the band between quiet and rise is the
  hysteresis, and only fresh readings act (an online pod's reading stands for several passes);
- a cut that costs batch and does not help is undone: `FUTILE_READINGS` fresh rises in a row while this
  ceiling alone holds offline CPU at the floor (the utilization rule would give it more) mean the pods wait for
  something else (the host's other tenants, the service's own load); the ceiling is lifted and the risen
  pods' baselines restart from their current share, so batch is not held at the floor for nothing. Where the
  utilization rule holds batch at the floor anyway the ceiling stays (it costs nothing, and it keeps the CPU
  policy from releasing); an SLO missed keeps it too: the service's own objective, as Heracles does.
- a pod that declares an SLO is judged by its latency slack instead (`judge_slack`): a miss (p99 above the
  objective) takes the ceiling to the floor at once, as Heracles disables best-effort work on negative slack;
  20% slack or more is quiet, and the ceiling grows back as above.

The utilization rule stays the floor of protection: the CPU policies (cpu_suppression.py) hold offline pods to
the lower of this ceiling and their own budget, and never release them while it is set. A baseline taken while
batch ran is only as low as the best the pod saw: after `BASELINE_READINGS` readings of sustained contention
the baseline follows it (the ceiling then grows back), so a pod whose normal is busy is not starved forever.

`decide` is the pure decision (signal in, ceiling out), table-tested; `RunQueueGuard` is the registered
strategy that feeds it each pass and reports every decision with its reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.config import AgentConfig
from agent.config_sections.enforcement import EnforcementConfig, RunQueueProtectionConfig
from agent.enforce.actions import Part, Plan, Recorded, Report
from agent.enforce.strategies.cpu_suppression import budget
from agent.enforce.strategies.registry import Facts, register
from agent.node_state import NodeState
from agent.sense.pace import PassNeeds

Judgement = Literal["rise", "quiet", "hold", "learning", "idle"]
GuardState = Literal["open", "cut", "holding", "growing"]


@dataclass(frozen=True, slots=True)
class Feel:
    """One online pod's latest reading: its wait share (0-1), seconds waited per second, and the reading's
    monotonic time (the same between the pod's turns); `slack`, when the pod declares an SLO and its last
    scrape gave a p99: (SLO − p99) / SLO, judged instead of the wait share (at `slack_at`)."""

    uid: str
    wait_share: float
    delay: float
    at: float
    slack: float | None = None
    slack_at: float = 0.0


@dataclass(frozen=True, slots=True)
class GuardMemo:
    cap: float | None = None  # cores; None: no ceiling
    history: Mapping[str, tuple[float, ...]] = field(default_factory=dict)  # uid -> recent shares, newest last
    seen: Mapping[str, float] = field(default_factory=dict)  # uid -> time of the last reading judged
    quiet: int = 0  # quiet fresh readings in a row (of every judged pod)
    futile: int = 0  # fresh rises in a row with the ceiling already at the floor


@dataclass(frozen=True, slots=True)
class Decision:
    memo: GuardMemo
    state: GuardState
    reason: str
    judged: Mapping[str, tuple[Judgement, float, float | None]]  # uid -> (judgement, share, baseline)


MIN_DELAY_SECONDS = 0.005  # a pod that waited less per second is not judged: an idle pod's share is noise
#: ... nor a pod whose threads were runnable less than this per second (waiting included): a mostly asleep pod
#: waits for most of its few milliseconds of work whenever anything else runs (on the real node the
#: controller's pod waited 64-81% of ~7 ms a second and cut batch in 4 of 6 runs, not the service)
MIN_RUNNABLE_SECONDS = 0.05
BASELINE_READINGS = 60  # a pod's quiet baseline: the lowest wait share of its last this many readings
SLO_RISE_SLACK = 0.0  # an SLO pod's p99 above its objective rises
SLO_QUIET_SLACK = 0.2  # ... and 20% or more below it is quiet; in between the ceiling holds
#: Fresh rises in a row while the ceiling alone holds offline CPU at the floor: the waits are not batch's doing
#: (another tenant of the host, the service's own load), so the cut is lifted and the baselines start again.
FUTILE_READINGS = 5


def judge_slack(slack: float) -> Judgement:
    """An SLO pod's scrape: negative slack (p99 above the objective) rises, 20% or more slack is quiet."""
    if slack < SLO_RISE_SLACK:
        return "rise"
    return "quiet" if slack >= SLO_QUIET_SLACK else "hold"


def judge(share: float, delay: float, baseline: float | None, c: RunQueueProtectionConfig) -> Judgement:
    """One reading against its pod's baseline."""
    if baseline is None:
        return "learning"
    if share > max(baseline * c.rise_ratio, baseline + c.rise_points):
        busy = delay >= MIN_DELAY_SECONDS and delay >= MIN_RUNNABLE_SECONDS * share  # runnable = delay / share
        return "rise" if busy else "idle"
    if share <= max(baseline * c.quiet_ratio, baseline + c.rise_points / 2):
        return "quiet"
    return "hold"


def decide(
    feels: Sequence[Feel],
    memo: GuardMemo,
    utilization_budget: float,
    allocatable: float,
    c: RunQueueProtectionConfig,
    min_cores: float,
) -> Decision:
    """The ceiling on the offline CPU budget after this pass's readings (module docstring)."""
    history: dict[str, tuple[float, ...]] = {}
    seen: dict[str, float] = {}
    judged: dict[str, tuple[Judgement, float, float | None]] = {}
    rising: list[tuple[str, float, float]] = []
    slo_rising: list[tuple[str, float]] = []
    fresh_quiet, fresh_any, all_quiet = False, False, True
    for f in feels:
        past = memo.history.get(f.uid, ())
        baseline = min(past) if past else None
        fresh = memo.seen.get(f.uid) != f.at
        if fresh:
            past = (*past, f.wait_share)[-BASELINE_READINGS:]  # the baseline learns with or without an SLO
        if f.slack is not None:  # the pod's own latency, while its scrapes give one
            verdict, fresh = judge_slack(f.slack), memo.seen.get(f.uid) != f.slack_at
            judged[f.uid] = (verdict, f.slack, None)
            if verdict == "rise" and fresh:
                slo_rising.append((f.uid, f.slack))
        else:
            verdict = judge(f.wait_share, f.delay, baseline, c)
            judged[f.uid] = (verdict, f.wait_share, baseline)
            if verdict == "rise" and fresh:
                assert baseline is not None
                rising.append((f.uid, f.wait_share, baseline))
        if fresh:
            fresh_any = True
            fresh_quiet = fresh_quiet or verdict == "quiet"
        if verdict in ("rise", "hold"):
            all_quiet = False
        history[f.uid], seen[f.uid] = past, f.at if f.slack is None else f.slack_at
    cap, quiet = memo.cap, memo.quiet
    if rising or slo_rising:
        before = utilization_budget if cap is None else min(cap, utilization_budget)
        # batch held at the floor by this ceiling alone (the utilization rule would give it more): the cut costs batch
        at_floor = cap is not None and cap <= min_cores < utilization_budget
        futile = memo.futile + 1 if at_floor and not slo_rising else 0  # an SLO missed is cut whatever
        if futile >= FUTILE_READINGS:
            for uid, share, _ in rising:
                history[uid] = (share,)
            uid, share, base = max(rising, key=lambda r: r[1] - r[2])
            why = (
                f"online pod {uid} still waited {share:.0%} of its runnable time (baseline {base:.0%}) after "
                f"{futile} readings with offline CPU at the floor: not batch's doing; back to the utilization rule's "
                f"{utilization_budget:.2f} cores, the baseline learned again from now"
            )
            return Decision(GuardMemo(None, history, seen, 0), "open", why, judged)
        # an SLO missed takes batch to the floor at once, as Heracles disables best-effort work on negative slack:
        # halving per 5 s scrape let a service near saturation build a queue it took the whole run to drain
        cap = min_cores if slo_rising else max(min_cores, before * c.cut_factor)
        if slo_rising:
            uid, slack = min(slo_rising, key=lambda r: r[1])
            why = (
                f"online pod {uid} missed its SLO: p99 {-slack:.0%} above it"
                if slack < 0
                else (f"online pod {uid} has {slack:.0%} slack left to its SLO")
            )
        else:
            uid, share, base = max(rising, key=lambda r: r[1] - r[2])
            why = f"online pod {uid} waited {share:.0%} of its runnable time (baseline {base:.0%})"
        reason = f"{why}: offline CPU cut from {before:.2f} to {cap:.2f} cores"
        return Decision(GuardMemo(cap, history, seen, 0, futile), "cut", reason, judged)
    if cap is None:
        return Decision(GuardMemo(None, history, seen, 0), "open", "no online pod waits above its baseline", judged)
    if not all_quiet or not fresh_any:
        why = "an online pod between quiet and rise" if not all_quiet else "no fresh reading"
        held = (
            GuardMemo(cap, history, seen, 0, 0) if not all_quiet else GuardMemo(cap, history, seen, quiet, memo.futile)
        )
        return Decision(held, "holding", f"{why}: offline CPU held at {cap:.2f} cores", judged)
    quiet = quiet + 1 if fresh_quiet else quiet
    if quiet <= c.quiet_readings:
        why = f"quiet reading {quiet} of {c.quiet_readings}"
        return Decision(
            GuardMemo(cap, history, seen, quiet), "holding", f"{why}: offline CPU held at {cap:.2f} cores", judged
        )
    grown = cap + c.grow_share * allocatable
    if grown >= utilization_budget:
        why = f"quiet: offline CPU back to the utilization rule's {utilization_budget:.2f} cores"
        return Decision(GuardMemo(None, history, seen, quiet), "open", why, judged)
    why = f"quiet: offline CPU grown from {cap:.2f} to {grown:.2f} cores"
    return Decision(GuardMemo(grown, history, seen, quiet), "growing", why, judged)


def feels(state: NodeState, own_pod_uid: str = "") -> list[Feel]:
    """The online pods' latest readings that have a wait share, with their SLO slack where they have one; the
    agent's own pod is left out (its own sampling bursts would cut batch: seen in the interference benchmark)."""
    out = []
    slo = state.slo
    for p in state.online:
        if own_pod_uid and p.uid == own_pod_uid:
            continue
        rq = p.run_queue
        if rq is not None and rq.wait_share is not None and rq.delay is not None:
            scrape = slo.get(p.uid) if slo else None
            if scrape is not None and scrape.slack is not None:
                out.append(Feel(p.uid, rq.wait_share, rq.delay, rq.at, scrape.slack, scrape.at))
            else:
                out.append(Feel(p.uid, rq.wait_share, rq.delay, rq.at))
    return out


@dataclass(frozen=True, slots=True)
class GuardReport(Report):
    state: GuardState = "open"
    cap_cores: float | None = None
    reason: str = ""
    pods: Mapping[str, tuple[Judgement, float, float | None]] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        pods = {
            uid: {
                "judgement": j,
                "wait_ratio": round(share, 4),
                "baseline_wait_ratio": None if base is None else round(base, 4),
            }
            if base is not None or j == "learning"
            else {"judgement": j, "slo_slack": round(share, 4)}
            for uid, (j, share, base) in sorted(self.pods.items())
        }
        return {
            "run_queue_guard": {"state": self.state, "cap_cores": self.cap_cores, "reason": self.reason, "pods": pods}
        }


class RunQueueGuard:
    name = "run_queue_guard"
    parts: frozenset[Part] = frozenset()  # writes nothing itself: the CPU policy after it holds the ceiling

    def __init__(self, config: EnforcementConfig, own_pod_uid: str = "") -> None:
        self.config, self.rq, self.own_pod_uid = config, config.rq_protection, own_pod_uid
        self.reads = PassNeeds(online_pods=True)  # each online pod's reading every pass, not every 5

    def plan(self, state: NodeState, recorded: Recorded) -> Plan:
        memo: GuardMemo = recorded.memo or GuardMemo()
        total = budget(state, None, self.config)
        if total is None:  # the node's CPU rate not known yet: nothing to cut from
            return Plan((), memo, GuardReport("open", memo.cap, "no CPU rate yet"), memo.cap)
        d = decide(
            feels(state, self.own_pod_uid),
            memo,
            total,
            state.cpu.allocatable,
            self.rq,
            self.config.cpu_min_offline_cores,
        )
        return Plan((), d.memo, GuardReport(d.state, d.memo.cap, d.reason, d.judged), d.memo.cap)


def _guard(config: AgentConfig, facts: Facts) -> RunQueueGuard | None:
    e = config.enforcement
    on = e.rq_protection.enabled and e.cpu_policy != "none"
    return RunQueueGuard(e, facts.own_pod_uid) if on else None


register(RunQueueGuard.name, _guard, order=15, report_defaults={"run_queue_guard": {}})
