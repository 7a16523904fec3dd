"""The baseline of offline pods: the smallest CPU weight, SCHED_IDLE and an OOM preference. Its record:
whether Colo set cpu.idle, and kubelet's oom_score_adj per cgroup holding processes; the weight's original
is the entry's own (`shares` / `weight`, taken at first sight)."""

from __future__ import annotations

from functools import partial
from typing import Any

from agent.enforce.actions import SetCpuIdle, SetOomScoreAdj
from agent.enforce.ledger import Touched
from agent.enforce.parts.registry import register
from agent.enforce.parts.spec import PartSpec, RecordIO, RestoreIO
from cgroup import CgroupError, CgroupGone

NAME = "baseline"
OFFLINE_SHARES = 2  # Colo's weight for offline pods (v2: weight 1): kubelet never sets it for a pod requesting CPU
OFFLINE_WEIGHT = 1


def _record(io: RecordIO, entry: Touched, action: Any, current: Any) -> bool:
    """kubelet's oom_score_adj per cgroup before Colo's own; whether Colo set cpu.idle (informative)."""
    record = entry.parts.get(NAME)
    changed = record is None
    if record is None:
        record = entry.parts[NAME] = {"idle": False, "oom_score_adj": {}}
    if isinstance(action, SetCpuIdle) and action.idle and not record.get("idle"):
        record["idle"], changed = True, True
    if isinstance(action, SetOomScoreAdj):
        io.record_oom(entry, record.setdefault("oom_score_adj", {}))  # marks the ledger changed when it learns one
    return changed


def _depth(cgroup: str) -> int:
    return cgroup.rstrip("/").count("/")


def _restore(io: RestoreIO, entry: Touched) -> bool:
    cg, w = entry.cgroup, io.writer
    try:
        idle = io.reader.cpu_settings(cg).idle
    except CgroupGone:
        return True
    except CgroupError:
        idle = True  # unknown: clear it anyway
    ok = True
    if idle:  # whatever the ledger says (kubelet never sets it); a SCHED_IDLE group refuses weight changes
        ok &= io.write(f"clear cpu.idle on {cg}", partial(w.set_cpu_idle, cg, False))
    if io.layout.is_v2 and entry.weight is not None:
        ok &= io.write(f"restore cpu.weight of {cg}", partial(w.set_cpu_weight, cg, entry.weight))
    else:
        ok &= io.write(f"restore cpu.shares of {cg}", partial(w.set_cpu_shares, cg, entry.shares))
    # kubelet's values, shallow cgroups first (the write covers descendants; deeper records follow). Back to
    # them needs no CAP_SYS_RESOURCE: the runtime set each process's floor to that very value. Best effort:
    # a refusal is logged but does not keep the entry (a retry would be refused again, every pass).
    scores: dict[str, int] = entry.parts[NAME].setdefault("oom_score_adj", {})
    io.record_oom(entry, scores)  # processes started since the last pass still have kubelet's value
    proc = io.proc_root
    for path, score in sorted(scores.items(), key=lambda kv: _depth(kv[0])):
        io.write(f"restore oom_score_adj {score} in {path}", partial(w.set_oom_score_adj, path, score, proc_root=proc))
    return ok


SPEC = PartSpec(NAME, "offline", record=_record, restore=_restore)
register(SPEC, order=10)  # first: a SCHED_IDLE group refuses weight changes
