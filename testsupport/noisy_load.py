"""A recorded noisy node, made deterministic: a seeded generator of (online + system) CPU load per second, and
the release/suppression decisions of the agent's own cfsQuota policy over it (shared by tests and bench/).

The trace's shape (issue 22's field report: spikes to 41–49% cut released offline pods to quota 11 times in
20 minutes):
- a quiet baseline of 22% of allocatable with autocorrelated noise (AR(1), φ 0.8, σ 2 points), clipped to
  5–35%;
- one-second spikes to 41–49% (uniform), a Poisson process of 33 per hour (11 per 20 minutes);
- two-second spikes likewise, 6 per hour (a burst a little longer than one sample);
- real rises: the load steps to 60% and stays 60 s, `RISES_PER_HOUR` of them, evenly spaced — the
  decision must answer them within 2 s.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from agent.config_sections.enforcement import EnforcementConfig
from agent.enforce.strategies import cpu_suppression
from agent.node_state import node_state
from agent.snapshot import NodeSample, Snapshot

CORES = 16.0
RISES_PER_HOUR = 4
RISE_SECONDS = 60


@dataclass(frozen=True, slots=True)
class NoisyTrace:
    loads: tuple[float, ...]  # (online + system) / allocatable, one per second
    rises: tuple[int, ...]  # seconds at which a real rise starts


def noisy_trace(seed: int = 22, seconds: int = 3600) -> NoisyTrace:
    rng = random.Random(seed)
    hours = seconds / 3600
    loads = []
    noise = 0.0
    for _ in range(seconds):
        noise = 0.8 * noise + rng.gauss(0.0, 0.02 * (1 - 0.8**2) ** 0.5)
        loads.append(min(0.35, max(0.05, 0.22 + noise)))
    for length, per_hour in ((1, 33), (2, 6)):
        for _ in range(round(per_hour * hours)):
            start = rng.randrange(0, seconds - length)
            level = rng.uniform(0.41, 0.49)
            for t in range(start, start + length):
                loads[t] = level
    step = seconds // max(1, round(RISES_PER_HOUR * hours))
    rises = tuple(range(step // 2, seconds - RISE_SECONDS, step))
    for start in rises:
        for t in range(start, start + RISE_SECONDS):
            loads[t] = 0.6
    return NoisyTrace(tuple(loads), rises)


def decisions(loads: Sequence[float], config: EnforcementConfig) -> list[bool]:
    """Whether offline pods are released after each one-second pass, by cpu_suppression.budget_and_release."""
    memo = cpu_suppression.CpuMemo()
    out = []
    for i, load in enumerate(loads):
        node = NodeSample(CORES, load * CORES, 64 << 30, 8 << 30, 0)
        snap = Snapshot(i, float(i), 0.0, node, {}, {}, (), 0.0)
        step = cpu_suppression.budget_and_release(node_state(snap, (CORES, float(64 << 30))), memo, config)
        assert step is not None
        total, released, recent = step
        memo = cpu_suppression.CpuMemo(total, released, loads=recent)
        out.append(released)
    return out


def flaps(released: Sequence[bool], short: int = 5) -> int:
    """Suppression episodes of released pods that last at most `short` passes: cut to quota, then released
    again at once (each with its cgroup and ledger writes)."""
    count, i, n = 0, 0, len(released)
    while i < n:
        if i > 0 and released[i - 1] and not released[i]:
            j = i
            while j < n and not released[j]:
                j += 1
            if j < n and j - i <= short:
                count += 1
            i = j
        else:
            i += 1
    return count


def reactions(trace: NoisyTrace, released: Sequence[bool]) -> list[int | None]:
    """For each real rise: passes from its start until offline pods are suppressed (0: the first pass of
    the rise already did), None if never within the rise."""
    out: list[int | None] = []
    for start in trace.rises:
        out.append(next((t - start for t in range(start, start + RISE_SECONDS) if not released[t]), None))
    return out
