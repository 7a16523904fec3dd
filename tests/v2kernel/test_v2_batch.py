"""Batch pods' own limits on a real cgroup v2 kernel (the UML guest): a pod asking for kubernetes.io/batch-* in
the besteffort tier, as kubelet leaves it on v2 (cpu.weight 1, cpu.max "max", memory.max "max"), gets
cpu.max, cpu.weight and memory.max from its batch values in one pass; the kernel holds its burner to the
batch-cpu limit; the limits stay when the agent stops."""

from __future__ import annotations

import time

import pytest

from agent.config_sections.enforcement import EnforcementConfig
from agent.enforce.stage import Enforcer
from agent.snapshot import ContainerBatch, ContainerSample, NodeSample, PodBatch, PodMeta, PodSample, Snapshot
from cgroup import CgroupReader
from cgroup.kubelet_rules import BatchResources
from tests.v2kernel.v2real import V2Tree
from testsupport.k8sobjects import container_id_of
from testsupport.strategies import default_strategies

pytestmark = pytest.mark.v2kernel
MI = 1 << 20
LIMITS = BatchResources(cpu_request=200, cpu_limit=300, memory_request=256 * MI, memory_limit=256 * MI)
WEIGHT = 8  # 204 shares by kubelet's linear formula (KEP-2254): 1 + (204 - 2) * 9999 // 262142


def test_a_batch_pod_gets_cpu_max_weight_and_memory_max_and_keeps_them(v2tree: V2Tree) -> None:
    tree = v2tree
    uid, path, (ctr,) = tree.pod("besteffort")
    for cg in (path, ctr):
        tree.write(cg, "cpu.weight", "1")  # kubelet's BestEffort pod, the runtime's BestEffort container
    burner = tree.start(ctr)
    batch = PodBatch((ContainerBatch("main", container_id_of(ctr), LIMITS),))
    meta = PodMeta(uid, "jobs", "job", "offline", batch=batch)
    sample = PodSample(meta, "besteffort", path, 0.1, 0, 0, 0, 0, 0.0,
                       (ContainerSample(container_id_of(ctr), ctr, 0.1, 0, 0, 0, 0.0),))  # fmt: skip
    # a quiet 1-core node: offline pods run at their own limits
    snap = Snapshot(1, time.monotonic(), time.time(), NodeSample(1.0, 0.2, 1 << 30, 1 << 28, 0), {}, {uid: sample},
                    (), 0.0)  # fmt: skip
    cfg = EnforcementConfig(ledger_file="")
    enf = Enforcer(tree.layout, tree.model, CgroupReader(tree.layout), cfg, lambda: (1.0, 1 << 30),
                   registered=default_strategies(tree.layout, tree.model, cfg))  # fmt: skip
    enf.on_snapshot(snap)
    for cg in (path, ctr):
        assert (tree.read(cg, "cpu.max"), tree.read(cg, "memory.max")) == ("30000 100000", str(256 * MI))
    assert tree.read(ctr, "cpu.weight") == str(WEIGHT)
    assert tree.read(path, "cpu.idle") == "1"  # the pod's weight is the offline baseline's meanwhile
    # the kernel holds the burner to 0.3 CPU (well-margined)
    a, t0 = tree.stat(ctr)["usage_usec"], time.monotonic()
    time.sleep(2.5)
    used = (tree.stat(ctr)["usage_usec"] - a) / 1e6 / (time.monotonic() - t0)
    assert used < 0.5, used
    assert burner.poll() is None
    enf.stop()
    # the baseline goes (the pod's weight back to its original: the batch weight), the batch limits stay
    assert (tree.read(path, "cpu.weight"), tree.read(path, "cpu.idle")) == (str(WEIGHT), "0")
    for cg in (path, ctr):
        assert (tree.read(cg, "cpu.max"), tree.read(cg, "memory.max")) == ("30000 100000", str(256 * MI))
    assert enf.errors == 0
