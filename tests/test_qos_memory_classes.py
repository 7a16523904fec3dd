"""A pod that changes class on cgroup v2 with every strategy registered: offline enforcement's memory.high
and online memory QoS write the same file of the pod cgroup. Neither may undo the other's current value,
and at shutdown the pod gets the value it held before ANY Colo part wrote it (one original per file)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agent.config import AgentConfig
from agent.enforce.stage import Enforcer, detect_facts
from agent.enforce.strategies.registry import strategies
from agent.snapshot import ContainerSample, NodeSample, PodMeta, PodSample, Snapshot
from cgroup import CgroupReader, PathModel, parse_container_id
from testsupport.v2tree import V2Cgroup, V2Tree

MODEL = PathModel("systemd")
GI = 1 << 30
UID = "00000001-1111-2222-3333-444444444444"
CID = "1" * 64
ONLINE_HIGH = GI * 8 // 10 // 4096 * 4096  # memory QoS: 80% of the 1 GiB limit


class Node:
    """A fake v2 tree with one burstable pod (memory.high "max" as kubelet leaves it) and the full stage."""

    def __init__(self, tmp_path: Path) -> None:
        self.tree = tree = V2Tree(str(tmp_path))
        for cg in ("/kubepods.slice", "/kubepods.slice/kubepods-burstable.slice",
                   "/kubepods.slice/kubepods-besteffort.slice"):  # fmt: skip
            tree.put(cg, V2Cgroup())
        self.pod_cg = MODEL.pod("burstable", UID)
        tree.put(self.pod_cg, V2Cgroup(cpu_max=(40_000, 100_000), memory_max=GI, memory_current=100 << 20))
        self.ctr = MODEL.container("burstable", UID, parse_container_id(f"containerd://{CID}"))
        tree.put(self.ctr, V2Cgroup(cpu_max=(40_000, 100_000), memory_max=GI, memory_current=100 << 20))
        reader = CgroupReader(tree.layout)
        cfg = AgentConfig.model_validate({"qos": {"memory": {"enabled": True, "high_percent": 80}}})
        chosen = strategies(cfg, detect_facts(tree.layout, MODEL, reader))
        assert {"memory_high", "memory_qos"} <= {s.name for s in chosen}
        ledger = cfg.enforcement.model_copy(update={"ledger_file": str(tmp_path / "ledger.json")})
        self.stage = Enforcer(tree.layout, MODEL, reader, ledger, lambda: (2.0, 8 * GI), host_root=tree.base,
                              registered=chosen)  # fmt: skip

    def high(self) -> str:
        return self.tree.read(self.pod_cg, "memory.high").decode().strip()

    def run(self, cls: str) -> None:
        meta = PodMeta(UID, "default", "p", cls, cpu_request_cores=0.2, cpu_limit_cores=0.4,  # type: ignore[arg-type]
                       memory_request_bytes=GI // 2, memory_limit_bytes=GI, container_cpu_limits={CID: 0.4},
                       container_memory={CID: (GI // 2, GI)})  # fmt: skip
        pod = PodSample(meta, "burstable", self.pod_cg, 0.1, 100 << 20, 100 << 20, 0, 0, 0.0,
                        (ContainerSample(CID, self.ctr, 0.05, 100 << 20, 0, 0, 0.0),), memory_limit_bytes=GI)  # fmt: skip
        node = NodeSample(2.0, 1.5, 8 * GI, GI, 0)
        self.stage.on_snapshot(Snapshot(1, time.monotonic(), time.time(), node, {}, {UID: pod}, (), 0.0))
        assert self.stage.executor.errors == 0, self.stage.executor.last_error


@pytest.mark.parametrize("first", ["online", "offline"])
def test_a_pod_changing_class_keeps_the_current_parts_memory_high_and_gets_the_original_back(
    tmp_path: Path, first: str
) -> None:
    n = Node(tmp_path)
    then = "offline" if first == "online" else "online"
    n.run(first)
    before = n.high()
    assert before != "max"
    for _ in range(2):  # the part of the new class holds the file, pass after pass
        n.run(then)
        now = n.high()
        assert now != "max" and now != before
        assert (now == str(ONLINE_HIGH)) == (then == "online")
    n.stage.stop()
    assert n.high() == "max"  # as it was before either part wrote it
