"""The isolation baseline of offline pods: the smallest CPU weight, SCHED_IDLE and an OOM preference
(`oom_score_adj`), re-applied every `oom_reapply_seconds` (processes started since get kubelet's value);
when each pod's period began is the strategy's memo.

A pod is done at first sight, then every `oom_reapply_seconds` at its own phase of that period (a hash of
its UID): pods first seen together (every offline pod when the agent starts) are not all walked again in
the same pass, so the cost of the baseline is spread over the passes instead of coming in bursts."""

from __future__ import annotations

import zlib
from collections.abc import Mapping

from agent.config import AgentConfig
from agent.config_sections.enforcement import EnforcementConfig
from agent.enforce.actions import Part, Plan, Recorded, SetCpuIdle, SetCpuShares, SetOomScoreAdj
from agent.enforce.parts.baseline import OFFLINE_SHARES, OFFLINE_WEIGHT
from agent.enforce.strategies.registry import Facts, register
from agent.node_state import NodeState


class Baseline:
    name = "baseline"
    parts: frozenset[Part] = frozenset({"baseline"})

    def __init__(self, config: EnforcementConfig) -> None:
        self.reapply, self.score = config.oom_reapply_seconds, config.oom_score_adj

    def plan(self, state: NodeState, recorded: Recorded) -> Plan:
        """Weight first, then idle (a SCHED_IDLE group refuses weight changes), then oom_score_adj, for each
        offline pod whose last baseline is `oom_reapply_seconds` old."""
        last: Mapping[str, float] = recorded.memo or {}
        memo: dict[str, float] = {}
        actions: list[SetCpuShares | SetCpuIdle | SetOomScoreAdj] = []
        entries, now, reapply = recorded.entries, recorded.now, self.reapply
        for p in state.offline:
            uid = p.meta.uid
            if uid not in entries:
                continue
            at = last.get(uid)
            if at is not None and now - at < reapply:
                memo[uid] = at
                continue
            # the first time, the period starts up to a whole period early: the next one comes at the pod's phase
            memo[uid] = now if at is not None else now - reapply * phase(uid)
            actions += [
                SetCpuShares(p.cgroup, OFFLINE_SHARES, "baseline", uid, weight=OFFLINE_WEIGHT),
                SetCpuIdle(p.cgroup, True, "baseline", uid),
                SetOomScoreAdj(p.cgroup, self.score, "baseline", uid),
            ]
        return Plan(tuple(actions), memo)


def phase(uid: str) -> float:
    """A pod's phase of the re-application period, 0 (inclusive) to 1 (exclusive)."""
    return (zlib.crc32(uid.encode()) & 0xFFFF) / 0x10000


def _build(config: AgentConfig, facts: Facts) -> Baseline:
    return Baseline(config.enforcement)


register(Baseline.name, _build, order=10)
