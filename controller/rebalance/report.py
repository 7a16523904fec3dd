"""The plan of the last cycle as JSON (`GET /api/v1/rebalance`) and as one log line per change."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from controller.rebalance.moves import CycleOutcome
from controller.rebalance.settings import RebalanceSettings
from controller.rebalance.traits import Amounts
from controller.rebalance.usage import percent


def _pct(a: Amounts) -> dict[str, float]:
    return {"cpu_percent": round(a.cpu, 2), "memory_percent": round(a.memory, 2)}


def _abs(a: Amounts) -> dict[str, float]:
    return {"cpu_cores": round(a.cpu, 4), "memory_bytes": round(a.memory)}


def document(out: CycleOutcome | None, cfg: RebalanceSettings, *, at: float | None, leader: bool) -> dict[str, Any]:
    """Classification, budget, candidates, moves and skips of the last cycle this replica ran."""
    doc: dict[str, Any] = {
        "enabled": cfg.enabled,
        "dry_run": cfg.dry_run,
        "leader": leader,
        "window": cfg.window,
        "at": datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if at is not None else None,
    }
    if out is None:
        return doc
    a = out.assessment
    views = a.views.values()
    doc["thresholds"] = {
        "deviation": cfg.use_deviation_thresholds,
        "low": _pct(a.limits.low),
        "high": _pct(a.limits.high),
        "consecutive_abnormalities": cfg.consecutive_abnormalities,
    }
    doc["nodes"] = {
        "low": [{"node": v.name, **_pct(v.pct)} for v in a.low],
        "high": [
            {"node": v.name, **_pct(v.pct), "abnormal_cycles": v.abnormal_cycles}
            for v in sorted(views, key=lambda v: v.name)
            if v.cls == "high"
        ],
        "normal": sum(1 for v in views if v.cls == "normal"),
        "unknown": len(a.unknown),
    }
    doc["sources"] = [s.name for s in a.sources]
    doc["gate"] = a.gate
    doc["budget"] = _abs(a.budget)
    doc["budget_left"] = _abs(out.plan.budget_left) if a.gate is None else _abs(a.budget)
    doc["candidates"] = {
        node: [
            {
                "pod": c.key,
                "class": "offline" if c.traits.offline else "online",
                "priority": c.traits.priority,
                **_abs(c.usage),
            }
            for c in cands
        ]
        for node, cands in out.candidates.items()
    }
    doc["skipped_pods"] = out.skipped_pods
    doc["pod_poll_failed"] = out.poll_failed
    doc["moves"] = [
        {
            "pod": m.pod,
            "source": m.source,
            "destination": m.destination,
            "reason": m.reason,
            "result": m.result,
            **_abs(m.usage),
            "source_after": _pct(percent(m.source_after, a.views[m.source].allocatable))
            if m.source in a.views
            else None,
        }
        for m in out.plan.moves
    ]
    doc["skips"] = [{"node": s.node, "reason": s.reason, "details": dict(s.details)} for s in out.plan.skips]
    doc["stopped"] = out.plan.stopped
    return doc


def summary(out: CycleOutcome) -> str:
    """One line naming every move and skip: logged when it differs from the previous cycle's."""
    a = out.assessment
    if a.gate is not None:
        return f"nothing to do: {a.gate} ({len(a.low)} low, {len(a.sources)} confirmed high)"
    moves = ", ".join(f"{m.pod} {m.source}->{m.destination} {m.result}" for m in out.plan.moves) or "none"
    skips = ", ".join(f"{s.node}: {s.reason}" for s in out.plan.skips) or "none"
    return f"{len(a.sources)} source(s), {len(a.low)} low node(s); moves: {moves}; skipped: {skips}"
