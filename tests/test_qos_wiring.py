"""Online QoS through the agent's pass on the real v1 kernel: the burst lands per container and pod and is
put back at shutdown, when switched off, after a crash (the ledger file), when a pod stops being online and
when it goes away; a dry run writes nothing; the dynamic quota burst follows the kernel's throttling on a
quiet node and gives the CPU back when the node gets busy; the executor's order survives a resize below a
burst; and a spiky 0.5-CPU container is throttled measurably less with the burst the agent set."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from agent.snapshot import PodSample
from cgroup import CgroupReader, CgroupWriter
from cgroup.reader import CpuUsage
from kube import Kube
from tests.agentbuild import build_agent
from testsupport.cgtree import V1Tree
from testsupport.k8sobjects import container_id_of, node, pod
from testsupport.kubeapi.server import FakeKubeAPI
from testsupport.qos import Ctr, online_pod, qos_stage, qos_state, section
from testsupport.spiky import PERIOD_US, QUOTA_US, Throttling, make_spiky_pair, run_spikes
from testsupport.waiting import wait_for

pytestmark = pytest.mark.cgroupv1
ENABLE = "volcano.sh/enable-quota-burst"


def _limited_pod(tree: V1Tree, quotas: tuple[int, ...]) -> tuple[str, str, list[str]]:
    """A pod whose containers hold these quotas, and the pod their sum, as kubelet writes them."""
    uid, pod_cg, ctrs = tree.pod("burstable", containers=len(quotas))
    w = CgroupWriter(tree.layout)
    w.set_cpu_quota(pod_cg, sum(quotas), PERIOD_US)
    for cg, q in zip(ctrs, quotas, strict=True):
        w.set_cpu_quota(cg, q, PERIOD_US)
    return uid, pod_cg, ctrs


def test_burst_through_the_agent_lands_reports_and_is_restored_at_shutdown(
    v1tree_cgroupfs: V1Tree, kube_api: FakeKubeAPI, kube: Kube, tmp_path: Path
) -> None:
    tree = v1tree_cgroupfs
    reader = CgroupReader(tree.layout)
    kube_api.put("nodes", node(cpu="2"))
    uid, pod_cg, (ctr,) = _limited_pod(tree, (50_000,))
    kube_api.put("pods", pod("web", uid, container_ids=[container_id_of(ctr)], cpu_request="250m", cpu_limit="500m"))
    agent, link = build_agent(tree.layout, tree.model, kube, str(tmp_path / "ledger.json"), interval=0.3,
                              qos={"cpu_burst": {"enabled": True}})  # fmt: skip
    agent.start()
    try:
        assert wait_for(lambda: (reader.cpu_burst(ctr), reader.cpu_burst(pod_cg)) == (50_000, 50_000))
        ledger = json.loads((tmp_path / "ledger.json").read_text())  # saved before the writes
        assert ledger["pods"][uid]["parts"]["burst"] == {pod_cg: 0, ctr: 0}
        section = agent.view.node_sections["qos"]()
        assert section["cpu_burst"]["pods"][uid] == {"source": "node", "burst_us": 50_000,
                                                     "containers": {container_id_of(ctr): 50_000}}  # fmt: skip
        assert section["pods_touched"] == [uid] and link.enforcer.errors == 0
        assert "cpu_burst" not in agent.view.node_sections["enforcement"]()
        families = {m.name: m for m in agent.view.metric_sources["qos"]()}
        (s,) = families["colo_container_cpu_burst_us"].samples
        assert s.labels == {"uid": uid, "container": container_id_of(ctr)} and s.value == 50_000
        assert reader.cpu_settings(ctr).quota_us == 50_000  # burst alone leaves the quota as it was
    finally:
        agent.stop()
    assert (reader.cpu_burst(ctr), reader.cpu_burst(pod_cg)) == (0, 0)
    assert json.loads((tmp_path / "ledger.json").read_text())["pods"] == {}


def test_after_a_crash_a_switched_off_feature_is_put_back_from_the_ledger_file(
    v1tree_cgroupfs: V1Tree, tmp_path: Path
) -> None:
    """A run bursts and raises quotas, then dies without restoring; the next one, with both features off,
    puts back what the file says."""
    tree = v1tree_cgroupfs
    reader = CgroupReader(tree.layout)
    uid, pod_cg, (c1, c2) = _limited_pod(tree, (50_000, 100_000))
    ledger = str(tmp_path / "qos.json")
    hot = online_pod(uid, pod_cg, [Ctr(c1, 0.5, throttled=0.6, usage=0.5), Ctr(c2, 1.0, throttled=0.0)])
    first = qos_stage(tree.layout, tree.model, ledger, cpu_burst={"enabled": True, "burst_percent": 60},
                      quota_burst={"enabled": True, "step_percent": 50})  # fmt: skip
    first.on_state(qos_state([hot]))
    # per container 60% of its own quota, the pod the sum; c1 throttled on a quiet node: raised by half
    assert [reader.cpu_burst(cg) for cg in (c1, c2, pod_cg)] == [30_000, 60_000, 90_000]
    assert [reader.cpu_settings(cg).quota_us for cg in (c1, c2, pod_cg)] == [75_000, 100_000, 175_000]
    assert section(first)["quota_burst"]["pods"][uid]["containers"][c1.rsplit("/", 1)[1]]["state"] == "raise"
    # ... crash: no stop()
    second = qos_stage(tree.layout, tree.model, ledger)
    second.on_state(qos_state([hot]))
    assert [reader.cpu_burst(cg) for cg in (c1, c2, pod_cg)] == [0, 0, 0]
    assert [reader.cpu_settings(cg).quota_us for cg in (c1, c2, pod_cg)] == [50_000, 100_000, 150_000]
    assert json.loads(Path(ledger).read_text())["pods"] == {}


def test_a_pod_that_stops_being_online_or_goes_away_gets_its_values_back(
    v1tree_cgroupfs: V1Tree, tmp_path: Path
) -> None:
    tree = v1tree_cgroupfs
    reader = CgroupReader(tree.layout)
    a_uid, a_pod, (a_ctr,) = _limited_pod(tree, (50_000,))
    b_uid, b_pod, (b_ctr,) = _limited_pod(tree, (20_000,))
    stage = qos_stage(tree.layout, tree.model, str(tmp_path / "qos.json"), cpu_burst={"enabled": True})
    a, b = online_pod(a_uid, a_pod, [Ctr(a_ctr, 0.5)]), online_pod(b_uid, b_pod, [Ctr(b_ctr, 0.2)])
    stage.on_state(qos_state([a, b]))
    assert [reader.cpu_burst(cg) for cg in (a_ctr, a_pod, b_ctr, b_pod)] == [50_000, 50_000, 20_000, 20_000]
    offline = online_pod(a_uid, a_pod, [Ctr(a_ctr, 0.5)], cls="offline")
    stage.on_state(qos_state([offline, b]))
    assert [reader.cpu_burst(cg) for cg in (a_ctr, a_pod)] == [0, 0] and "burst" in stage.ledger.entries[b_uid].parts
    assert a_uid not in stage.ledger.entries or "burst" not in stage.ledger.entries[a_uid].parts
    tree.remove(b_pod)  # the pod is gone (its cgroup with it): the entry goes, nothing is written
    writes = stage.executor.writes
    stage.on_state(qos_state([offline]))
    assert b_uid not in stage.ledger.entries and stage.executor.writes == writes and stage.executor.errors == 0


def test_a_raise_keeps_kubelets_pod_quota_with_its_overhead_and_gives_it_back(
    v1tree_cgroupfs: V1Tree, tmp_path: Path
) -> None:
    """kubelet gives the pod 0.25 CPU of overhead above its 0.5-CPU container: the first raise never lowers
    the pod's quota, later raises add to it as recorded, and the give-back (and shutdown) leave it as it was."""
    tree = v1tree_cgroupfs
    reader, writer = CgroupReader(tree.layout), CgroupWriter(tree.layout)
    uid, pod_cg, (ctr,) = tree.pod("burstable", containers=1)
    writer.set_cpu_quota(pod_cg, 75_000, PERIOD_US)
    writer.set_cpu_quota(ctr, 50_000, PERIOD_US)
    stage = qos_stage(tree.layout, tree.model, str(tmp_path / "qos.json"),
                      quota_burst={"enabled": True, "restore_after_seconds": 0})  # fmt: skip

    def quotas() -> tuple[int | None, int | None]:
        return reader.cpu_settings(ctr).quota_us, reader.cpu_settings(pod_cg).quota_us

    hot = online_pod(uid, pod_cg, [Ctr(ctr, 0.5, throttled=0.6, usage=0.5)])
    stage.on_state(qos_state([hot]))
    assert quotas() == (62_500, 75_000) and stage.executor.errors == 0, stage.executor.last_error
    stage.on_state(qos_state([hot]))
    assert quotas() == (75_000, 100_000)  # 25 ms raised over the pod's recorded 75 ms
    quiet = online_pod(uid, pod_cg, [Ctr(ctr, 0.5, throttled=0.0, usage=0.1)])
    stage.on_state(qos_state([quiet]))
    stage.on_state(qos_state([quiet]))
    assert quotas() == (50_000, 75_000) and not stage.ledger.entries
    stage.on_state(qos_state([hot]))
    stage.stop()
    assert quotas() == (50_000, 75_000)


def test_dry_run_writes_nothing(v1tree_cgroupfs: V1Tree, tmp_path: Path) -> None:
    tree = v1tree_cgroupfs
    reader = CgroupReader(tree.layout)
    uid, pod_cg, (ctr,) = _limited_pod(tree, (50_000,))
    stage = qos_stage(tree.layout, tree.model, str(tmp_path / "qos.json"), dry_run=True,
                      cpu_burst={"enabled": True}, quota_burst={"enabled": True})  # fmt: skip
    stage.on_state(qos_state([online_pod(uid, pod_cg, [Ctr(ctr, 0.5, throttled=1.0, usage=0.5)])]))
    assert section(stage)["cpu_burst"]["pods"][uid]["burst_us"] == 50_000  # decided and reported ...
    assert reader.cpu_burst(ctr) == 0 and reader.cpu_settings(ctr).quota_us == 50_000  # ... not written
    assert not os.path.exists(tmp_path / "qos.json")
    stage.stop()
    assert reader.cpu_burst(ctr) == 0


def test_a_resize_below_the_burst_lowers_the_burst_before_the_quota(v1tree_cgroupfs: V1Tree, tmp_path: Path) -> None:
    """Burst 100% and a raised quota; then the spec says 0.2 CPU and the node is busy: the same pass lowers
    the burst to 20 ms and the quota to 20 ms, which the kernel accepts only in that order."""
    tree = v1tree_cgroupfs
    reader = CgroupReader(tree.layout)
    uid, pod_cg, (ctr,) = _limited_pod(tree, (50_000,))
    stage = qos_stage(tree.layout, tree.model, str(tmp_path / "qos.json"), cpu_burst={"enabled": True},
                      quota_burst={"enabled": True, "step_percent": 50})  # fmt: skip
    stage.on_state(qos_state([online_pod(uid, pod_cg, [Ctr(ctr, 0.5, throttled=1.0, usage=0.5)])]))
    assert (reader.cpu_burst(ctr), reader.cpu_settings(ctr).quota_us) == (50_000, 75_000)
    resized = online_pod(uid, pod_cg, [Ctr(ctr, 0.2, throttled=1.0, usage=0.2)])
    stage.on_state(qos_state([resized], busy=1.9))
    assert stage.executor.errors == 0, stage.executor.last_error
    assert [(reader.cpu_burst(cg), reader.cpu_settings(cg).quota_us) for cg in (ctr, pod_cg)] == [(20_000, 20_000)] * 2
    assert "quota_burst" not in stage.ledger.entries[uid].parts  # the own quota from the spec holds: no raise recorded
    stage.stop()
    assert reader.cpu_burst(ctr) == 0


Counters = list[tuple[float, CpuUsage]]


def _kernel_sample(reader: CgroupReader, uid: str, pod_cg: str, ctr: str, limit: float, prev: Counters) -> PodSample:
    """The container's throttled ratio and usage since the previous call, from the kernel's counters."""
    time.sleep(0.5)
    now, stat = time.monotonic(), reader.cpu(ctr)
    (t0, s0) = prev[0] if prev else (now - 0.5, stat)
    prev[:] = [(now, stat)]
    ratio = (stat.nr_throttled - s0.nr_throttled) / max(1, stat.nr_periods - s0.nr_periods)
    usage = (stat.usage_ns - s0.usage_ns) / 1e9 / max(1e-3, now - t0)
    return online_pod(uid, pod_cg, [Ctr(ctr, limit, throttled=ratio, usage=usage)])


def test_quota_burst_follows_the_kernels_throttling_and_gives_back_when_the_node_gets_busy(
    v1tree_cgroupfs: V1Tree, tmp_path: Path
) -> None:
    """A 0.1-CPU container with two burners: once the kernel reports it throttled (a generous wait: the one
    kernel check), a pass on a quiet node (the state's load) raises its quota and its pod's from that real
    sample; a busy node takes it back in one pass. The step by step climb is a decision: test_qos_plans.py."""
    tree = v1tree_cgroupfs
    reader = CgroupReader(tree.layout)
    uid, pod_cg, (ctr,) = _limited_pod(tree, (10_000,))
    stage = qos_stage(tree.layout, tree.model, str(tmp_path / "qos.json"),
                      quota_burst={"enabled": True, "step_percent": 50})  # fmt: skip
    tree.start(ctr)
    tree.start(ctr)
    prev: Counters = []

    def throttled() -> PodSample | None:
        sample = _kernel_sample(reader, uid, pod_cg, ctr, 0.1, prev)
        return sample if (sample.containers[0].cpu_throttled_ratio or 0.0) >= 0.5 else None

    hot = wait_for(throttled, timeout=120.0, what="the kernel throttles a 0.1-CPU container with two burners")
    stage.on_state(qos_state([hot], busy=0.2))
    assert stage.executor.errors == 0, stage.executor.last_error
    assert reader.cpu_settings(ctr).quota_us == reader.cpu_settings(pod_cg).quota_us == 15_000  # 10 ms + 50%
    assert "quota_burst" in stage.ledger.entries[uid].parts
    stage.on_state(qos_state([hot], busy=1.9))
    assert (reader.cpu_settings(ctr).quota_us, reader.cpu_settings(pod_cg).quota_us) == (10_000, 10_000)
    assert section(stage)["quota_burst"]["node_state"] == "busy" and not stage.ledger.entries
    stage.on_state(qos_state([hot], busy=0.2, evicting=True))
    assert reader.cpu_settings(ctr).quota_us == 10_000  # evicting: nothing given even on a quiet node


def test_the_burst_the_agent_sets_cuts_a_spiky_containers_throttling(v1tree_cgroupfs: V1Tree, tmp_path: Path) -> None:
    """Two identical 0.5-CPU containers spike at the same moments; the stage bursts the one whose pod opts in
    (Volcano's annotation), alternating each round, so the stage also takes the other's burst back."""
    tree = v1tree_cgroupfs
    a, b = make_spiky_pair(tree)
    reader = CgroupReader(tree.layout)
    pods = {cg: (cg.rsplit("/", 2)[1], cg.rsplit("/", 1)[0]) for cg in (a, b)}
    stage = qos_stage(tree.layout, tree.model, str(tmp_path / "qos.json"))  # node setting off: annotations only

    def opted(cg: str, on: bool) -> PodSample:
        uid = pods[cg][0].removeprefix("pod")
        return online_pod(uid, pods[cg][1], [Ctr(cg, 0.5)], annotations={ENABLE: "true" if on else "false"})

    with_burst: list[Throttling] = []
    without: list[Throttling] = []
    for rnd in range(6):
        burst, plain = (a, b) if rnd % 2 == 0 else (b, a)
        stage.on_state(qos_state([opted(burst, True), opted(plain, False)]))
        assert (reader.cpu_burst(burst), reader.cpu_burst(plain)) == (QUOTA_US, 0)
        got = run_spikes(tree, (burst, plain))
        with_burst.append(got[burst])
        without.append(got[plain])
        if rnd >= 1 and sum(t.nr_throttled for t in without) >= 8:
            break
    stage.stop()
    assert (reader.cpu_burst(a), reader.cpu_burst(b)) == (0, 0)
    plain_periods = sum(t.nr_throttled for t in without)
    if plain_periods < 3:  # the spikes never reached their quota: the machine gave them under 0.5 CPU
        pytest.skip(f"machine too busy to throttle a 0.5-CPU spike ({plain_periods} throttled periods)")
    # measured (bench/bench_cpu_burst.py): 2 throttled periods a spike without, none with a 100% burst
    assert sum(t.nr_throttled for t in with_burst) * 2 <= plain_periods, (with_burst, without)


@pytest.mark.cgroupv1
def test_the_agent_tells_run_queue_protection_its_own_pod(
    v1tree_cgroupfs: V1Tree, kube: Kube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The DaemonSet's POD_UID (the downward API's metadata.uid) reaches the guard, which leaves that pod out."""
    from agent.enforce.strategies.run_queue_guard import RunQueueGuard

    monkeypatch.setenv("POD_UID", "uid-of-the-agent")
    tree = v1tree_cgroupfs
    agent, link = build_agent(
        tree.layout, tree.model, kube, str(tmp_path / "ledger.json"), interval=1.0, rq_protection={"enabled": True}
    )
    try:
        (guard,) = [s for s in link.enforcer.strategies if isinstance(s, RunQueueGuard)]
        assert guard.own_pod_uid == "uid-of-the-agent"
    finally:
        agent.sampler.close()
