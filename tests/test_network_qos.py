"""Network QoS for real: "pod" network namespaces and veth pairs made by the test (TEST-NET-1 addresses inside
them only), a process of each pod in a real v1 cgroup (so the agent finds the namespace from the pod's
cgroup.procs), the real enforcement stage with the net_egress strategy, and a bounded stream from each pod
measured at the receiving end: the offline pod is held to its limit, the online one is not; the qdisc goes
back when the pod turns online and at shutdown. The split, the tightening and its hysteresis are pure."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.config import AgentConfig
from agent.config_sections.enforcement import EnforcementConfig
from agent.config_sections.pod_qos import NetworkQosConfig
from agent.enforce.actions import Recorded
from agent.enforce.ledger import Touched
from agent.enforce.parts.net_egress import NET_EGRESS
from agent.enforce.stage import Enforcer
from agent.enforce.strategies.net_egress import NetEgress, online_tx, split, tightened, turn, uplink_tx
from agent.node_state import node_state
from agent.sense.pod_source import CgroupPodSource
from agent.sense.sampler import Sampler
from agent.snapshot import InterfaceSample, NetworkRates, NodeSample, PodMeta, PodSample, Snapshot
from agent.windows.store import WindowStore
from cgroup import CgroupReader
from testsupport.cgtree import V1Tree
from testsupport.netns import PAUSE, SENDER, Namespaces, in_cgroup_and_netns, kernel_facts, namespaces, root_qdisc
from testsupport.strategies import default_strategies

GI = 1 << 30
LIMIT = 400_000  # bytes/s: the offline pod's budget
SENT = 1_200_000  # bytes each pod sends: about 3 s at the limit


# -- pure decisions ------------------------------------------------------------------------------------
def test_the_budget_is_split_equally_with_a_floor() -> None:
    assert split(1000, ["a", "b"], 1) == {"a": 500, "b": 500}
    assert split(1000, ["a", "b", "c"], 400) == {"a": 400, "b": 400, "c": 400}
    assert split(1000, [], 1) == {}


def test_tightening_has_hysteresis() -> None:
    c = NetworkQosConfig(online_high_bytes_per_second=100, online_low_bytes_per_second=50)
    assert tightened(101, False, c) and tightened(75, True, c)  # above high; between the marks it stays
    assert not tightened(75, False, c) and not tightened(49, True, c)  # released only under the low mark
    assert tightened(None, True, c) and not tightened(None, False, c)  # nothing measured: as it was


def test_online_traffic_is_the_uplinks_minus_the_offline_pods() -> None:
    ifs = (InterfaceSample("eth0", True, 0.0, 900.0), InterfaceSample("veth1", False, 0.0, 5e6))
    assert uplink_tx(ifs, ()) == 900.0 and uplink_tx(ifs, ("veth1",)) == 5e6
    meta = PodMeta("u", pod_class="offline")
    pod = PodSample(meta, "besteffort", "/p", 0.0, 0, 0, 0, 0, None, (), network=NetworkRates(0.0, 300.0))
    assert online_tx(900.0, [pod]) == 600.0 and online_tx(None, [pod]) is None


def test_a_configuration_without_the_collector_is_refused() -> None:
    with pytest.raises(ValueError, match=r"collectors\.pod_network"):
        AgentConfig.model_validate({"network_qos": {"enabled": True}})
    with pytest.raises(ValueError, match="below"):
        NetworkQosConfig(online_high_bytes_per_second=10, online_low_bytes_per_second=10)
    AgentConfig.model_validate({"network_qos": {"enabled": True}, "collectors": {"pod_network": True}})


def test_a_limit_is_asked_again_only_when_it_changes_or_is_due() -> None:
    strategy = NetEgress(NetworkQosConfig(offline_egress_bytes_per_second=1000, min_pod_bytes_per_second=1,
                                          verify_every=3, online_high_bytes_per_second=100,
                                          online_low_bytes_per_second=50, tightened_percent=10))  # fmt: skip
    host = PodSample(PodMeta("h", pod_class="offline"), "besteffort", "/h", 0.0, 0, 0, 0, 0, None, (),
                     network=NetworkRates(None, None, True))  # fmt: skip
    pod = PodSample(PodMeta("u", pod_class="offline"), "besteffort", "/p", 0.0, 0, 0, 0, 0, None, ())
    entry = Touched("u", "/p", 2, None, 100_000, parts={NET_EGRESS: {}})
    memo = None
    asked = []
    for seq, tx in enumerate([10.0, 10.0, 10.0, 500.0, 70.0, 40.0, 10.0, 10.0, 10.0]):
        snap = Snapshot(seq, float(seq), 0.0, NodeSample(2.0, 0.1, GI, 0, 0), {}, {"u": pod, "h": host},
                        (InterfaceSample("eth0", True, 0.0, tx),), 0.0)  # fmt: skip
        plan = strategy.plan(node_state(snap, (2.0, GI)), Recorded({"u": entry}, {}, memo))
        memo = plan.memo
        asked.append([getattr(a, "rate", None) for a in plan.actions])
        assert plan.report.fields()["network_qos"]["host_network_pods"] == ["h"]  # skipped, and said so
    # first pass; tightened (above high) at 3; between the marks: still; released (under low) at 5; an
    # unchanged limit only on its turn, once in verify_every passes
    changes = {0: [1000], 3: [100], 5: [1000]}
    rate = [1000, 1000, 1000, 100, 100, 1000, 1000, 1000, 1000]
    expected = [changes.get(s, [rate[s]] if s % 3 == turn("u", 3) else []) for s in range(9)]
    assert asked == expected and sum(map(len, asked)) <= 5


# -- for real ------------------------------------------------------------------------------------------
@pytest.fixture
def nets() -> Iterator[Namespaces]:
    why = kernel_facts()
    if why is not None:
        pytest.skip(why)
    with namespaces() as n:
        yield n


def _procs_files(tree: V1Tree, cgroup: str) -> list[str]:
    return [f"{tree.layout.dir(c, cgroup)}/cgroup.procs" for c in tree.controllers()]


def _sample(tree: V1Tree, uid: str, cgroup: str, cls: str) -> PodSample:
    meta = PodMeta(uid, "default", f"pod-{cls}", cls, cpu_request_cores=0.1)  # type: ignore[arg-type]
    return PodSample(meta, "besteffort" if cls == "offline" else "burstable", cgroup, 0.0, 0, 0, 0, 0, None, ())


def _snapshot(seq: int, *pods: PodSample) -> Snapshot:
    return Snapshot(seq, float(seq), 0.0, NodeSample(2.0, 0.1, 8 * GI, GI, 0), {}, {p.uid: p for p in pods}, (), 0.0)


def _send(tree: V1Tree, nets: Namespaces, cgroup: str, ns: str, peer: str) -> float:
    """Bytes per second the sink received from a bounded stream of the pod (first to last byte)."""
    sender = in_cgroup_and_netns(_procs_files(tree, cgroup), ns, SENDER, peer, str(SENT))
    tree.procs.append(sender)
    got = nets.received()
    assert sender.wait(120) == 0 and got["bytes"] == SENT
    return float(got["bytes"]) / max(got["seconds"], 1e-6)


@pytest.mark.cgroupv1
def test_an_offline_pod_is_held_to_its_egress_limit_and_an_online_one_is_not(
    nets: Namespaces, v1tree_cgroupfs: V1Tree, tmp_path: Path
) -> None:
    tree = v1tree_cgroupfs
    off_pod, on_pod = nets.pod(), nets.pod()
    nets.start_sink()
    off_uid, off_cg, _ = tree.pod("besteffort")
    on_uid, on_cg, _ = tree.pod("burstable")
    for cg, pod in ((off_cg, off_pod), (on_cg, on_pod)):  # each pod's "pause" process holds its namespace
        tree.procs.append(in_cgroup_and_netns(_procs_files(tree, cg), pod.ns, PAUSE))
    host_uid, host_cg, _ = tree.pod("besteffort")  # hostNetwork: its process stays in the host's namespace
    tree.start(host_cg, PAUSE)

    # the collector finds each namespace from the pod's cgroup, and says which pod has none of its own
    sampler = Sampler(tree.layout, tree.model, CgroupPodSource(tree.layout, tree.model, 0.0), WindowStore(),
                      collectors=frozenset({"node", "pods", "pod_network"}))  # fmt: skip
    try:
        sampler.sample()
        assert _send(tree, nets, off_cg, off_pod.ns, off_pod.peer) > 0
        snap = sampler.sample()
    finally:
        sampler.close()
    net = {p.uid: p.network for p in snap.pods.values()}
    assert net[off_uid] is not None and (net[off_uid].tx_bytes_per_second or 0) > 0
    assert net[on_uid] is not None and not net[on_uid].host_network
    assert net[host_uid] is not None and net[host_uid].host_network

    config = EnforcementConfig(ledger_file=str(tmp_path / "ledger.json"))
    qos = NetworkQosConfig(enabled=True, offline_egress_bytes_per_second=LIMIT, min_pod_bytes_per_second=1000)
    reader = CgroupReader(tree.layout)
    enf = Enforcer(tree.layout, tree.model, reader, config, lambda: (2.0, 8 * GI),
                   registered=[*default_strategies(tree.layout, tree.model, config), NetEgress(qos)])  # fmt: skip
    offline, online = _sample(tree, off_uid, off_cg, "offline"), _sample(tree, on_uid, on_cg, "online")
    ours = os.stat("/proc/thread-self/ns/net").st_ino
    try:
        enf.on_snapshot(_snapshot(1, offline, online))
        assert enf.errors == 0, enf.last_error
        assert os.stat("/proc/thread-self/ns/net").st_ino == ours  # the agent's thread came back from the pod's
        held = root_qdisc(off_pod.ns, off_pod.link)
        assert held["kind"] == "tbf" and root_qdisc(on_pod.ns, on_pod.link)["kind"] == "noqueue"
        saved = json.loads((tmp_path / "ledger.json").read_text())["pods"][off_uid]["parts"]
        assert saved[NET_EGRESS] == {"eth0": {"kind": "noqueue", "handle": 0, "rate": None}}

        limited = _send(tree, nets, off_cg, off_pod.ns, off_pod.peer)
        free = _send(tree, nets, on_cg, on_pod.ns, on_pod.peer)
        assert limited < LIMIT * 1.5, f"offline pod sent {limited:.0f} B/s over a {LIMIT} B/s limit"
        assert free > limited * 3, f"online pod {free:.0f} B/s, offline {limited:.0f} B/s"

        # the pod turns online: its qdisc goes back
        turned = dataclasses.replace(offline, meta=dataclasses.replace(offline.meta, pod_class="online"))
        enf.on_snapshot(_snapshot(2, turned, online))
        assert root_qdisc(off_pod.ns, off_pod.link)["kind"] == "noqueue"
        # offline again, then a shutdown: back again
        enf.on_snapshot(_snapshot(3, offline, online))
        assert root_qdisc(off_pod.ns, off_pod.link)["kind"] == "tbf"
    finally:
        enf.stop()
    assert root_qdisc(off_pod.ns, off_pod.link)["kind"] == "noqueue" and enf.errors == 0, enf.last_error
