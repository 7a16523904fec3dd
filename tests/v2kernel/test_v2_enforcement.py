"""Enforcement end to end on a real cgroup v2 kernel (the UML guest, one CPU): the agent against the fake API
server on the guest's loopback suppresses offline pods while an online pod wants the CPU (the kernel's counters
show it), throttles an offline allocation with memory.high, and its ledger puts every value back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.enforce.stage import kubelet_shares
from cgroup import CgroupReader, CgroupWriter, shares_to_weight
from kube import Kube
from tests.agentbuild import build_agent
from tests.v2kernel.v2real import SLEEP, V2Tree
from testsupport.cgtree import ALLOC
from testsupport.k8sobjects import container_id_of, node, pod
from testsupport.kubeapi.server import FakeKubeAPI
from testsupport.waiting import wait_for

pytestmark = pytest.mark.v2kernel
INTERVAL = 0.5
MIB = 1 << 20
KUBELET_OOM = 937  # what kubelet gives a small burstable pod's processes


def oom_score_adj(pid: int) -> int:
    with open(f"/proc/{pid}/oom_score_adj") as f:
        return int(f.read())


def usage(tree: V2Tree, cgroups: list[str]) -> int:
    return sum(tree.stat(c)["usage_usec"] for c in cgroups)


@pytest.fixture
def colocated(v2tree: V2Tree, kube_api: FakeKubeAPI) -> Iterator[dict[str, Any]]:
    """A 1-core node: one online pod with an unlimited burner, two offline pods (limit 0.4 core, request
    0.2) with a burner each, cgroups as kubelet and the runtime write them on v2."""
    tree, w = v2tree, CgroupWriter(v2tree.layout)
    kube_api.put("nodes", node(cpu="1", memory="1Gi"))
    on_uid, on_pod, (on_ctr,) = tree.pod("burstable")
    online = tree.start(on_ctr)
    kube_api.put("pods", pod("web", on_uid, container_ids=[container_id_of(on_ctr)], cpu_request="800m"))
    offline = []
    for i in range(2):
        uid, pod_path, (ctr,) = tree.pod("burstable")
        w.set_cpu_shares(pod_path, kubelet_shares(0.2))  # kubelet's weight on v2: shares converted
        w.set_cpu_quota(pod_path, 40_000)
        w.set_cpu_quota(ctr, 40_000)
        proc = tree.start(ctr)
        with open(f"/proc/{proc.pid}/oom_score_adj", "w") as f:
            f.write(str(KUBELET_OOM))
        kube_api.put("pods", pod(f"batch-{i}", uid, container_ids=[container_id_of(ctr)], cpu_request="200m",
                                 cpu_limit="400m", annotations={"volcano.sh/qos-level": "-1"}))  # fmt: skip
        offline.append({"uid": uid, "pod": pod_path, "ctr": ctr, "proc": proc})
    yield {"tree": tree, "online": {"uid": on_uid, "pod": on_pod, "ctr": on_ctr, "proc": online}, "offline": offline}


def test_offline_pods_suppressed_while_online_wants_the_cpu_and_restored(
    colocated: dict[str, Any], kube: Kube, tmp_path: Path
) -> None:
    tree: V2Tree = colocated["tree"]
    online, offline = colocated["online"], colocated["offline"]
    reader = CgroupReader(tree.layout)
    weight = shares_to_weight(kubelet_shares(0.2))
    assert all(tree.read(o["pod"], "cpu.weight") == str(weight) for o in offline)
    ledger = tmp_path / "ledger.json"
    agent, _ = build_agent(tree.layout, tree.model, kube, str(ledger), interval=INTERVAL, cpu_suppress_threshold=0.9)
    agent.start()
    try:
        # baseline: v2's minimum weight (1, not v1's 2 shares), SCHED_IDLE, OOM preference
        for o in offline:
            wait_for(lambda o=o: tree.read(o["pod"], "cpu.idle") == "1")
            assert wait_for(lambda o=o: oom_score_adj(o["proc"].pid) == 1000)
        assert tree.read(online["pod"], "cpu.idle") == "0" and oom_score_adj(online["proc"].pid) == 0

        # the online burner wants the whole CPU: offline pods are cut to the 0.1-core floor, split by request
        def quotas() -> list[int | None]:
            return [reader.cpu_settings(o["pod"]).quota_us for o in offline]

        wait_for(lambda: all(q is not None and q <= 5_000 for q in quotas()))
        # the runtime restarts an offline container with its own, larger quota: v1 would refuse it (EINVAL,
        # child above parent); v2 takes it and the pod's quota still binds the whole pod
        restarted = tree.mkdir(f"{offline[0]['pod']}/{'e' * 64}")
        tree.write(restarted, "cpu.max", "40000 100000")
        tree.move(tree.start(None), restarted)

        # from the kernel's counters, in one window: online gets the CPU, offline stays within its quotas
        # (the budget follows the guest's measured load, which a busy host can shift: the largest quota of
        # the window bounds it)
        pods = [o["pod"] for o in offline]

        def largest_quota() -> int:
            return max(q or 0 for q in quotas())

        on0, off0, quota0 = usage(tree, [online["pod"]]), usage(tree, pods), largest_quota()
        periods0 = sum(tree.stat(p)["nr_periods"] for p in pods)
        time.sleep(3.0)
        on_used, off_used = usage(tree, [online["pod"]]) - on0, usage(tree, pods) - off0
        periods = sum(tree.stat(p)["nr_periods"] for p in pods) - periods0  # periods the pods ran in
        quota = max(quota0, largest_quota())
        assert on_used / (on_used + off_used) >= 0.85, (on_used, off_used)
        # µs per period they ran in; nr_periods moves at period boundaries, so each pod may run one period at
        # either edge of the window that it does not count yet (seen: 10 ms used, 0 periods counted)
        assert off_used <= (periods + 2 * len(pods)) * quota * 1.2, (off_used, periods, quota)
        section = agent.view.node_sections["enforcement"]()
        assert section["offline_cpu_budget_cores"] < 0.8  # below what the two pods' own limits allow
        assert set(section["offline_cpu_quota_cores"]) == {o["uid"] for o in offline}
    finally:
        agent.stop()
    # the ledger put back what the cgroups held: weight, idle, quotas (the restarted container's too)
    for o in offline:
        assert (tree.read(o["pod"], "cpu.weight"), tree.read(o["pod"], "cpu.idle")) == (str(weight), "0")
        assert tree.read(o["pod"], "cpu.max") == tree.read(o["ctr"], "cpu.max") == "40000 100000"
        assert tree.read(o["pod"], "memory.high") == "max"
        assert oom_score_adj(o["proc"].pid) == KUBELET_OOM
    assert tree.read(restarted, "cpu.max") == "40000 100000"
    assert not ledger.exists() or '"pods": {}' in ledger.read_text()


def test_memory_high_throttles_an_offline_allocation_and_is_restored(
    v2tree: V2Tree, kube_api: FakeKubeAPI, kube: Kube, tmp_path: Path
) -> None:
    """A 128 MiB node whose 60% memory watermark leaves offline pods at most their 32 MiB minimum."""
    tree = v2tree
    kube_api.put("nodes", node(cpu="1", memory="128Mi"))
    uid, pod_path, (ctr,) = tree.pod("besteffort")
    on_uid, _, (on_ctr,) = tree.pod("burstable")
    tree.start(on_ctr, SLEEP)
    kube_api.put("pods", pod("web", on_uid, container_ids=[container_id_of(on_ctr)], cpu_request="100m"))
    kube_api.put("pods", pod("batch", uid, qos="BestEffort", container_ids=[container_id_of(ctr)],
                             annotations={"volcano.sh/qos-level": "-1"}))  # fmt: skip
    ledger = tmp_path / "ledger.json"
    agent, _ = build_agent(
        tree.layout, tree.model, kube, str(ledger), interval=INTERVAL, memory_high_min_bytes=32 * MIB
    )  # fmt: skip
    agent.start()
    try:
        high = int(wait_for(lambda: (v := tree.read(pod_path, "memory.high")) != "max" and v, timeout=30))
        assert 32 * MIB <= high <= int(0.6 * 128 * MIB)
        events0 = tree.stat(pod_path, "memory.events")["high"]
        allocator = tree.start(ctr, ALLOC, str(high // MIB + 64))  # more than memory.high, no swap to go to
        # the kernel throttles the allocation above memory.high instead of killing it
        wait_for(lambda: tree.stat(pod_path, "memory.events")["high"] > events0)
        assert tree.stat(pod_path, "memory.events")["oom_kill"] == 0 and allocator.poll() is None
    finally:
        agent.stop()
    assert tree.read(pod_path, "memory.high") == "max"
    # unthrottled, the allocation completes
    assert allocator.stdout is not None and allocator.stdout.readline() == b"ok\n"
    assert tree.stat(pod_path, "memory.events")["oom_kill"] == 0
    assert not ledger.exists() or '"pods": {}' in ledger.read_text()
