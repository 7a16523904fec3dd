"""Online pods read on their own turns, offline pods and the kubepods root every pass (agent/sense/collectors/pods.py),
on the real cgroup v1 hierarchy; what the decisions make of the root's figures as pure functions."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

from agent.node_state import node_state
from agent.sense.collectors import enabled_from
from agent.sense.collectors.pods import ONLINE_POD_EVERY, PodsCollector
from agent.sense.sampler import Sampler
from agent.snapshot import NodeSample, PodMeta, PodSample, PodsTotal, Snapshot
from agent.windows.store import WindowStore
from cgroup import PathModel
from kube import Kube
from tests.agentbuild import build_agent
from testsupport.cgtree import V1Tree
from testsupport.classed_pods import ClassedPodSource


def classed(tree: V1Tree, offline: set[str]) -> ClassedPodSource:
    return ClassedPodSource(tree.layout, tree.model, lambda _, uid: "offline" if uid in offline else "online")


def on_turn(seq: int, path: str, every: int) -> bool:
    return (seq + zlib.crc32(path.encode())) % every == 0


@pytest.mark.cgroupv1
def test_online_pods_stand_between_their_turns_offline_pods_are_read_every_pass(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    on_uid, on_pod, (on_ctr,) = tree.pod("burstable")
    off_uid, _, (off_ctr,) = tree.pod("besteffort")
    tree.start(on_ctr)
    tree.start(off_ctr)
    every = 3
    windows = WindowStore()
    sampler = Sampler(tree.layout, tree.model, classed(tree, {off_uid}), windows, online_every=every)
    try:
        last = sampler.sample()  # first sight: every pod read
        last_fed = last.mono
        for seq in range(1, 10):
            time.sleep(0.02)
            snap = sampler.sample()
            online, offline = snap.pods[on_uid], snap.pods[off_uid]
            assert offline is not last.pods[off_uid] and offline.cpu_cores is not None  # every pass
            if on_turn(seq, on_pod, every):
                assert online is not last.pods[on_uid] and online.cpu_cores is not None
            else:
                assert online is last.pods[on_uid]  # its last sample stands: nothing read
            assert snap.pods_total is not None and snap.pods_total.cpu_cores is not None  # the root, every pass
            # the windows get each reading once: the online pod's at its turns, the offline pod's every pass
            on_series, off_series = windows.get(("pod", on_uid, "memory")), windows.get(("pod", off_uid, "memory"))
            assert on_series is not None and off_series is not None and off_series.last_t == snap.mono
            assert on_series.last_t == (snap.mono if online is not last.pods[on_uid] else last_fed)
            last_fed = on_series.last_t
            last = snap
        # a standing pod's cgroups are not forgotten: its descriptors stay open
        assert any(on_ctr.rsplit("/", 1)[1] in path for path in sampler.reader.files.fds)
    finally:
        sampler.close()


@pytest.mark.cgroupv1
def test_the_root_holds_what_the_pods_use(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    uid, _, (ctr,) = tree.pod("burstable")
    tree.start(ctr)
    tree.allocate(ctr, 48)
    sampler = Sampler(tree.layout, tree.model, classed(tree, set()), WindowStore(), online_every=5)
    try:
        first = sampler.sample()
        assert first.pods_total is not None and first.pods_total.cpu_cores is None  # no rate from one reading
        time.sleep(1.0)
        snap = sampler.sample()
        total, pod = snap.pods_total, snap.pods[uid]
        assert total is not None and total.cpu_cores is not None and total.cpu_cores > 0
        assert total.memory_working_set_bytes >= 48 << 20
        state = node_state(snap, (None, None))
        assert state.cpu.online == total.cpu_cores and state.memory.online == total.memory_working_set_bytes
        # the root holds the pod (read a moment before it: 1 MiB for the burner's own growth meanwhile)
        assert pod.memory_working_set_bytes <= total.memory_working_set_bytes + (1 << 20)
    finally:
        sampler.close()


@pytest.mark.cgroupv1
def test_without_a_readable_root_every_pod_is_read_every_pass(
    v1tree_cgroupfs: V1Tree, caplog: pytest.LogCaptureFixture
) -> None:
    tree = v1tree_cgroupfs
    uid, _, _ = tree.pod("burstable")
    elsewhere = PathModel("cgroupfs", cgroup_root=tree.cgroup_root + "/no-such-root")
    sampler = Sampler(tree.layout, elsewhere, classed(tree, set()), WindowStore(), online_every=50)
    try:
        with caplog.at_level(logging.DEBUG, logger="agent.sense.collectors.pods"):
            samples = [sampler.sample() for _ in range(4)]
        assert all(s.pods_total is None for s in samples)
        pods = [s.pods[uid] for s in samples]
        assert all(a is not b for a, b in itertools.pairwise(pods))  # read every pass
        assert len([r for r in caplog.records if "every pod is read every pass" in r.getMessage()]) == 1
    finally:
        sampler.close()


@pytest.mark.cgroupv1
def test_a_changed_pod_is_read_at_once_and_a_standing_pods_containers_when_due(v1tree_cgroupfs: V1Tree) -> None:
    tree = v1tree_cgroupfs
    uid, _, _ = tree.pod("burstable")
    source = classed(tree, set())
    sampler = Sampler(tree.layout, tree.model, source, WindowStore(), online_every=4, container_every=7)
    try:
        before = sampler.sample().pods[uid]
        source.metas[uid] = dataclasses.replace(source.metas[uid], pod_class="offline")  # reclassified
        after = sampler.sample().pods[uid]
        assert after is not before and after.meta is source.metas[uid]
        source.metas[uid] = dataclasses.replace(source.metas[uid], pod_class="online")
        # visits come every 4 passes, the container's turn every 7: it is read at the first visit once due
        containers = [sampler.sample().pods[uid].containers[0] for _ in range(16)]
        distinct = [c for i, c in enumerate(containers) if i == 0 or c is not containers[i - 1]]
        assert len(distinct) >= 2
    finally:
        sampler.close()


def _snap(pods: dict[str, PodSample], total: PodsTotal | None) -> Snapshot:
    node = NodeSample(8.0, 4.0, 64 << 30, 32 << 30, 0)
    return Snapshot(1, 0.0, 0.0, node, {}, pods, (), 0.0, pods_total=total)


def _pod(uid: str, pod_class: str, cores: float, ws: int) -> PodSample:
    meta = PodMeta(uid, pod_class=pod_class)  # type: ignore[arg-type]
    return PodSample(meta, "burstable", "/p" + uid, cores, ws, 0, ws, 0, None, ())


def test_online_usage_is_the_root_less_the_offline_pods() -> None:
    pods = {"on": _pod("on", "online", 0.5, 100), "off": _pod("off", "offline", 1.0, 300)}
    state = node_state(_snap(pods, PodsTotal(2.0, 1000)), (None, None))
    assert (state.cpu.pods, state.cpu.online, state.cpu.offline) == (2.0, 1.0, 1.0)  # not the standing 0.5
    assert (state.memory.pods, state.memory.online, state.memory.offline) == (1000.0, 700.0, 300.0)
    assert state.cpu.system == 2.0  # node 4 − pods 2
    # a root read a moment before the offline pods' readings: never a negative online usage
    low = node_state(_snap(pods, PodsTotal(0.8, 200)), (None, None))
    assert (low.cpu.pods, low.cpu.online, low.memory.online) == (1.0, 0.0, 0.0)
    # no root, or its rate not known yet: the pods' own sums
    for total in (None, PodsTotal(None, 1000)):
        cpu = node_state(_snap(pods, total), (None, None)).cpu
        assert (cpu.pods, cpu.online) == (1.5, 0.5)


@pytest.mark.cgroupv1
def test_an_online_pods_windows_are_covered_by_its_readings(v1tree_cgroupfs: V1Tree) -> None:
    """Readings every `ONLINE_POD_EVERY` passes at 1 s are no gap (max_gap is 5 s): the windows stay covered."""
    tree = v1tree_cgroupfs
    uid, _, _ = tree.pod("burstable")
    clock = [0.0]
    windows = WindowStore()
    sampler = Sampler(tree.layout, tree.model, classed(tree, set()), windows, online_every=ONLINE_POD_EVERY,
                      clock=lambda: clock[0])  # fmt: skip
    try:
        for second in range(61):
            clock[0] = float(second)
            snap = sampler.sample()
        one_minute = windows.value(("pod", uid, "memory"), "avg_1m", snap.mono)
        assert one_minute.value is not None and one_minute.coverage >= 0.9
    finally:
        sampler.close()


@pytest.mark.cgroupv1
@pytest.mark.parametrize(
    ("qos", "enforcement", "every"),
    [({}, {}, 5), ({"quota_burst": {"enabled": True}}, {}, 1), ({}, {"disk": {"enabled": True}}, 1)],
)
def test_online_pods_are_read_every_pass_while_a_decision_reads_them_one_by_one(
    v1tree_cgroupfs: V1Tree, kube: Kube, tmp_path: Path, qos: dict[str, Any], enforcement: dict[str, Any], every: int
) -> None:
    tree = v1tree_cgroupfs
    agent, _ = build_agent(tree.layout, tree.model, kube, str(tmp_path / "ledger.json"), interval=1.0, qos=qos,
                           **enforcement)  # fmt: skip
    try:
        assert agent.sampler.deps.online_every == every
    finally:
        agent.sampler.close()


@pytest.mark.cgroupv1
@pytest.mark.parametrize("tiers", [True, False])
def test_the_root_is_read_once_a_pass(v1tree_cgroupfs: V1Tree, tiers: bool) -> None:
    """The tiers collector reads kubepods (the guaranteed tier) each pass: the pods collector takes the root's
    figures from that reading and opens the root's files only when the tiers are switched off."""
    tree = v1tree_cgroupfs
    tree.pod("burstable")
    sampler = Sampler(tree.layout, tree.model, classed(tree, set()), WindowStore(), online_every=5,
                      collectors=enabled_from({"tiers": tiers}))  # fmt: skip
    try:
        snaps = [sampler.sample() for _ in range(2)]
        total = snaps[-1].pods_total
        assert total is not None and total.cpu_cores is not None and total.memory_working_set_bytes > 0
        (pods,) = [c for c in sampler._built if isinstance(c, PodsCollector)]
        assert (pods._root.files is None) == tiers
    finally:
        sampler.close()
