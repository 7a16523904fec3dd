"""Batch pods' own limits on the real cgroup v1 hierarchy: a pod that asks for kubernetes.io/batch-* sits in
the besteffort tier as kubelet leaves it (cpu.shares 2, no quota, no memory limit) and gets, from the batch
values, the quota, shares and memory limit kubelet would have written for cpu/memory; suppression works on
top and release goes back to the batch limit; online pods are never touched; invalid values are reported,
not written; the limits stay when the agent stops."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.enforce.stage import Enforcer
from agent.snapshot import ContainerBatch, ContainerSample, NodeSample, PodBatch, PodMeta, PodSample, Snapshot
from cgroup import CgroupReader, CgroupWriter
from cgroup.kubelet_rules import BatchResources
from kube import Kube
from tests.agentbuild import build_agent, build_enforcer
from testsupport.cgtree import V1Tree, quota_window
from testsupport.k8sobjects import container_id_of, node, pod
from testsupport.kubeapi.server import FakeKubeAPI
from testsupport.waiting import wait_for

V1 = pytest.mark.cgroupv1
MI = 1 << 20
LIMITS = BatchResources(cpu_request=200, cpu_limit=300, memory_request=256 * MI, memory_limit=256 * MI)
# what kubelet writes for cpu 200m/300m, memory 256Mi: the pod and its one container alike
QUOTA, SHARES = 30_000, 204

# the files kubelet and the runtime own, compared before and after on pods Colo must not touch
FILES = (("cpu", "cpu.shares"), ("cpu", "cpu.cfs_quota_us"), ("cpu", "cpu.cfs_period_us"), ("cpu", "cpu.idle"),
         ("memory", "memory.limit_in_bytes"), ("memory", "memory.soft_limit_in_bytes"))  # fmt: skip


def files_of(tree: V1Tree, cgroups: list[str]) -> dict[tuple[str, str], str]:
    out = {}
    for cg in cgroups:
        for ctrl, name in FILES:
            with open(f"{tree.layout.dir(ctrl, cg)}/{name}") as f:
                out[(cg, name)] = f.read()
    return out


def besteffort_pod(tree: V1Tree, containers: int = 1) -> tuple[str, str, list[str]]:
    """A pod cgroup as kubelet makes it for a BestEffort pod (which a batch pod is to kubelet): cpu.shares 2,
    no CFS quota, no memory limit; its containers as the runtime makes them (shares 2 too)."""
    uid, path, ctrs = tree.pod("besteffort", containers=containers)
    w = CgroupWriter(tree.layout)
    for cg in (path, *ctrs):
        w.set_cpu_shares(cg, 2)
    return uid, path, ctrs


def batch_sample(uid: str, path: str, ctrs: list[str], res: BatchResources = LIMITS, cpu: float = 0.1) -> PodSample:
    batch = PodBatch(tuple(ContainerBatch(f"c{i}", container_id_of(c), res) for i, c in enumerate(ctrs)))
    meta = PodMeta(uid, "jobs", f"job-{uid[:6]}", "offline", batch=batch)
    samples = tuple(ContainerSample(container_id_of(c), c, cpu / len(ctrs), 0, 0, 0, 0.0) for c in ctrs)
    return PodSample(meta, "besteffort", path, cpu, 0, 0, 0, 0, 0.0, samples)


def online_sample(uid: str, path: str, ctrs: list[str], cpu: float) -> PodSample:
    meta = PodMeta(uid, "web", "web", "online", cpu_request_cores=1.0, cpu_limit_cores=1.0,
                   container_cpu_limits={container_id_of(c): 1.0 for c in ctrs})  # fmt: skip
    samples = tuple(ContainerSample(container_id_of(c), c, cpu / len(ctrs), 0, 0, 0, 0.0) for c in ctrs)
    return PodSample(meta, "burstable", path, cpu, 0, 0, 0, 0, 0.0, samples)


def snapshot(pods: list[PodSample], node_cpu: float) -> Snapshot:
    """A 2-core, 8 GiB node; `node_cpu` the busy cores (0.2: quiet enough to release offline pods)."""
    return Snapshot(1, time.monotonic(), time.time(), NodeSample(2.0, node_cpu, 8 << 30, 1 << 30, 0), {},
                    {p.uid: p for p in pods}, (), 0.0)  # fmt: skip


def enforcer(tree: V1Tree, ledger: str = "", *, dry_run: bool = False, **config: Any) -> Enforcer:
    # each pass here decides release on its own load (not two passes in a row, the default): these tests are
    # about the batch values; the confirmation has its own tests (test_strategies, test_enforcement)
    config.setdefault("cpu_release_confirm_passes", 1)
    return build_enforcer(tree.layout, tree.model, ledger, dry_run=dry_run, **config)


@pytest.fixture
def online(v1tree_cgroupfs: V1Tree) -> Iterator[dict[str, Any]]:
    """An online Burstable pod as kubelet makes it (1 core request and limit), with a burner."""
    tree = v1tree_cgroupfs
    uid, path, ctrs = tree.pod("burstable")
    w = CgroupWriter(tree.layout)
    w.set_cpu_shares(path, 1024)
    for cg in (path, *ctrs):
        w.set_cpu_quota(cg, 100_000)
    w.set_memory_limit(path, 512 * MI)
    tree.start(ctrs[0])
    yield {"uid": uid, "path": path, "ctrs": ctrs}


@V1
def test_a_batch_pod_gets_kubelets_values_in_one_pass_held_by_the_kernel_and_kept_at_stop(
    v1tree_cgroupfs: V1Tree, online: dict[str, Any], tmp_path: Path
) -> None:
    tree = v1tree_cgroupfs
    reader = CgroupReader(tree.layout)
    uid, path, (ctr,) = besteffort_pod(tree)
    burner = tree.start(ctr)
    untouched = [online["path"], *online["ctrs"]]
    before = files_of(tree, untouched)
    enf = enforcer(tree, str(tmp_path / "ledger.json"), oom_reapply_seconds=3600)
    pods = [batch_sample(uid, path, [ctr]), online_sample(online["uid"], online["path"], online["ctrs"], 0.1)]
    enf.on_snapshot(snapshot(pods, node_cpu=0.3))  # a quiet node: offline pods run at their own limits
    assert enf.released
    # one pass: quota from the batch-cpu limit, memory limit from the batch-memory limit, pod and container;
    # the container's shares from the batch-cpu request; the pod's weight is the offline baseline's
    assert reader.cpu_settings(path).quota_us == reader.cpu_settings(ctr).quota_us == QUOTA
    assert reader.cpu_settings(path).period_us == 100_000
    assert reader.memory_limit(path) == reader.memory_limit(ctr) == 256 * MI
    assert reader.cpu_settings(ctr).shares == SHARES
    assert reader.cpu_settings(path).idle is True
    assert enf.ledger.entries[uid].shares == SHARES  # the batch shares are what the baseline put aside
    assert enf.section()["batch"]["pods"][uid]["cpu_quota_us"] == QUOTA
    # the kernel holds the burner to its 0.3 CPU (well-margined: never measured above 0.5, busy or not), and
    # to its quota in every CFS period it ran in (SCHED_IDLE: other load on the machine may starve it)
    a, t0 = reader.cpu(ctr), time.monotonic()
    per_period, _ = quota_window(reader, ctr, 2.5)
    b, elapsed = reader.cpu(ctr), time.monotonic() - t0
    used = (b.usage_ns - a.usage_ns) / 1e9 / elapsed
    assert used < 0.5 and per_period <= 0.3 + 0.03, (used, per_period)
    assert burner.poll() is None
    # a second pass writes nothing more: everything holds
    writes = enf.writes
    enf.on_snapshot(snapshot(pods, node_cpu=0.3))
    assert enf.writes == writes and enf.errors == 0
    enf.stop()
    # stop: the baseline goes (idle off, the pod's weight back to its original: the batch shares), the
    # batch limits stay
    s = reader.cpu_settings(path)
    assert (s.shares, s.idle, s.quota_us) == (SHARES, False, QUOTA)
    assert reader.cpu_settings(ctr).quota_us == QUOTA and reader.cpu_settings(ctr).shares == SHARES
    assert reader.memory_limit(path) == reader.memory_limit(ctr) == 256 * MI
    assert files_of(tree, untouched) == before


@V1
def test_a_restarted_container_gets_its_values_on_the_next_pass(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    reader = CgroupReader(tree.layout)
    uid, path, (first,) = besteffort_pod(tree)
    enf = enforcer(tree)
    enf.on_snapshot(snapshot([batch_sample(uid, path, [first])], node_cpu=0.3))
    assert reader.cpu_settings(first).quota_us == QUOTA
    # the container restarts: the runtime makes a new cgroup (BestEffort: shares 2, nothing else), a new ID
    tree.remove(first)
    second = tree.mkdir(f"{path}/{'e' * 64}")
    CgroupWriter(tree.layout).set_cpu_shares(second, 2)
    enf.on_snapshot(snapshot([batch_sample(uid, path, [second])], node_cpu=0.3))
    s = reader.cpu_settings(second)
    assert (s.quota_us, s.shares, reader.memory_limit(second)) == (QUOTA, SHARES, 256 * MI)
    assert list(enf.ledger.entries[uid].containers) == [second]
    assert enf.ledger.entries[uid].containers[second] == QUOTA  # its original: the batch quota
    assert enf.errors == 0


@V1
def test_suppression_on_top_of_the_batch_limit_and_back_on_release(
    v1tree_cgroupfs: V1Tree, online: dict[str, Any]
) -> None:
    tree = v1tree_cgroupfs
    reader = CgroupReader(tree.layout)
    tier = tree.model.tier("besteffort")
    uid, path, (ctr,) = besteffort_pod(tree)
    restarted = f"{path}/{'f' * 64}"
    untouched = [online["path"], *online["ctrs"]]
    before = files_of(tree, untouched)
    enf = enforcer(tree)
    busy = online_sample(online["uid"], online["path"], online["ctrs"], 1.5)
    # a busy node (online 1.5 of 2 cores): the budget is the 0.1-core floor, below the batch limit
    enf.on_snapshot(snapshot([batch_sample(uid, path, [ctr]), busy], node_cpu=1.9))
    assert not enf.released and enf.quotas[uid] == pytest.approx(0.1)
    assert reader.cpu_settings(path).quota_us == reader.cpu_settings(ctr).quota_us == 10_000
    # the tier's cap leaves the batch pod what the budget gives it (batch pods live in the besteffort tier)
    assert (reader.cpu_settings(tier).quota_us or 0) >= 10_000
    assert reader.memory_limit(ctr) == 256 * MI and reader.cpu_settings(ctr).shares == SHARES
    # a container restarts while suppressed: it gets the suppression quota (under its batch limit) at once
    tree.remove(ctr)
    tree.mkdir(restarted)
    CgroupWriter(tree.layout).set_cpu_shares(restarted, 2)
    pod_now = batch_sample(uid, path, [restarted])
    enf.on_snapshot(snapshot([pod_now, busy], node_cpu=1.9))
    assert reader.cpu_settings(restarted).quota_us == 10_000
    assert reader.cpu_settings(restarted).shares == SHARES and reader.memory_limit(restarted) == 256 * MI
    # a budget above the batch limit: never looser than the batch limit
    enf.on_snapshot(snapshot([pod_now, online_sample(online["uid"], online["path"], online["ctrs"], 0.4)], 0.8))
    assert not enf.released and reader.cpu_settings(path).quota_us == QUOTA
    # quiet: released, back to the batch limit (not unlimited), the tier uncapped
    enf.on_snapshot(snapshot([pod_now, online_sample(online["uid"], online["path"], online["ctrs"], 0.1)], 0.2))
    assert enf.released
    assert reader.cpu_settings(path).quota_us == reader.cpu_settings(restarted).quota_us == QUOTA
    assert reader.cpu_settings(tier).quota_us is None
    assert enf.errors == 0
    enf.stop()
    assert reader.cpu_settings(path).quota_us == QUOTA and reader.memory_limit(path) == 256 * MI
    assert files_of(tree, untouched) == before


@V1
def test_values_kubelet_would_reject_are_reported_not_written(
    v1tree_cgroupfs: V1Tree, caplog: pytest.LogCaptureFixture
) -> None:
    tree = v1tree_cgroupfs
    reader = CgroupReader(tree.layout)
    uid, path, (ctr,) = besteffort_pod(tree)
    bad = BatchResources(cpu_request=500, cpu_limit=300, memory_request=256 * MI, memory_limit=128 * MI)
    enf = enforcer(tree)
    with caplog.at_level(logging.WARNING, "agent.enforce"):
        for _ in range(3):
            enf.on_snapshot(snapshot([batch_sample(uid, path, [ctr], bad)], node_cpu=0.3))
    s = reader.cpu_settings(ctr)
    assert (s.quota_us, s.shares, reader.memory_limit(ctr)) == (None, 2, None)
    assert reader.cpu_settings(path).quota_us is None and reader.memory_limit(path) is None
    problems = enf.section()["batch"]["problems"][uid]
    assert any("request 500m above its limit 300m" in p for p in problems)
    assert any("batch-memory request" in p for p in problems)
    lines = [r.getMessage() for r in caplog.records if "kubelet would reject" in r.getMessage()]
    assert len(lines) == 1 and "jobs/job-" in lines[0]


@V1
def test_dry_run_decides_batch_limits_and_writes_none(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    reader = CgroupReader(tree.layout)
    uid, path, (ctr,) = besteffort_pod(tree)
    before = files_of(tree, [path, ctr])
    enf = enforcer(tree, dry_run=True)
    enf.on_snapshot(snapshot([batch_sample(uid, path, [ctr])], node_cpu=0.3))
    assert enf.section()["batch"]["pods"][uid]["memory_limit_bytes"] == 256 * MI
    assert files_of(tree, [path, ctr]) == before and reader.cpu_settings(ctr).quota_us is None


@V1
def test_the_agent_enforces_a_batch_pod_from_the_api_server(
    v1tree_cgroupfs: V1Tree, kube_api: FakeKubeAPI, kube: Kube, tmp_path: Path
) -> None:
    """Through the whole agent: the pod object's kubernetes.io/batch-* resources reach its cgroups."""
    tree = v1tree_cgroupfs
    reader = CgroupReader(tree.layout)
    kube_api.put("nodes", node(cpu="2"))
    uid, path, (ctr,) = besteffort_pod(tree)
    obj = pod("job", uid, qos="BestEffort", container_ids=[container_id_of(ctr)])
    obj["spec"]["containers"][0]["resources"] = {
        "requests": {"kubernetes.io/batch-cpu": "200", "kubernetes.io/batch-memory": str(256 * MI)},
        "limits": {"kubernetes.io/batch-cpu": "300", "kubernetes.io/batch-memory": str(256 * MI)},
    }
    kube_api.put("pods", obj)
    agent, _ = build_agent(tree.layout, tree.model, kube, str(tmp_path / "ledger.json"), interval=0.3)
    agent.start()
    try:
        wait_for(lambda: reader.memory_limit(ctr) == 256 * MI and reader.cpu_settings(ctr).quota_us is not None)
        assert reader.cpu_settings(ctr).shares == SHARES and reader.memory_limit(path) == 256 * MI
        assert (reader.cpu_settings(path).quota_us or 0) <= QUOTA  # the batch limit, or suppression below it
    finally:
        agent.stop()
    assert reader.cpu_settings(path).quota_us == QUOTA and reader.memory_limit(path) == 256 * MI
    assert not os.path.exists(tmp_path / "ledger.json") or '"pods": {}' in (tmp_path / "ledger.json").read_text()


@V1
def test_with_enforcement_off_the_batch_limits_still_hold(v1tree_cgroupfs: V1Tree) -> None:
    """Batch limits are the pod's own, not protection: with enforcement off there is no baseline, and the
    pod cgroup gets its batch shares too."""
    tree = v1tree_cgroupfs
    reader = CgroupReader(tree.layout)
    uid, path, (ctr,) = besteffort_pod(tree)
    enf = enforcer(tree, enabled=False)
    enf.on_snapshot(snapshot([batch_sample(uid, path, [ctr])], node_cpu=1.9))
    for cg in (path, ctr):
        s = reader.cpu_settings(cg)
        assert (s.quota_us, s.shares, s.idle, reader.memory_limit(cg)) == (QUOTA, SHARES, False, 256 * MI)
    assert enf.ledger.entries == {} and enf.section()["batch"]["pods"][uid]["cpu_shares"] == SHARES


@V1
@pytest.mark.parametrize("enabled", [True, False])
def test_a_ledger_that_cannot_be_saved_does_not_block_the_batch_limits(
    v1tree_cgroupfs: V1Tree, tmp_path: Path, enabled: bool
) -> None:
    """Batch limits need no record (nothing of them is put back), so a ledger whose directory is a file still
    lets them be written; with enforcement on, the protection writes that need a record are what is refused."""
    tree = v1tree_cgroupfs
    reader = CgroupReader(tree.layout)
    uid, path, (ctr,) = besteffort_pod(tree)
    not_a_dir = tmp_path / "afile"
    not_a_dir.write_text("x")
    enf = enforcer(tree, str(not_a_dir / "ledger.json"), enabled=enabled)
    enf.on_snapshot(snapshot([batch_sample(uid, path, [ctr])], node_cpu=0.3))
    for cg in (path, ctr):
        s = reader.cpu_settings(cg)
        assert (s.quota_us, reader.memory_limit(cg)) == (QUOTA, 256 * MI)
    assert reader.cpu_settings(ctr).shares == SHARES
    # the pod cgroup's weight is the offline baseline's while enforcement is on (a write that needs a record)
    assert reader.cpu_settings(path).shares == (2 if enabled else SHARES)
    assert (enf.last_error is not None) == enabled  # the refused protection writes are counted and said


@V1
def test_a_refused_suppression_quota_leaves_the_batch_limit_written(
    v1tree_cgroupfs: V1Tree, online: dict[str, Any], tmp_path: Path
) -> None:
    """On a busy node suppression's quota is tighter than the batch one and takes its place in the pass; when
    the ledger cannot be saved that quota is refused, and the pod's own batch quota is written instead."""
    tree = v1tree_cgroupfs
    reader = CgroupReader(tree.layout)
    uid, path, (ctr,) = besteffort_pod(tree)
    not_a_dir = tmp_path / "afile"
    not_a_dir.write_text("x")
    enf = enforcer(tree, str(not_a_dir / "ledger.json"))
    busy = online_sample(online["uid"], online["path"], online["ctrs"], 1.5)
    for _ in range(2):  # and on the next pass, with the entry known in memory
        enf.on_snapshot(snapshot([batch_sample(uid, path, [ctr]), busy], node_cpu=1.9))
        assert reader.cpu_settings(path).quota_us == reader.cpu_settings(ctr).quota_us == QUOTA
        assert reader.memory_limit(ctr) == 256 * MI and enf.last_error is not None
