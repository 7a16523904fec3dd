"""QoS enforcement on real cgroups: the kernel's counters show offline pods throttled when online pods need
the CPU, OOM preference, restoration, dry-run, the ledger across restarts, the best-effort tier, release of a
quiet node, the cpuset policy; cgroup v2 (cpuset, memory.high) on kernel-format trees."""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.config_sections.enforcement import EnforcementConfig
from agent.enforce.stage import Enforcer, kubelet_oom_score_adj, kubelet_shares
from agent.node_state import NodeState
from agent.pipeline import ClusterPipeline
from agent.runtime import Agent
from agent.snapshot import ContainerSample, NodeSample, PodMeta, PodSample, Snapshot
from cgroup import CgroupReader, CgroupWriter, PathModel, parse_container_id
from kube import Kube
from tests.agentbuild import build_agent, build_enforcer
from testsupport.cgtree import V1Tree
from testsupport.k8sobjects import container_id_of, node, pod
from testsupport.kubeapi.server import FakeKubeAPI
from testsupport.strategies import default_strategies
from testsupport.v2tree import V2Cgroup, V2Tree
from testsupport.waiting import wait_for

V1 = pytest.mark.cgroupv1  # real cgroup v1 hierarchy, root
INTERVAL = 0.5


def _kernel_tick_ns() -> int:
    """One scheduler tick of the running kernel (CONFIG_HZ); the longest tick, 100 Hz, when it is not published."""
    try:
        with gzip.open("/proc/config.gz", "rt") as config:
            hz = re.search(r"^CONFIG_HZ=(\d+)$", config.read(), re.MULTILINE)
    except OSError:
        hz = None
    return 1_000_000_000 // (int(hz.group(1)) if hz else 100)


KERNEL_TICK_NS = _kernel_tick_ns()


def oom_score_adj(pid: int) -> int:
    with open(f"/proc/{pid}/oom_score_adj") as f:
        return int(f.read())


def make_agent(tree: V1Tree, kube: Kube, tmp_path: Path, **enforcement: Any) -> tuple[Agent, ClusterPipeline]:
    return build_agent(tree.layout, tree.model, kube, str(tmp_path / "ledger.json"), interval=INTERVAL, **enforcement)


@pytest.fixture
def colocated(v1tree_cgroupfs: V1Tree, kube_api: FakeKubeAPI) -> Iterator[dict[str, Any]]:
    """One online pod (two burners behind a 0.2-core container quota) and two offline pods (one burner each,
    limit 0.4 core, as kubelet and the runtime would have written it)."""
    tree = v1tree_cgroupfs
    w = CgroupWriter(tree.layout)
    kube_api.put("nodes", node(cpu="2"))
    on_uid, on_pod, (on_ctr,) = tree.pod("burstable")
    w.set_cpu_quota(on_ctr, 20_000)
    online_procs = [tree.start(on_ctr), tree.start(on_ctr)]
    kube_api.put("pods", pod("web", on_uid, container_ids=[container_id_of(on_ctr)], cpu_request="1600m"))
    offline = []
    for i in range(2):
        uid, pod_path, (ctr,) = tree.pod("burstable")
        w.set_cpu_shares(pod_path, kubelet_shares(0.2))
        w.set_cpu_quota(pod_path, 40_000)
        w.set_cpu_quota(ctr, 40_000)
        proc = tree.start(ctr)
        kube_api.put("pods", pod(f"batch-{i}", uid, container_ids=[container_id_of(ctr)], cpu_request="200m",
                                 cpu_limit="400m", annotations={"volcano.sh/qos-level": "-1"}))  # fmt: skip
        offline.append({"uid": uid, "pod": pod_path, "ctr": ctr, "proc": proc})
    yield {
        "tree": tree,
        "online": {"uid": on_uid, "pod": on_pod, "ctr": on_ctr, "procs": online_procs},
        "offline": offline,
    }


@V1
def test_offline_cpu_suppressed_then_restored(colocated: dict[str, Any], kube: Kube, tmp_path: Path) -> None:
    tree: V1Tree = colocated["tree"]
    online, offline = colocated["online"], colocated["offline"]
    reader = CgroupReader(tree.layout)
    agent, link = make_agent(tree, kube, tmp_path, cpu_suppress_threshold=0.9)
    agent.start()
    try:
        wait_for(lambda: link.enforcer.budget_cores is not None and len(link.enforcer.ledger.entries) == 2)
        # isolation baseline: minimal weight, SCHED_IDLE, OOM preference; the online pod is untouched
        for o in offline:  # the ledger entry is saved before the first write: wait for the writes
            wait_for(lambda o=o: reader.cpu_settings(o["pod"]).idle is True)
            settings = reader.cpu_settings(o["pod"])
            # SCHED_IDLE: the kernel pins the group's weight at its idle minimum (reported as 3 shares)
            assert settings.shares in (2, 3) and settings.idle is True
            assert wait_for(lambda o=o: oom_score_adj(o["proc"].pid) == 1000)
        assert reader.cpu_settings(online["pod"]).shares == 1024 and reader.cpu_settings(online["pod"]).idle is False
        assert all(oom_score_adj(p.pid) == 0 for p in online["procs"])
        assert reader.cpu_settings(online["ctr"]).quota_us == 20_000

        # online ramps from 0.2 to 1.6 cores: offline quotas are cut to the 0.1-core floor (how soon is the
        # decision's business, tested on snapshots with an injected clock; here the kernel shows the effect)
        CgroupWriter(tree.layout).set_cpu_quota(online["ctr"], 160_000)
        wait_for(lambda: all((reader.cpu_settings(o["pod"]).quota_us or 10**9) <= 10_000 for o in offline))
        # containers were tightened with their pods (v1 refuses a pod quota below a child's)
        assert all((reader.cpu_settings(o["ctr"]).quota_us or 10**9) <= 10_000 for o in offline)
        # from the kernel's counters, in one window, relative to each other (other load on the machine takes
        # from both): online gets nearly all of what the two got, offline no more than its quotas
        pods = [o["pod"] for o in offline]

        def largest_quota() -> int:  # the budget may move within the window (it follows the node's load)
            return max(reader.cpu_settings(p).quota_us or 0 for p in pods)

        quota = largest_quota()
        on0, off0 = reader.cpu(online["pod"]).usage_ns, sum(reader.cpu(p).usage_ns for p in pods)
        periods0 = sum(reader.cpu(p).nr_periods for p in pods)
        end = time.monotonic() + 3.0
        while time.monotonic() < end:  # the largest quota at any time of the window, not only at its ends
            quota = max(quota, largest_quota())
            time.sleep(0.01)
        on_used = reader.cpu(online["pod"]).usage_ns - on0
        off_used = sum(reader.cpu(p).usage_ns for p in pods) - off0
        periods = sum(reader.cpu(p).nr_periods for p in pods) - periods0
        quota = max(quota, largest_quota())
        # (quiet: 0.99; with two busy loops and five other suites on 2 cores down to 0.8: offline pods run
        # on a CPU whose online burner other load has pushed away)
        assert on_used >= 2 * off_used, (on_used, off_used)
        # the kernel checks a group's runtime at its tick, so a group may overrun its quota by up to a tick per
        # period (measured here: ~1 ms on average), and the window's two ends cut a period of each pod
        allowed = periods * (quota * 1000 + KERNEL_TICK_NS) + 2 * len(pods) * quota * 1000
        assert off_used <= allowed, (off_used, periods, quota)
        section = agent.view.node_sections["enforcement"]()
        assert section["offline_cpu_budget_cores"] == pytest.approx(0.1, abs=0.15)
        # the way back up (release on a quiet node, growth capped per interval) is decided from the node's
        # whole CPU, which other load on this machine is part of: tested on snapshots below
    finally:
        agent.stop()
    # shutdown restores kubelet's values
    for o in offline:
        settings = reader.cpu_settings(o["pod"])
        assert settings.shares == kubelet_shares(0.2) and settings.idle is False and settings.quota_us == 40_000
        assert reader.cpu_settings(o["ctr"]).quota_us == 40_000
    assert not os.path.exists(tmp_path / "ledger.json") or '"pods": {}' in (tmp_path / "ledger.json").read_text()


@V1
def test_dry_run_decides_and_writes_nothing(colocated: dict[str, Any], kube: Kube, tmp_path: Path) -> None:
    tree: V1Tree = colocated["tree"]
    offline = colocated["offline"]
    reader = CgroupReader(tree.layout)
    CgroupWriter(tree.layout).set_cpu_quota(colocated["online"]["ctr"], 160_000)
    # a ledger left by an earlier, real run: a dry run neither reads nor rewrites it
    ledger = tmp_path / "ledger.json"
    ledger.write_text('{"format": "colo-enforcement-ledger", "pods": {}, "tiers": {"/kubepods/besteffort": 100000}}')
    before = (ledger.read_bytes(), ledger.stat().st_mtime_ns)
    agent, link = make_agent(tree, kube, tmp_path, dry_run=True, cpu_suppress_threshold=0.9)
    agent.start()
    try:
        # decided (the online pod is busy, so offline pods get less than their 0.4 core limit) ...
        wait_for(lambda: len(link.enforcer.quotas) == 2 and max(link.enforcer.quotas.values()) < 0.4)
        time.sleep(2 * INTERVAL)
        assert set(agent.view.node_sections["enforcement"]()["offline_cpu_quota_cores"]) == {o["uid"] for o in offline}
        # ... and nothing written
        for o in offline:
            s = reader.cpu_settings(o["pod"])
            assert (s.shares, s.idle, s.quota_us) == (kubelet_shares(0.2), False, 40_000)
            assert oom_score_adj(o["proc"].pid) == 0
        assert link.enforcer.writes == 0 and agent.view.node_sections["enforcement"]()["dry_run"] is True
    finally:
        agent.stop()
    assert (ledger.read_bytes(), ledger.stat().st_mtime_ns) == before
    assert [p.name for p in tmp_path.iterdir() if "ledger" in p.name] == ["ledger.json"]  # no temporary file either


@V1
def test_dry_run_creates_no_ledger_file(v1tree_cgroupfs: V1Tree, tmp_path: Path) -> None:
    tree = v1tree_cgroupfs
    uid, pod_path, (ctr,) = tree.pod("burstable")
    cfg = EnforcementConfig(ledger_file=str(tmp_path / "state" / "ledger.json"))
    enf = Enforcer(
        tree.layout,
        tree.model,
        CgroupReader(tree.layout),
        cfg,
        lambda: (2.0, 8 << 30),
        dry_run=True,
        registered=default_strategies(tree.layout, tree.model, cfg),
    )
    enf.on_snapshot(_snapshot([_pod(uid, "offline", pod_path, [ctr], 0.4)]))
    assert enf.quotas and uid in enf.section()["pods_touched"]  # decided ...
    enf.on_snapshot(_snapshot([_pod(uid, "online", pod_path, [ctr], 0.4)]))
    enf.stop()
    assert not (tmp_path / "state").exists()  # ... and nothing on disk


@V1
def test_malformed_watermark_annotation_does_not_stop_enforcement(
    colocated: dict[str, Any], kube: Kube, kube_api: FakeKubeAPI, tmp_path: Path
) -> None:
    tree: V1Tree = colocated["tree"]
    reader = CgroupReader(tree.layout)
    kube_api.put("nodes", node(cpu="2", annotations={"volcano.sh/evicting-memory-high-watermark": "--5",
                                                     "volcano.sh/evicting-cpu-high-watermark": "\u00b2"}))  # fmt: skip
    agent, link = make_agent(tree, kube, tmp_path, eviction={"enabled": True})
    agent.start()
    try:
        for o in colocated["offline"]:
            wait_for(lambda o=o: reader.cpu_settings(o["pod"]).idle is True)
        wait_for(lambda: len([e for e in kube_api.objects("events") if e["reason"] == "InvalidEvictionWatermark"]) == 2)
        assert link.evictor.watermarks.high == {"cpu": 80, "memory": 80}
    finally:
        agent.stop()


@V1
def test_a_failing_eviction_stage_does_not_stop_enforcement(
    colocated: dict[str, Any], kube: Kube, kube_api: FakeKubeAPI, tmp_path: Path
) -> None:
    tree: V1Tree = colocated["tree"]
    reader = CgroupReader(tree.layout)
    agent, link = make_agent(tree, kube, tmp_path)

    def broken(state: NodeState) -> None:
        raise RuntimeError("a bug in eviction")

    link.evictor.on_state = broken  # type: ignore[method-assign]
    agent.start()
    try:
        for o in colocated["offline"]:
            wait_for(lambda o=o: reader.cpu_settings(o["pod"]).idle is True)
    finally:
        agent.stop()


def _snapshot(pods: list[PodSample], node_cpu: float = 1.5) -> Snapshot:
    """A 2-core node with 8 GiB; by default busy enough (1.5 cores) that offline pods are not released."""
    return Snapshot(1, time.monotonic(), time.time(), NodeSample(2.0, node_cpu, 8 << 30, 1 << 30, 0), {},
                    {p.uid: p for p in pods}, (), 0.0)  # fmt: skip


def _pod(uid: str, cls: str, pod_path: str, ctrs: list[str], limit: float | None, *, qos: str = "burstable",
         request: float = 0.2, cpu: float = 0.1, memory: int = 0) -> PodSample:  # fmt: skip
    meta = PodMeta(uid, "default", uid, cls, cpu_request_cores=request, cpu_limit_cores=limit,  # type: ignore[arg-type]
                   container_cpu_limits={container_id_of(c): limit for c in ctrs})  # fmt: skip
    containers = tuple(ContainerSample(container_id_of(c), c, cpu / len(ctrs), 0, 0, 0, 0.0) for c in ctrs)
    return PodSample(meta, qos, pod_path, cpu, memory, memory, memory, 0, 0.0, containers)


def _enforcer(tree: V1Tree, ledger: str = "", **config: Any) -> Enforcer:
    return build_enforcer(tree.layout, tree.model, ledger, **config)


@V1
def test_ledger_restores_after_restart_when_a_pod_turns_online(v1tree_cgroupfs: V1Tree, tmp_path: Path) -> None:
    tree = v1tree_cgroupfs
    uid, pod_path, (ctr,) = tree.pod("burstable")
    reader = CgroupReader(tree.layout)
    before = reader.cpu_settings(pod_path)
    ledger = str(tmp_path / "ledger.json")
    first = _enforcer(tree, ledger)
    first.on_snapshot(_snapshot([_pod(uid, "offline", pod_path, [ctr], None)]))
    assert reader.cpu_settings(pod_path).idle is True and reader.cpu_settings(pod_path).quota_us is not None
    # the agent dies without restoring; a new one starts and finds the pod now online
    second = _enforcer(tree, ledger)
    assert uid in second.ledger.entries
    second.on_snapshot(_snapshot([_pod(uid, "online", pod_path, [ctr], None)]))
    s = reader.cpu_settings(pod_path)
    assert (s.shares, s.idle, s.quota_us) == (before.shares, False, None)
    assert second.ledger.entries == {}


@V1
def test_restore_puts_back_what_the_cgroups_held_not_what_the_spec_says(v1tree_cgroupfs: V1Tree) -> None:
    """Pod overhead, a sidecar or kubelet's cpuCFSQuotaPeriod make the cgroups differ from the spec."""
    tree = v1tree_cgroupfs
    uid, pod_path, (ctr,) = tree.pod("burstable")
    w, reader = CgroupWriter(tree.layout), CgroupReader(tree.layout)
    w.set_cpu_shares(pod_path, 1500)
    w.set_cpu_quota(pod_path, 45_000, 50_000)
    w.set_cpu_quota(ctr, 20_000, 50_000)
    enf = _enforcer(tree)
    enf.on_snapshot(_snapshot([_pod(uid, "offline", pod_path, [ctr], 0.4)]))  # the spec: 0.4 core, 0.2 request
    assert reader.cpu_settings(pod_path).quota_us == 10_000 and reader.cpu_settings(ctr).quota_us == 10_000
    enf.on_snapshot(_snapshot([_pod(uid, "online", pod_path, [ctr], 0.4)]))
    s = reader.cpu_settings(pod_path)
    assert (s.shares, s.idle, s.quota_us, s.period_us) == (1500, False, 45_000, 50_000)
    c = reader.cpu_settings(ctr)
    assert (c.quota_us, c.period_us) == (20_000, 50_000)
    assert enf.ledger.entries == {} and enf.errors == 0


@V1
def test_restore_clears_sched_idle_the_ledger_does_not_know_about(v1tree_cgroupfs: V1Tree, tmp_path: Path) -> None:
    """A crash between writing cpu.idle and saving the entry: the group must not stay SCHED_IDLE."""
    tree = v1tree_cgroupfs
    uid, pod_path, (ctr,) = tree.pod("burstable")
    w, reader = CgroupWriter(tree.layout), CgroupReader(tree.layout)
    w.set_cpu_shares(pod_path, 2)
    w.set_cpu_idle(pod_path, True)
    entry = {"uid": uid, "cgroup": pod_path, "shares": 204, "quota_us": None, "period_us": 100_000, "idle": False}
    (tmp_path / "ledger.json").write_text(json.dumps({"format": "colo-enforcement-ledger", "pods": {uid: entry}}))
    enf = _enforcer(tree, str(tmp_path / "ledger.json"))
    enf.on_snapshot(_snapshot([_pod(uid, "online", pod_path, [ctr], None)]))
    s = reader.cpu_settings(pod_path)
    assert (s.idle, s.shares) == (False, 204)
    assert enf.ledger.entries == {} and enf.errors == 0


@V1
def test_the_entry_is_on_disk_before_the_first_write(v1tree_cgroupfs: V1Tree, tmp_path: Path) -> None:
    """A pass whose inputs cannot be had (here: the memory watermark) fails before anything is decided or
    written; the next run starts from a consistent record (the executor saves originals before any write:
    see test_executor.py)."""
    tree = v1tree_cgroupfs
    uid, pod_path, (ctr,) = tree.pod("burstable")
    reader = CgroupReader(tree.layout)
    shares = reader.cpu_settings(pod_path).shares
    ledger = str(tmp_path / "ledger.json")

    def watermark() -> float:
        raise RuntimeError("node object broken")

    crashing = build_enforcer(tree.layout, tree.model, ledger, memory_high_watermark=watermark)
    with pytest.raises(RuntimeError):
        crashing.on_snapshot(_snapshot([_pod(uid, "offline", pod_path, [ctr], None)]))
    assert reader.cpu_settings(pod_path).idle is False  # read before any write: nothing was written
    restarted = _enforcer(tree, ledger)
    restarted.on_snapshot(_snapshot([_pod(uid, "online", pod_path, [ctr], None)]))
    s = reader.cpu_settings(pod_path)
    assert (s.idle, s.shares) == (False, shares)


@V1
def test_oom_score_adj_goes_back_to_kubelets_values(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    uid, pod_path, (app, sandbox) = tree.pod("burstable", containers=2)
    sleeper = "import sys\nsys.stdin.read()\n"
    procs = {app: tree.start(app, sleeper), sandbox: tree.start(sandbox, sleeper)}
    # a burstable container's value, and another's (the tests lack CAP_SYS_RESOURCE: nothing below 0 here)
    kubelet = {app: 937, sandbox: 3}
    for ctr, proc in procs.items():
        wait_for(lambda proc=proc: oom_score_adj(proc.pid) == 0)  # the child has entered its cgroup
        with open(f"/proc/{procs[ctr].pid}/oom_score_adj", "w") as f:
            f.write(str(kubelet[ctr]))
    enf = _enforcer(tree)
    enf.on_snapshot(_snapshot([_pod(uid, "offline", pod_path, [app], None, memory=1 << 20)]))
    assert all(oom_score_adj(p.pid) == 1000 for p in procs.values())
    enf.on_snapshot(_snapshot([_pod(uid, "online", pod_path, [app], None, memory=1 << 20)]))
    assert {c: oom_score_adj(p.pid) for c, p in procs.items()} == kubelet


def test_kubelet_oom_score_adj_formula() -> None:
    gib = 1 << 30
    assert kubelet_oom_score_adj("guaranteed", 4 * gib, 16 * gib) == -997
    assert kubelet_oom_score_adj("besteffort", 0, 16 * gib) == 1000
    assert kubelet_oom_score_adj("burstable", 4 * gib, 16 * gib) == 750
    assert kubelet_oom_score_adj("burstable", 0, 16 * gib) == 999  # never a best-effort pod's 1000
    assert kubelet_oom_score_adj("burstable", 16 * gib, 16 * gib) == 3  # always above a guaranteed pod's


@V1
def test_restarted_container_gets_its_own_original_and_a_vanished_one_does_not_block(
    v1tree_cgroupfs: V1Tree,
) -> None:
    tree = v1tree_cgroupfs
    uid, pod_path, (first,) = tree.pod("burstable")
    w, reader = CgroupWriter(tree.layout), CgroupReader(tree.layout)
    w.set_cpu_quota(pod_path, 40_000)
    w.set_cpu_quota(first, 40_000)
    enf = _enforcer(tree, cpu_min_offline_cores=0.05)
    enf.on_snapshot(_snapshot([_pod(uid, "offline", pod_path, [first], 0.4)], node_cpu=1.1))  # budget 0.3
    assert reader.cpu_settings(pod_path).quota_us == reader.cpu_settings(first).quota_us == 30_000
    # the container restarts: the old cgroup goes, the runtime creates a new one with its own quota
    tree.remove(first)
    second = tree.mkdir(f"{pod_path}/{'b' * 64}")
    w.set_cpu_quota(second, 30_000)
    restarted = [_pod(uid, "offline", pod_path, [second], 0.4)]

    def tightened() -> bool:  # budget 0.05; the kernel may take a moment to let go of the removed cgroup
        enf.on_snapshot(_snapshot(restarted, node_cpu=1.5))
        return reader.cpu_settings(pod_path).quota_us == 5_000

    wait_for(tightened)
    assert reader.cpu_settings(second).quota_us == 5_000
    assert list(enf.ledger.entries[uid].containers) == [second]
    # the pod turns online: everything back, including the new container's own quota
    errors = enf.errors
    enf.on_snapshot(_snapshot([_pod(uid, "online", pod_path, [second], 0.4)]))
    assert reader.cpu_settings(pod_path).quota_us == 40_000 and reader.cpu_settings(second).quota_us == 30_000
    assert enf.ledger.entries == {} and enf.errors == errors


@V1
def test_restore_skips_a_container_that_vanished(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    uid, pod_path, (gone, kept) = tree.pod("burstable", containers=2)
    w, reader = CgroupWriter(tree.layout), CgroupReader(tree.layout)
    for cg in (pod_path, gone, kept):
        w.set_cpu_quota(cg, 40_000)
    enf = _enforcer(tree)
    enf.on_snapshot(_snapshot([_pod(uid, "offline", pod_path, [gone, kept], 0.4)]))
    assert reader.cpu_settings(kept).quota_us == 10_000
    tree.remove(gone)  # between two passes, so the entry still lists it
    enf.on_snapshot(_snapshot([_pod(uid, "online", pod_path, [gone, kept], 0.4)]))
    assert reader.cpu_settings(pod_path).quota_us == reader.cpu_settings(kept).quota_us == 40_000
    assert enf.ledger.entries == {} and enf.errors == 0


@V1
def test_besteffort_tier_cap_moves_with_its_pods_in_one_safe_batch(v1tree_cgroupfs: V1Tree, tmp_path: Path) -> None:
    tree = v1tree_cgroupfs
    reader = CgroupReader(tree.layout)
    tier = tree.model.tier("besteffort")
    made = [tree.pod("besteffort") for _ in range(2)]
    offline = [_pod(uid, "offline", path, ctrs, None, qos="besteffort", request=0.0) for uid, path, ctrs in made]
    ledger = str(tmp_path / "ledger.json")
    enf = _enforcer(tree, ledger, cpu_release_below=0)
    enf.on_snapshot(_snapshot(offline, node_cpu=1.5))  # budget 0.1: 0.05 core each, the tier at 0.1
    assert [reader.cpu_settings(p).quota_us for _, p, _ in made] == [5_000, 5_000]
    assert reader.cpu_settings(tier).quota_us == 10_000
    # the budget grows to 0.3 (growth capped): the pods' new quotas are above the tier's old cap, which
    # v1 only accepts once the tier has been raised
    enf.on_snapshot(_snapshot(offline, node_cpu=0.5))
    assert [reader.cpu_settings(p).quota_us for _, p, _ in made] == [15_000, 15_000]
    assert reader.cpu_settings(tier).quota_us == 30_000 and enf.errors == 0
    # an online pod in the tier: uncapped (its pods keep their own quotas)
    on_uid, on_path, on_ctrs = tree.pod("besteffort")
    online = _pod(on_uid, "online", on_path, on_ctrs, None, qos="besteffort", request=0.0)
    enf.on_snapshot(_snapshot([*offline, online], node_cpu=0.5))
    assert reader.cpu_settings(tier).quota_us is None
    enf.on_snapshot(_snapshot(offline, node_cpu=0.5))
    assert reader.cpu_settings(tier).quota_us is not None
    assert json.loads(Path(ledger).read_text())["tiers"] == {tier: 100_000}
    # no offline pod left: uncapped
    enf.on_snapshot(_snapshot([], node_cpu=0.5))
    assert reader.cpu_settings(tier).quota_us is None and enf.errors == 0
    assert json.loads(Path(ledger).read_text())["tiers"] == {}


@V1
def test_a_restart_with_cpu_policy_none_restores_quotas_and_the_tier(v1tree_cgroupfs: V1Tree, tmp_path: Path) -> None:
    tree = v1tree_cgroupfs
    reader = CgroupReader(tree.layout)
    tier = tree.model.tier("besteffort")
    uid, pod_path, (ctr,) = tree.pod("besteffort")
    offline = [_pod(uid, "offline", pod_path, [ctr], None, qos="besteffort", request=0.0)]
    ledger = str(tmp_path / "ledger.json")
    _enforcer(tree, ledger).on_snapshot(_snapshot(offline))
    assert reader.cpu_settings(pod_path).quota_us == 10_000 and reader.cpu_settings(tier).quota_us == 10_000
    # the agent dies; it comes back with the CFS quota policy switched off
    after = _enforcer(tree, ledger, cpu_policy="none")
    after.on_snapshot(_snapshot(offline))
    s = reader.cpu_settings(pod_path)
    assert (s.quota_us, s.idle) == (None, True)  # quotas restored, the baseline stays
    assert reader.cpu_settings(tier).quota_us is None
    assert "quota" not in after.ledger.entries[uid].parts and after.ledger.tiers == {}


@V1
def test_an_idle_best_effort_tier_is_reported_warned_once_and_never_written(
    v1tree_cgroupfs: V1Tree, caplog: pytest.LogCaptureFixture
) -> None:
    """Only the kubelet (or an operator) makes the tier idle: the agent says so, and its restore leaves it."""
    tree = v1tree_cgroupfs
    reader = CgroupReader(tree.layout)
    tier = tree.model.tier("besteffort")
    uid, pod_path, (ctr,) = tree.pod("besteffort")
    offline = [_pod(uid, "offline", pod_path, [ctr], None, qos="besteffort", request=0.0)]
    if reader.cpu_settings(tier).idle is None:
        pytest.skip("this kernel has no cpu.idle")
    enf = _enforcer(tree)
    enf.on_snapshot(_snapshot(offline))
    assert enf.section()["besteffort_tier_idle"] is False
    tree.write("cpu", tier, "cpu.idle", "1")
    try:
        with caplog.at_level(logging.INFO, logger="agent.enforce.stage"):
            enf.on_snapshot(_snapshot(offline))
            enf.on_snapshot(_snapshot(offline))
        assert enf.section()["besteffort_tier_idle"] is True
        assert [r.levelno for r in caplog.records if "cpu.idle=1" in r.getMessage()] == [logging.WARNING]
        (family,) = [m for m in enf.metrics() if m.name == "colo_besteffort_tier_idle"]
        assert [s.value for s in family.samples] == [1.0]
        assert reader.cpu_settings(tier).quota_us == 10_000  # the tier cap still applies
        enf.stop()
        assert reader.cpu_settings(tier).idle is True and reader.cpu_settings(tier).quota_us is None
    finally:
        tree.write("cpu", tier, "cpu.idle", "0")


@V1
def test_quiet_node_releases_offline_pods_with_hysteresis(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    reader = CgroupReader(tree.layout)
    uid, unlimited, (u_ctr,) = tree.pod("burstable")
    luid, limited, (l_ctr,) = tree.pod("burstable")
    CgroupWriter(tree.layout).set_cpu_quota(limited, 40_000)
    pods = [_pod(uid, "offline", unlimited, [u_ctr], None), _pod(luid, "offline", limited, [l_ctr], 0.4)]
    enf = _enforcer(tree)  # release below 30% of allocatable, suppress again above 40%

    def quotas() -> list[int | None]:
        return [reader.cpu_settings(p).quota_us for p in (unlimited, limited)]

    enf.on_snapshot(_snapshot(pods, node_cpu=1.5))  # online + system 1.3 cores of 2: suppressed
    assert quotas() == [5_000, 5_000] and not enf.released
    enf.on_snapshot(_snapshot(pods, node_cpu=0.4))  # 0.2 cores: one quiet pass is not enough
    assert not enf.released
    enf.on_snapshot(_snapshot(pods, node_cpu=0.4))  # the second in a row: released to their own limits
    assert quotas() == [None, 40_000] and enf.released
    assert all("quota" not in e.parts for e in enf.ledger.entries.values())
    enf.on_snapshot(_snapshot(pods, node_cpu=0.9))  # 0.7 cores, 35%: between the two, stays released
    assert quotas() == [None, 40_000] and enf.released
    enf.on_snapshot(_snapshot(pods, node_cpu=1.1))  # 0.9 cores, 45%: a one-pass spike changes nothing
    assert quotas() == [None, 40_000] and enf.released
    enf.on_snapshot(_snapshot(pods, node_cpu=0.9))
    enf.on_snapshot(_snapshot(pods, node_cpu=1.1))  # 45% twice in a row: suppressed again
    enf.on_snapshot(_snapshot(pods, node_cpu=1.1))
    assert all(q is not None and q < 40_000 for q in quotas()) and not enf.released
    assert reader.cpu_settings(unlimited).idle is True  # released pods keep the baseline all along
    assert enf.errors == 0


@V1
def test_cpuset_policy_confines_and_restores(v1tree_cgroupfs: V1Tree, tmp_path: Path) -> None:
    tree = v1tree_cgroupfs
    uid, pod_path, (ctr,) = tree.pod("burstable")
    reader = CgroupReader(tree.layout)
    everything = reader.cpuset(pod_path)
    state = tmp_path / "cpu_manager_state"
    state.write_text('{"policyName":"static","defaultCpuSet":"1","entries":{"x":{"app":"0"}},"checksum":1}')
    enf = _enforcer(tree, cpu_policy="cpuset", cpu_manager_state=str(state))
    enf.on_snapshot(_snapshot([_pod(uid, "offline", pod_path, [ctr], None)]))
    if len(everything) > 1:
        assert reader.cpuset(pod_path) == reader.cpuset(ctr) == frozenset({max(everything)})
        assert 0 not in reader.cpuset(pod_path)  # CPU 0 is a guaranteed pod's, exclusively
    enf.stop()
    assert reader.cpuset(pod_path) == reader.cpuset(ctr) == everything


@V1
def test_cpuset_moves_to_a_disjoint_set_through_the_union(v1tree_cgroupfs: V1Tree, tmp_path: Path) -> None:
    tree = v1tree_cgroupfs
    uid, pod_path, (ctr,) = tree.pod("burstable")
    reader = CgroupReader(tree.layout)
    everything = reader.cpuset(pod_path)
    if len(everything) < 2:
        pytest.skip("needs two CPUs")
    low, high = min(everything), max(everything)
    state = tmp_path / "cpu_manager_state"
    state.write_text('{"policyName":"static","entries":{}}')
    enf = _enforcer(tree, cpu_policy="cpuset", cpu_manager_state=str(state))
    pods = [_pod(uid, "offline", pod_path, [ctr], None)]
    enf.on_snapshot(_snapshot(pods))
    assert reader.cpuset(pod_path) == reader.cpuset(ctr) == frozenset({high})
    # the highest CPU becomes a guaranteed container's: the offline pod moves to another one
    state.write_text(f'{{"policyName":"static","entries":{{"x":{{"app":"{high}"}}}}}}')
    enf.on_snapshot(_snapshot(pods))
    assert high not in reader.cpuset(pod_path) and reader.cpuset(ctr) == reader.cpuset(pod_path)
    assert len(reader.cpuset(pod_path)) == 1 and low in everything and enf.errors == 0
    enf.stop()
    assert reader.cpuset(pod_path) == reader.cpuset(ctr) == everything


def _v2(tmp_path: Path, **config: Any) -> tuple[V2Tree, PathModel, Enforcer]:
    """A v2 host (files as the kernel shows them) whose QoS tiers inherit CPUs 0-3 (cpuset.cpus empty)."""
    tree, model = V2Tree(str(tmp_path / "host")), PathModel("systemd")
    for qos in ("burstable", "besteffort"):
        tree.put(model.tier(qos), V2Cgroup(cpuset_cpus="", cpuset_effective="0-3"))  # type: ignore[arg-type]
    return tree, model, build_enforcer(tree.layout, model, str(tmp_path / "ledger.json"), **config)


def _v2_pod(tree: V2Tree, model: PathModel, n: int) -> tuple[str, str, str]:
    uid = f"0000000{n}-1111-2222-3333-444444444444"
    path = model.pod("burstable", uid)
    tree.put(path, V2Cgroup(cpuset_cpus="", cpuset_effective="0-3"))
    ctr = model.container("burstable", uid, parse_container_id(f"containerd://{str(n) * 64}"))
    tree.put(ctr, V2Cgroup(cpu_max=(50_000, 100_000), cpuset_cpus="", cpuset_effective="0-3"))
    return uid, path, ctr


def test_v2_cpuset_policy_uses_the_parents_effective_cpus(tmp_path: Path) -> None:
    tree, model, enf = _v2(tmp_path, cpu_policy="cpuset", cpu_manager_state=str(tmp_path / "none"))
    uid, path, ctr = _v2_pod(tree, model, 1)
    enf.on_snapshot(_snapshot([_pod(uid, "offline", path, [ctr], None)]))  # budget 0.1 core: one CPU
    assert (tree.read(path, "cpuset.cpus"), tree.read(ctr, "cpuset.cpus")) == (b"3", b"3")
    assert enf.errors == 0 and enf.section()["offline_cpuset"] == "3"
    enf.stop()  # v2 pods inherit (empty cpuset.cpus), which cannot be written back: the parent's CPUs
    assert (tree.read(path, "cpuset.cpus"), tree.read(ctr, "cpuset.cpus")) == (b"0-3", b"0-3")


def test_v2_memory_high_is_published_whole_and_restored_when_switched_off(tmp_path: Path) -> None:
    tree, model, enf = _v2(tmp_path)
    made = [_v2_pod(tree, model, n) for n in (1, 2)]
    pods = [_pod(uid, "offline", path, [ctr], None, memory=256 << 20) for uid, path, ctr in made]
    # what the HTTP thread would see in the middle of a pass: the previous pass's values, whole
    seen: list[dict[str, int]] = []
    read = enf.reader.memory_high

    def spying(cgroup: str) -> int | None:
        seen.append(dict(enf.memory_high))
        return read(cgroup)

    enf.reader.memory_high = spying  # type: ignore[method-assign]
    enf.on_snapshot(_snapshot(pods))
    first = dict(enf.memory_high)
    assert len(first) == 2 and seen == [{}, {}]
    seen.clear()
    enf.on_snapshot(_snapshot(pods[:1]))
    assert seen == [first] and set(enf.memory_high) == {made[0][0]}
    assert int(tree.read(made[0][1], "memory.high")) == enf.memory_high[made[0][0]] > 0
    assert tree.read(made[1][1], "memory.high") == b"max"  # the pod that left got its original back
    # a restart with memory.high switched off puts the original back and keeps the rest
    _, _, after = _v2(tmp_path, memory_high=False)
    after.on_snapshot(_snapshot(pods[:1]))
    assert tree.read(made[0][1], "memory.high") == b"max"
    assert tree.read(made[0][1], "cpu.idle") == b"1" and "memory_high" not in after.ledger.entries[made[0][0]].parts


@V1
def test_unknown_cpu_on_the_first_pass_never_reads_as_idle(v1tree_cgroupfs: V1Tree, tmp_path: Path) -> None:
    """A restart: the first pass has no CPU rate yet. It must not count as a quiet node and release the
    offline pods the previous run suppressed (issue 15: 14 of 25 restarts did)."""
    tree = v1tree_cgroupfs
    reader = CgroupReader(tree.layout)
    uid, pod_path, (ctr,) = tree.pod("burstable")
    ledger = str(tmp_path / "ledger.json")
    pods = [_pod(uid, "offline", pod_path, [ctr], None)]
    first = _enforcer(tree, ledger)
    first.on_snapshot(_snapshot(pods, node_cpu=1.5))
    suppressed = reader.cpu_settings(pod_path).quota_us
    assert suppressed is not None
    restarted = _enforcer(tree, ledger)
    unknown = [_pod(uid, "offline", pod_path, [ctr], None, cpu=0.0)]
    unknown[0].cpu_cores = None
    restarted.on_snapshot(_snapshot(unknown, node_cpu=None))  # type: ignore[arg-type]
    assert reader.cpu_settings(pod_path).quota_us == suppressed and not restarted.released
    restarted.on_snapshot(_snapshot(pods, node_cpu=1.5))  # known and busy: still suppressed
    assert reader.cpu_settings(pod_path).quota_us is not None and not restarted.released


def _fds_under(dirs: list[str]) -> list[str]:
    """This process's open descriptors that point into one of `dirs`."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if any(target == d or target.startswith(d + "/") for d in dirs):
            out.append(target)
    return out


@V1
def test_churned_pods_leave_no_descriptor_on_their_removed_cgroups(
    v1tree_cgroupfs: V1Tree, kube: Kube, kube_api: FakeKubeAPI, tmp_path: Path
) -> None:
    """Offline pods whose API object goes before their cgroup (kubelet's order) are restored after the sampler
    has forgotten them; once their cgroups are removed no descriptor may point there (each keeps a removed
    cgroup alive in the kernel; ~2500 such pods exhaust the descriptor limit)."""
    tree = v1tree_cgroupfs

    def idle(pod_path: str) -> bool:  # read without a cached descriptor: this process's are counted
        with open(f"{tree.layout.dir('cpu', pod_path)}/cpu.idle") as f:
            return f.read().strip() == "1"

    kube_api.put("nodes", node(cpu="2"))
    agent, link = make_agent(tree, kube, tmp_path)
    agent.start()
    removed: list[str] = []
    try:
        for round_ in range(2):
            churned = []
            for i in range(3):
                uid, pod_path, (ctr,) = tree.pod("burstable")
                kube_api.put("pods", pod(f"batch-{round_}-{i}", uid, container_ids=[container_id_of(ctr)],
                                         cpu_request="100m", annotations={"volcano.sh/qos-level": "-1"}))  # fmt: skip
                churned.append((uid, pod_path, f"batch-{round_}-{i}"))
            for _, pod_path, _ in churned:
                wait_for(lambda p=pod_path: idle(p), timeout=10)
            for _, _, name in churned:
                kube_api.delete("pods", "default", name)  # the API object goes first ...
            for uid, pod_path, _ in churned:
                wait_for(lambda u=uid: u not in link.enforcer.ledger.entries, timeout=10)  # ... restored ...
                assert not idle(pod_path)
                removed += [tree.layout.dir(c, pod_path) for c in tree.controllers()]
                tree.remove(pod_path)  # ... then kubelet removes the cgroup
        time.sleep(3 * INTERVAL)
        assert _fds_under(removed) == []
    finally:
        agent.stop()


def _ledger_gauges(enf: Enforcer) -> dict[str, float]:
    """The ledger's state as /metrics shows it (what ColoEnforcementLedger* alert on)."""
    return {m.name: m.samples[0].value for m in enf.metrics() if m.name.startswith("colo_enforcement_ledger_")}


@V1
def test_no_write_while_the_ledger_cannot_be_saved(v1tree_cgroupfs: V1Tree, tmp_path: Path) -> None:
    """The promise "recorded before the first write": a ledger that cannot reach the disk stops the writes."""
    tree = v1tree_cgroupfs
    uid, pod_path, (ctr,) = tree.pod("burstable")
    reader = CgroupReader(tree.layout)
    before = reader.cpu_settings(pod_path)
    (tmp_path / "not-a-directory").write_text("")
    enf = _enforcer(tree, str(tmp_path / "not-a-directory" / "ledger.json"))
    enf.on_snapshot(_snapshot([_pod(uid, "offline", pod_path, [ctr], None)]))
    enf.on_snapshot(_snapshot([_pod(uid, "offline", pod_path, [ctr], None)]))
    s = reader.cpu_settings(pod_path)
    assert (s.shares, s.idle, s.quota_us) == (before.shares, before.idle, before.quota_us)
    assert enf.writes == 0 and "ledger could not be saved" in (enf.last_error or "")
    assert _ledger_gauges(enf)["colo_enforcement_ledger_save_failed"] == 1.0


@V1
def test_a_corrupt_ledger_is_kept_aside_and_originals_come_from_the_spec(
    v1tree_cgroupfs: V1Tree, tmp_path: Path
) -> None:
    """A damaged ledger after a crash: the cgroups hold Colo's own values (weight 2, SCHED_IDLE, a 5 ms quota).
    They must not become the "originals": restore gives kubelet's values for the spec (shares from the
    request, quota from the limit), and the damaged file is kept, not overwritten."""
    tree = v1tree_cgroupfs
    uid, pod_path, (ctr,) = tree.pod("burstable")
    w, reader = CgroupWriter(tree.layout), CgroupReader(tree.layout)
    w.set_cpu_shares(pod_path, 2)
    w.set_cpu_quota(pod_path, 5_000)
    w.set_cpu_quota(ctr, 5_000)
    w.set_cpu_idle(pod_path, True)
    ledger = tmp_path / "ledger.json"
    ledger.write_bytes(b'{"format": "colo-enforcement-ledger", "pods": {"' + uid.encode() + b'": {"uid"')
    enf = _enforcer(tree, str(ledger))
    assert not enf.ledger.trusted and enf.ledger.problem is not None
    assert _ledger_gauges(enf) == {"colo_enforcement_ledger_save_failed": 0.0, "colo_enforcement_ledger_untrusted": 1.0}
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("ledger.json.corrupt-")]
    assert len(aside) == 1 and aside[0].read_bytes().endswith(b'{"uid"')
    pods = [_pod(uid, "offline", pod_path, [ctr], 0.4, request=0.3)]
    enf.on_snapshot(_snapshot(pods))
    assert enf.ledger.entries[uid].from_spec
    enf.on_snapshot(_snapshot([_pod(uid, "online", pod_path, [ctr], 0.4, request=0.3)]))
    s, c = reader.cpu_settings(pod_path), reader.cpu_settings(ctr)
    assert (s.shares, s.idle, s.quota_us, s.period_us) == (kubelet_shares(0.3), False, 40_000, 100_000)
    assert (c.quota_us, c.period_us) == (40_000, 100_000)
    assert enf.errors == 0


@V1
def test_a_lost_ledger_takes_the_quota_from_the_spec_too(v1tree_cgroupfs: V1Tree, tmp_path: Path) -> None:
    """No ledger at all, but the pod carries Colo's marks (SCHED_IDLE): its quota is Colo's as well."""
    tree = v1tree_cgroupfs
    uid, pod_path, (ctr,) = tree.pod("burstable")
    w, reader = CgroupWriter(tree.layout), CgroupReader(tree.layout)
    w.set_cpu_shares(pod_path, 2)
    w.set_cpu_quota(pod_path, 5_000)
    w.set_cpu_idle(pod_path, True)
    enf = _enforcer(tree, str(tmp_path / "ledger.json"))
    enf.on_snapshot(_snapshot([_pod(uid, "offline", pod_path, [ctr], None, request=0.5)]))
    enf.on_snapshot(_snapshot([_pod(uid, "online", pod_path, [ctr], None, request=0.5)]))
    s = reader.cpu_settings(pod_path)
    assert (s.shares, s.idle, s.quota_us) == (kubelet_shares(0.5), False, None)


@V1
def test_the_ledger_keeps_a_backup_and_reads_it_when_the_file_is_gone(v1tree_cgroupfs: V1Tree, tmp_path: Path) -> None:
    """A crash between the two renames of a save leaves only the backup: it is read, and trusted."""
    tree = v1tree_cgroupfs
    first_uid, first_path, (first_ctr,) = tree.pod("burstable")
    second_uid, second_path, (second_ctr,) = tree.pod("burstable")
    ledger = tmp_path / "ledger.json"
    enf = _enforcer(tree, str(ledger))
    enf.on_snapshot(_snapshot([_pod(first_uid, "offline", first_path, [first_ctr], None)]))
    pods = [_pod(u, "offline", p, [c], None) for u, p, c in ((first_uid, first_path, first_ctr),
                                                               (second_uid, second_path, second_ctr))]  # fmt: skip
    enf.on_snapshot(_snapshot(pods))
    backup = tmp_path / "ledger.json.bak"
    assert backup.exists() and json.loads(ledger.read_text())["pods"].keys() == {first_uid, second_uid}
    ledger.unlink()
    restarted = _enforcer(tree, str(ledger))
    assert restarted.ledger.trusted and first_uid in restarted.ledger.entries


@V1
def test_a_corrupt_ledger_is_reported_as_a_node_event(
    v1tree_cgroupfs: V1Tree, kube: Kube, kube_api: FakeKubeAPI, tmp_path: Path
) -> None:
    kube_api.put("nodes", node(cpu="2"))
    (tmp_path / "ledger.json").write_text("{not json")
    agent, _ = make_agent(v1tree_cgroupfs, kube, tmp_path)
    agent.start()
    try:
        wait_for(lambda: any(e["reason"] == "EnforcementLedgerCorrupt" for e in kube_api.objects("events")))
    finally:
        agent.stop()
    event = next(e for e in kube_api.objects("events") if e["reason"] == "EnforcementLedgerCorrupt")
    assert "kept as" in event["message"] and event["type"] == "Warning"
    assert json.loads((tmp_path / "ledger.json").read_text())["format"] == "colo-enforcement-ledger"
