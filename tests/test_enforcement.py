"""QoS enforcement on real cgroups: the kernel's counters show offline pods throttled when online pods need
the CPU, OOM preference, restoration, dry-run, the ledger across restarts, the cpuset policy."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.cluster import ClusterLink
from agent.config import AgentConfig, EnforcementConfig
from agent.enforcer import Enforcer, kubelet_shares
from agent.runtime import Agent
from agent.snapshot import ContainerSample, NodeSample, PodMeta, PodSample, Snapshot
from cgroup import CgroupReader, CgroupWriter
from kube import Kube
from tests.cgtree import V1Tree
from tests.k8sobjects import NODE, container_id_of, node, pod
from tests.kubeapi.server import FakeKubeAPI
from tests.waiting import wait_for

pytestmark = pytest.mark.cgroupv1
INTERVAL = 0.5


def cores(reader: CgroupReader, cgroups: list[str], seconds: float) -> float:
    t0, u0 = time.monotonic(), sum(reader.cpu(c).usage_ns for c in cgroups)
    time.sleep(seconds)
    t1, u1 = time.monotonic(), sum(reader.cpu(c).usage_ns for c in cgroups)
    return (u1 - u0) / 1e9 / (t1 - t0)


def oom_score_adj(pid: int) -> int:
    with open(f"/proc/{pid}/oom_score_adj") as f:
        return int(f.read())


def make_agent(tree: V1Tree, kube: Kube, tmp_path: Path, **enforcement: Any) -> tuple[Agent, ClusterLink]:
    cfg = AgentConfig.model_validate(
        {
            "interval": INTERVAL,
            "cgroup_root": tree.cgroup_root,
            "cgroup_driver": tree.driver,
            "state_file": "",
            "node_name": NODE,
            "dry_run": enforcement.pop("dry_run", False),
            "enforcement": {
                "ledger_file": str(tmp_path / "ledger.json"),
                "oom_reapply_seconds": 0.5,
                "eviction": {"enabled": False},
                **enforcement,
            },
        }
    )
    agent = Agent(cfg, in_cluster=True, layout=tree.layout)
    link = ClusterLink(agent, kube, backoff_initial=0.05, backoff_max=0.5)
    agent.services.append(link)
    return agent, link


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


def test_offline_cpu_suppressed_then_restored(colocated: dict[str, Any], kube: Kube, tmp_path: Path) -> None:
    tree: V1Tree = colocated["tree"]
    online, offline = colocated["online"], colocated["offline"]
    reader = CgroupReader(tree.layout)
    agent, link = make_agent(tree, kube, tmp_path, cpu_suppress_threshold=0.9)
    agent.start()
    try:
        wait_for(lambda: link.enforcer.budget_cores is not None and len(link.enforcer.ledger.entries) == 2)
        # isolation baseline: minimal weight, SCHED_IDLE, OOM preference; the online pod is untouched
        for o in offline:
            settings = reader.cpu_settings(o["pod"])
            # SCHED_IDLE: the kernel pins the group's weight at its idle minimum (reported as 3 shares)
            assert settings.shares in (2, 3) and settings.idle is True
            assert wait_for(lambda o=o: oom_score_adj(o["proc"].pid) == 1000)
        assert reader.cpu_settings(online["pod"]).shares == 1024 and reader.cpu_settings(online["pod"]).idle is False
        assert all(oom_score_adj(p.pid) == 0 for p in online["procs"])
        assert reader.cpu_settings(online["ctr"]).quota_us == 20_000

        # online ramps from 0.2 to 1.6 cores: offline quota is cut within two intervals of seeing it
        CgroupWriter(tree.layout).set_cpu_quota(online["ctr"], 160_000)
        ramp = time.monotonic()
        wait_for(lambda: all((reader.cpu_settings(o["pod"]).quota_us or 10**9) <= 10_000 for o in offline), timeout=5)
        assert time.monotonic() - ramp <= 3 * INTERVAL + 0.5  # one interval to measure the ramp, two to act
        # containers were tightened with their pods (v1 refuses a pod quota below a child's)
        assert all((reader.cpu_settings(o["ctr"]).quota_us or 10**9) <= 10_000 for o in offline)
        # from the kernel's counters: online gets what it asks, offline gets the floor
        assert cores(reader, [online["pod"]], 2.0) >= 1.4
        assert cores(reader, [o["pod"] for o in offline], 2.0) <= 0.2
        section = agent.view.node_sections["enforcement"]()
        assert section["offline_cpu_budget_cores"] == pytest.approx(0.1, abs=0.15)

        # online load drops: quotas come back to each pod's own limit (growth capped per interval)
        CgroupWriter(tree.layout).set_cpu_quota(online["ctr"], 20_000)
        wait_for(lambda: all(reader.cpu_settings(o["pod"]).quota_us == 40_000 for o in offline), timeout=10)
        assert 0.6 <= cores(reader, [o["pod"] for o in offline], 2.0) <= 0.85
    finally:
        agent.stop()
    # shutdown restores kubelet's values
    for o in offline:
        settings = reader.cpu_settings(o["pod"])
        assert settings.shares == kubelet_shares(0.2) and settings.idle is False and settings.quota_us == 40_000
        assert reader.cpu_settings(o["ctr"]).quota_us == 40_000
    assert not os.path.exists(tmp_path / "ledger.json") or '"pods": {}' in (tmp_path / "ledger.json").read_text()


def test_dry_run_decides_and_writes_nothing(colocated: dict[str, Any], kube: Kube, tmp_path: Path) -> None:
    tree: V1Tree = colocated["tree"]
    offline = colocated["offline"]
    reader = CgroupReader(tree.layout)
    CgroupWriter(tree.layout).set_cpu_quota(colocated["online"]["ctr"], 160_000)
    agent, link = make_agent(tree, kube, tmp_path, dry_run=True, cpu_suppress_threshold=0.9)
    agent.start()
    try:
        # decided (the online pod is busy, so offline pods get less than their 0.4 core limit) ...
        wait_for(lambda: len(link.enforcer.quotas) == 2 and max(link.enforcer.quotas.values()) < 0.4, timeout=8)
        time.sleep(2 * INTERVAL)
        assert set(agent.view.node_sections["enforcement"]()["offline_cpu_quota_cores"]) == {o["uid"] for o in offline}
        # ... and nothing written
        for o in offline:
            s = reader.cpu_settings(o["pod"])
            assert (s.shares, s.idle, s.quota_us) == (1024, False, 40_000)
            assert oom_score_adj(o["proc"].pid) == 0
        assert link.enforcer.writes == 0 and agent.view.node_sections["enforcement"]()["dry_run"] is True
    finally:
        agent.stop()


def _snapshot(pods: list[PodSample]) -> Snapshot:
    return Snapshot(1, time.monotonic(), time.time(), NodeSample(2.0, 0.5, 8 << 30, 1 << 30, 0), {},
                    {p.uid: p for p in pods}, (), 0.0)  # fmt: skip


def _pod(uid: str, cls: str, pod_path: str, ctr: str, limit: float | None) -> PodSample:
    meta = PodMeta(uid, "default", uid, cls, cpu_request_cores=0.2, cpu_limit_cores=limit,  # type: ignore[arg-type]
                   container_cpu_limits={container_id_of(ctr): limit})  # fmt: skip
    c = ContainerSample(container_id_of(ctr), ctr, 0.1, 0, 0, 0, 0.0)
    return PodSample(meta, "burstable", pod_path, 0.1, 0, 0, 0, 0, 0.0, (c,))


def test_ledger_restores_after_restart_when_a_pod_turns_online(v1tree_cgroupfs: V1Tree, tmp_path: Path) -> None:
    tree = v1tree_cgroupfs
    uid, pod_path, (ctr,) = tree.pod("burstable")
    reader = CgroupReader(tree.layout)
    cfg = EnforcementConfig(ledger_file=str(tmp_path / "ledger.json"))
    first = Enforcer(tree.layout, tree.model, reader, cfg, lambda: (2.0, 8 << 30))
    first.on_snapshot(_snapshot([_pod(uid, "offline", pod_path, ctr, None)]))
    assert reader.cpu_settings(pod_path).idle is True and reader.cpu_settings(pod_path).quota_us is not None
    # the agent dies without restoring; a new one starts and finds the pod now online
    second = Enforcer(tree.layout, tree.model, CgroupReader(tree.layout), cfg, lambda: (2.0, 8 << 30))
    assert uid in second.ledger.entries
    second.on_snapshot(_snapshot([_pod(uid, "online", pod_path, ctr, None)]))
    s = reader.cpu_settings(pod_path)
    assert (s.shares, s.idle, s.quota_us) == (kubelet_shares(0.2), False, None)
    assert second.ledger.entries == {}


def test_cpuset_policy_confines_and_restores(v1tree_cgroupfs: V1Tree, tmp_path: Path) -> None:
    tree = v1tree_cgroupfs
    uid, pod_path, (ctr,) = tree.pod("burstable")
    reader = CgroupReader(tree.layout)
    everything = reader.cpuset(pod_path)
    state = tmp_path / "cpu_manager_state"
    state.write_text('{"policyName":"static","defaultCpuSet":"1","entries":{"x":{"app":"0"}},"checksum":1}')
    cfg = EnforcementConfig(cpu_policy="cpuset", ledger_file="", cpu_manager_state=str(state))
    enf = Enforcer(tree.layout, tree.model, reader, cfg, lambda: (2.0, 8 << 30))
    enf.on_snapshot(_snapshot([_pod(uid, "offline", pod_path, ctr, None)]))
    if len(everything) > 1:
        assert reader.cpuset(pod_path) == reader.cpuset(ctr) == frozenset({max(everything)})
        assert 0 not in reader.cpuset(pod_path)  # CPU 0 is a guaranteed pod's, exclusively
    enf.stop()
    assert reader.cpuset(pod_path) == reader.cpuset(ctr) == everything
