"""The batch_limits strategy as a pure function (tables): kubelet's values from the batch resources, what
it leaves to suppression, problems reported and not written, the split and the tier cap with batch pods,
and a pass-by-pass table showing that the batch quota and the suppression quota never pull against each
other within a pass."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from agent.config_sections.enforcement import BatchConfig, EnforcementConfig
from agent.enforce.actions import (
    Action,
    Plan,
    Recorded,
    Restore,
    SetCpuQuota,
    SetCpuShares,
    SetMemoryLimit,
    merge_wishes,
)
from agent.enforce.ledger import Touched
from agent.enforce.strategies import cpu_suppression
from agent.enforce.strategies.batch_limits import BatchLimits, as_originals, problems_of, targets
from agent.enforce.strategies.cpu_suppression import CfsQuota, OfflineCpu
from agent.node_state import NodeState, node_state
from agent.snapshot import ContainerBatch, ContainerSample, NodeSample, PodBatch, PodMeta, PodSample, Snapshot
from cgroup.kubelet_rules import BatchResources

GI = 1 << 30
POD = "/kubepods/besteffort/podb"


def batch_pod(
    uid: str = "b",
    containers: list[tuple[str, str | None, BatchResources]] | None = None,
    *,
    qos: str = "besteffort",
    cls: str = "offline",
    cpu_request: float = 0.0,
    cpu_limit: float | None = None,
    samples: list[str] | None = None,
) -> PodSample:
    """A batch pod; `containers` as (name, running ID, batch values); `samples` the IDs the sampler saw."""
    if containers is None:
        containers = [("main", "c1", BatchResources(500, 1000, GI, 2 * GI))]
    batch = PodBatch(tuple(ContainerBatch(n, i, r) for n, i, r in containers))
    meta = PodMeta(uid, "jobs", uid, cls, cpu_request_cores=cpu_request, cpu_limit_cores=cpu_limit, batch=batch)  # type: ignore[arg-type]
    seen = [i for _, i, _ in containers if i] if samples is None else samples
    ctrs = tuple(ContainerSample(i, f"/kubepods/{qos}/pod{uid}/{i}", 0.1, 0, 0, 0, 0.0) for i in seen)
    return PodSample(meta, qos, f"/kubepods/{qos}/pod{uid}", 0.1, 0, 0, 0, 0, 0.0, ctrs)


def state_of(pods: list[PodSample], node_cpu: float = 1.0) -> NodeState:
    snap = Snapshot(1, 0.0, 0.0, NodeSample(4.0, node_cpu, 16 * GI, 2 * GI, 0), {}, {p.uid: p for p in pods}, (), 0.0)
    return node_state(snap, (4.0, 16 * GI))


def plan(pods: list[PodSample], entries: dict[str, Touched] | None = None, memo: object = None, **cfg: object) -> Plan:
    return BatchLimits(BatchConfig.model_validate(cfg)).plan(state_of(pods), Recorded(entries or {}, {}, memo))


@pytest.mark.parametrize(
    ("containers", "formula", "period", "cfs_quota", "pod", "first_container"),
    [
        # one container: quota from the limit, shares from the request, memory.limit from the limit
        ([BatchResources(500, 1000, GI, 2 * GI)], "linear", 100_000, True, (100_000, 512, 20, 2 * GI),
         (100_000, 512, 2 * GI)),
        # runc >= 1.3.2's weight formula: 512 shares -> weight 59
        ([BatchResources(500, 1000, GI, 2 * GI)], "quadratic", 100_000, True, (100_000, 512, 59, 2 * GI),
         (100_000, 512, 2 * GI)),
        # kubelet's period
        ([BatchResources(250, 300, None, None)], "linear", 50_000, True, (15_000, 256, 10, None),
         (15_000, 256, None)),
        # a container without a batch-cpu limit: no pod quota and no pod memory limit (as a Burstable pod)
        ([BatchResources(100, 200, None, GI), BatchResources(100, None, None, None)], "linear", 100_000, True,
         (None, 204, 8, None), (20_000, 102, GI)),
        # --cpu-cfs-quota=false
        ([BatchResources(500, 1000, None, None)], "linear", 100_000, False, (None, 512, 20, None), (None, 512, None)),
        # a tiny limit: kubelet's 1 ms floor; a tiny request: the minimum shares
        ([BatchResources(1, 1, None, None)], "linear", 100_000, True, (1000, 2, 1, None), (1000, 2, None)),
    ],
)  # fmt: skip
def test_targets_are_kubelets_values(
    containers: list[BatchResources],
    formula: str,
    period: int,
    cfs_quota: bool,
    pod: tuple[int | None, int, int, int | None],
    first_container: tuple[int | None, int, int | None],
) -> None:
    p = batch_pod(containers=[(f"c{i}", f"id{i}", r) for i, r in enumerate(containers)])
    t = targets(p.meta, formula=formula, period_us=period, cfs_quota=cfs_quota)  # type: ignore[arg-type]
    assert t is not None and not t.problems
    assert (t.pod.quota_us, t.pod.shares, t.pod.weight, t.pod.memory_limit) == pod
    c = t.containers["id0"]
    assert (c.quota_us, c.shares, c.memory_limit) == first_container


def test_init_containers_and_overhead_count_as_kubelet_counts_them() -> None:
    init = BatchResources(2000, 2000, 3 * GI, 3 * GI, init=True)
    app = BatchResources(500, 1000, GI, GI)
    p = batch_pod(containers=[("init", None, init), ("app", "a", app)])
    p.meta = replace(p.meta, batch=replace(p.meta.batch, overhead_milli_cpu=100, overhead_memory=64 << 20))  # type: ignore[arg-type]
    t = targets(p.meta)
    assert t is not None
    # the init container's peak dominates; the overhead is added on top
    assert (t.pod.quota_us, t.pod.shares, t.pod.memory_limit) == (210_000, 2150, 3 * GI + (64 << 20))
    assert set(t.containers) == {"a"}  # a finished init container has no ID (and no cgroup)
    # the scheduler allocates batch-cpu without the overhead; the budget split weighs the pod cgroup's values
    assert p.meta.batch is not None and p.meta.batch.cpu_request_milli == 2000
    assert cpu_suppression.cpu_demand(p) == OfflineCpu(p.uid, 2.1, 2.1)


@pytest.mark.parametrize(
    ("containers", "cpu_request", "cpu_limit", "expected"),
    [
        ([BatchResources(800, 500, None, None)], 0.0, None, "container main: batch-cpu request 800m above its limit"),
        ([BatchResources(None, None, 2 * GI, GI)], 0.0, None, "container main: batch-memory request"),
        ([BatchResources(None, None, None, 100)], 0.0, None, "below one page"),
        ([BatchResources(-1, None, None, None)], 0.0, None, "negative"),
        ([BatchResources(100, 200, None, None)], 0.5, None, "both cpu and kubernetes.io/batch-cpu"),
        ([BatchResources(100, 200, None, None)], 0.0, 1.0, "both cpu and kubernetes.io/batch-cpu"),
    ],
)  # fmt: skip
def test_values_kubelet_would_reject_are_reported_not_written(
    containers: list[BatchResources], cpu_request: float, cpu_limit: float | None, expected: str,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    p = batch_pod(containers=[("main", "c1", r) for r in containers], cpu_request=cpu_request, cpu_limit=cpu_limit)
    with caplog.at_level(logging.WARNING, "agent.enforce"):
        first = plan([p])
        again = plan([p], memo=first.memo)
    assert first.actions == () and again.actions == ()
    assert any(expected in text for text in first.report.fields()["batch"]["problems"]["b"])
    assert any(expected in text for text in problems_of(p.meta))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "jobs/b" in lines[0] and expected in lines[0]  # one line per pod, not per pass


def test_memory_only_batch_pod_keeps_kubelets_cpu_values() -> None:
    p = batch_pod(containers=[("main", "c1", BatchResources(None, None, GI, 2 * GI))], cpu_request=0.5)
    assert plan([p]).actions == (SetMemoryLimit(p.cgroup, 2 * GI, "batch", "b"),
                                 SetMemoryLimit(p.containers[0].cgroup, 2 * GI, "batch", "b"))  # fmt: skip


def _kinds(actions: tuple[object, ...]) -> list[tuple[str, str]]:
    return [(type(a).__name__, a.cgroup.rsplit("/", 1)[-1]) for a in actions]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        # no ledger entry (enforcement off): everything, the pod's weight included; the containers' quotas
        # go with the pod's (one safe-order batch)
        (None, [("SetCpuQuota", "podb"), ("SetCpuShares", "podb"), ("SetCpuShares", "c1"),
                ("SetMemoryLimit", "podb"), ("SetMemoryLimit", "c1")]),
        # an entry: the pod's weight is the baseline's (its original is the batch weight)
        (Touched("b", POD, 512, 100_000, 100_000), [
            ("SetCpuQuota", "podb"), ("SetCpuShares", "c1"), ("SetMemoryLimit", "podb"), ("SetMemoryLimit", "c1")]),
        # suppression holds the quotas: it alone writes them
        (Touched("b", POD, 512, 100_000, 100_000, parts={"quota": {}}), [
            ("SetCpuShares", "c1"), ("SetMemoryLimit", "podb"), ("SetMemoryLimit", "c1")]),
    ],
)  # fmt: skip
def test_what_is_left_to_suppression(entry: Touched | None, expected: list[tuple[str, str]]) -> None:
    p = batch_pod()
    result = plan([p], {"b": entry} if entry else {})
    assert _kinds(result.actions) == expected
    assert all(a.part == "batch" and a.uid == "b" for a in result.actions)  # type: ignore[union-attr]
    quota = next((a for a in result.actions if isinstance(a, SetCpuQuota)), None)
    assert quota is None or (quota.quota_us, quota.period_us, dict(quota.containers)) == (
        100_000, 100_000, {f"{POD}/c1": (100_000, 100_000)})  # fmt: skip
    shares = [a for a in result.actions if isinstance(a, SetCpuShares)]
    assert all((a.shares, a.weight) == (512, 20) for a in shares)
    assert result.report.fields()["batch"]["pods"]["b"] == {
        "cpu_quota_us": 100_000,
        "cpu_shares": 512,
        "memory_limit_bytes": 2 * GI,
    }


def _quota_containers(p: Plan) -> list[str]:
    return [cg.rsplit("/", 1)[-1] for a in p.actions if isinstance(a, SetCpuQuota) for cg in a.containers]


def test_a_restarted_container_gets_its_values_when_first_seen() -> None:
    res = BatchResources(300, 300, None, GI)
    before = batch_pod(containers=[("main", "old", res)])
    assert _quota_containers(plan([before])) == ["old"]
    after = batch_pod(containers=[("main", "new", res)])  # the status now names the new container
    kinds = _kinds(plan([after]).actions)
    assert _quota_containers(plan([after])) == ["new"] and ("SetMemoryLimit", "new") in kinds
    assert not any(name == "old" for _, name in kinds)
    # a cgroup the sampler found that the pod's status does not name yet: nothing guessed for it
    racing = batch_pod(containers=[("main", "old", res)], samples=["new"])
    assert not any(name == "new" for _, name in _kinds(plan([racing]).actions)) and not _quota_containers(
        plan([racing])
    )


def test_online_pods_and_a_disabled_strategy_plan_nothing() -> None:
    p = batch_pod()
    online = PodSample(PodMeta("w", "web", "w", "online", cpu_request_cores=1.0), "burstable",
                       "/kubepods/burstable/podw", 0.5, 0, 0, 0, 0, 0.0, ())  # fmt: skip
    assert plan([online]).actions == ()
    assert plan([p, online], enabled=False).actions == ()
    # a pod with batch values is planned whatever its class (a critical pod with them is online)
    critical = batch_pod(cls="online")
    assert len(plan([critical]).actions) == 5


def test_batch_values_are_the_originals() -> None:
    p = batch_pod()
    t = targets(p.meta)
    # what the cgroups held at first sight: kubelet's BestEffort values
    entry = Touched("b", p.cgroup, 2, None, 100_000, containers={p.containers[0].cgroup: None},
                    container_periods={p.containers[0].cgroup: 100_000})  # fmt: skip
    assert as_originals(entry, p, t, is_v2=False)
    assert (entry.shares, entry.weight, entry.quota_us, entry.period_us) == (512, None, 100_000, 100_000)
    assert entry.containers == {p.containers[0].cgroup: 100_000}
    assert not as_originals(entry, p, t, is_v2=False)  # holds: no ledger write
    assert as_originals(entry, p, t, is_v2=True) and entry.weight == 20
    broken = batch_pod(containers=[("main", "c1", BatchResources(800, 500, None, None))])
    assert not as_originals(entry, broken, targets(broken.meta), is_v2=False)


def test_split_and_tier_cap_use_batch_cpu() -> None:
    cfg = EnforcementConfig()
    small = batch_pod("s", [("main", "s1", BatchResources(500, 600, None, None))])
    big = batch_pod("g", [("main", "g1", BatchResources(1500, None, None, None))])
    be = PodSample(PodMeta("e", "jobs", "e", "offline"), "besteffort", "/kubepods/besteffort/pode", 0.1, 0, 0, 0, 0,
                   0.0, ())  # fmt: skip
    assert (
        cpu_suppression.cpu_demand(small).request_cores == 0.5 and cpu_suppression.cpu_demand(small).limit_cores == 0.6
    )
    assert cpu_suppression.cpu_demand(big).limit_cores is None
    quotas, besteffort = cpu_suppression.Demands().split(2.0, [small, big, be], cfg.besteffort_share)
    # 10% to the best-effort pod; the rest by batch-cpu request, never above the batch-cpu limit
    assert besteffort == pytest.approx(0.2)
    assert quotas == pytest.approx({"s": 0.45, "g": 1.35, "e": 0.2})
    quotas, _ = cpu_suppression.Demands().split(4.0, [small, big, be], cfg.besteffort_share)
    assert quotas["s"] == pytest.approx(0.6)
    # the tier holds all three: its cap is the best-effort slice plus the batch pods' quotas, not the slice
    state = state_of([small, big, be])
    assert cpu_suppression.tier_cap(state, besteffort, cfg, {"s": 0.45, "g": 1.35, "e": 0.2}) == 200_000
    assert cpu_suppression.tier_cap(state, besteffort, cfg) == 20_000  # without the split: the old, squeezing cap


# -- the batch quota and the suppression quota within one pass ----------------------------------------------
BATCH_QUOTA = 60_000  # batch-cpu limit 600m
TIER = "/kubepods/besteffort"


def _apply(actions: list[Action], held: dict[str, int | None], entry: Touched) -> list[int | None]:
    """The executor's handling of the pod cgroup's quota (agent/enforce/executor.py): one SetCpuQuota per cgroup
    (the tightest), what holds (within the tolerance) skipped, a Restore back to the recorded original, the
    ledger's `quota` flag set by suppression's first write and cleared by its restore."""
    writes: list[int | None] = []
    for a in merge_wishes(actions):
        if isinstance(a, Restore) and "quota" in a.parts and "quota" in entry.parts:
            del entry.parts["quota"]
            if held[entry.cgroup] != entry.quota_us:
                writes.append(entry.quota_us)
        elif isinstance(a, SetCpuQuota) and a.cgroup == entry.cgroup:
            cur = held[a.cgroup]
            near = (
                a.tolerance and cur is not None and a.quota_us is not None and abs(a.quota_us - cur) < a.tolerance * cur
            )
            if cur == a.quota_us or near:
                continue
            writes.append(a.quota_us)
            if a.part == "quota":
                entry.parts["quota"] = {}
        if writes:
            held[entry.cgroup] = writes[-1]
    return writes


@pytest.mark.parametrize(
    ("passes", "expected"),
    [
        # node busy CPU per pass (None: not known yet) -> the pod's quota after the pass. A new batch pod on
        # a busy node: the batch quota is not written over the suppression quota, release goes back to it
        ([None, 3.9, 3.9, 2.5, 0.5, 0.5, 2.4, 1.9, 1.9, 0.5],
         [60_000, 10_000, 10_000, 20_000, 60_000, 60_000, 30_000, 60_000, 60_000, 60_000]),
        # a new batch pod on a quiet node, then busy, then quiet again
        ([0.5, 3.9, 0.5, 3.9], [60_000, 10_000, 60_000, 10_000]),
    ],
)  # fmt: skip
def test_batch_and_suppression_quotas_never_pull_against_each_other(
    passes: list[float | None], expected: list[int]
) -> None:
    pod = batch_pod(containers=[("main", "c1", BatchResources(600, 600, None, None))], samples=[])
    # release decided on each pass alone (not two in a row, the default): the passes here are the table's
    cfs, batch = CfsQuota(EnforcementConfig(cpu_release_confirm_passes=1), TIER), BatchLimits(BatchConfig())
    held: dict[str, int | None] = {pod.cgroup: None}  # kubelet's BestEffort pod: no quota
    entry = Touched("b", pod.cgroup, 2, None, 100_000)
    as_originals(entry, pod, batch.targets(pod.meta), is_v2=False)  # recorded at first sight, before any write
    memo, seen = None, []
    for node_cpu in passes:
        snap = Snapshot(1, 0.0, 0.0, NodeSample(4.0, node_cpu, 16 * GI, 2 * GI, 0), {}, {"b": pod}, (), 0.0)
        state = node_state(snap, (4.0, 16 * GI))
        recorded = Recorded({"b": entry}, {})
        first, second = cfs.plan(state, replace(recorded, memo=memo)), batch.plan(state, recorded)
        memo = first.memo
        writes = _apply([*first.actions, *second.actions], held, entry)  # the registry's order
        assert len(writes) <= 1, writes  # one write of the pod's quota per pass at most: never two ways
        quota = held[pod.cgroup]
        assert quota is not None and quota <= BATCH_QUOTA  # never looser than the pod's own limit
        seen.append(quota)
    assert seen == expected
