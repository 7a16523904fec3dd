"""The capacity formula on tables of pods, with windows fed by a synthetic clock."""

from __future__ import annotations

import pytest

from agent.capacity.lendable import CapacityParams, compute
from agent.capacity.owner import parse_types
from agent.node_state import node_state
from agent.snapshot import NodeSample, PodMeta, PodSample, Snapshot
from agent.windows.store import WindowStore
from kube.resources import node_allocatable, pod_limits, pod_requests

GI = 1 << 30
#: The per-pod rule these tables were written for (the node predictor: tests/test_capacity_predictor.py).
PODS = CapacityParams("max_avg_1h", 300.0, 0.8, 0.75, "pod_peaks")
PER_POD_CONFIG = {"predictor": "pod_peaks", "peak_window": "max_avg_1h", "cpu_reclaim_ratio": 0.8,
                  "memory_reclaim_ratio": 0.75, "min_history_seconds": 300.0}  # fmt: skip


def sample(uid: str, cls: str, cpu_req: float, mem_req: int, cpu: float, mem: int) -> PodSample:
    meta = PodMeta(uid, "ns", uid, cls, cpu_request_cores=cpu_req, memory_request_bytes=mem_req)  # type: ignore[arg-type]
    return PodSample(meta, "burstable", f"/kubepods/burstable/pod{uid}", cpu, mem, mem, mem, 0, 0.0, ())


def snapshot(pods: list[PodSample], node_cpu: float, node_mem: int, now: float) -> Snapshot:
    node = NodeSample(8.0, node_cpu, 32 * GI, node_mem, 0)
    return Snapshot(1, now, 0.0, node, {}, {p.uid: p for p in pods}, (), 0.0)


def feed(store: WindowStore, pods: list[PodSample], seconds: int, now: float) -> None:
    """Constant usage for `seconds` up to `now`, one sample a second."""
    for i in range(seconds):
        t = now - seconds + 1 + i
        for p in pods:
            store.add(("pod", p.uid, "cpu"), t, p.cpu_cores or 0.0)
            store.add(("pod", p.uid, "memory"), t, float(p.memory_working_set_bytes))


def test_reclaimable_bounded_by_headroom() -> None:
    now = 10_000.0
    pods = [
        sample("a", "online", 4.0, 8 * GI, 1.0, 2 * GI),  # reclaims 3 cores, 6 GiB
        sample("b", "online", 1.0, 1 * GI, 1.5, 2 * GI),  # above its request: reclaims nothing
        sample("c", "offline", 2.0, 4 * GI, 2.0, 4 * GI),  # offline pods never count
    ]
    store = WindowStore()
    feed(store, pods, 600, now)
    # node: 8 cores, 32 GiB; pods use 4.5 cores and 8 GiB; system = node - pods
    snap = snapshot(pods, node_cpu=5.0, node_mem=10 * GI, now=now)
    cpu, mem = compute(snap, store, 8.0, 32 * GI, PODS)
    assert cpu.reclaimable == pytest.approx(3.0)
    assert cpu.system_usage == pytest.approx(0.5)
    assert cpu.online_peak == pytest.approx(2.5)
    assert cpu.headroom == pytest.approx(8 * 0.8 - 0.5 - 2.5)
    assert cpu.oversubscription == pytest.approx(3.0)  # min(3.0, 3.4)
    assert mem.reclaimable == pytest.approx(6 * GI)
    assert mem.system_usage == pytest.approx(2 * GI)
    assert mem.headroom == pytest.approx(32 * GI * 0.75 - 2 * GI - 4 * GI)
    assert mem.oversubscription == pytest.approx(6 * GI)

    # a busy node: headroom is the bound
    busy = snapshot(pods, node_cpu=8.0, node_mem=28 * GI, now=now)
    cpu, mem = compute(busy, store, 8.0, 32 * GI, PODS)
    assert cpu.headroom == pytest.approx(6.4 - 3.5 - 2.5)
    assert cpu.oversubscription == pytest.approx(0.4)
    assert mem.headroom == pytest.approx(24 * GI - 20 * GI - 4 * GI)
    assert mem.oversubscription == 0.0


def test_peak_is_max_of_5_minute_averages_not_current() -> None:
    now = 10_000.0
    quiet = sample("a", "online", 4.0, 8 * GI, 0.5, GI)
    store = WindowStore()
    # 10 minutes at 3 cores, then 20 minutes at 0.5: the hour's peak 5-minute average is 3 cores
    for i in range(1800):
        t = now - 1800 + 1 + i
        store.add(("pod", "a", "cpu"), t, 3.0 if i < 600 else 0.5)
        store.add(("pod", "a", "memory"), t, float(GI))
    cpu, _ = compute(snapshot([quiet], 1.0, 2 * GI, now), store, 8.0, 32 * GI, PODS)
    assert cpu.online_peak == pytest.approx(3.0)
    assert cpu.reclaimable == pytest.approx(1.0)


def test_young_pod_counts_its_full_request() -> None:
    now = 10_000.0
    young = sample("y", "online", 2.0, 4 * GI, 0.1, GI)
    store = WindowStore()
    feed(store, [young], 120, now)  # 2 minutes: less than the 5 required
    cpu, mem = compute(snapshot([young], 0.1, GI, now), store, 8.0, 32 * GI, PODS)
    assert cpu.reclaimable == 0.0 and cpu.online_peak == pytest.approx(2.0)
    assert mem.reclaimable == 0.0 and mem.online_peak == pytest.approx(4 * GI)
    cpu, _ = compute(
        snapshot([young], 0.1, GI, now),
        store,
        8.0,
        32 * GI,
        CapacityParams("max_avg_1h", 60.0, 0.8, 0.75, "pod_peaks"),
    )
    assert cpu.reclaimable == pytest.approx(1.9)


def test_unknown_class_counts_as_online_and_never_negative() -> None:
    now = 10_000.0
    p = sample("u", "unknown", 1.0, GI, 0.2, GI // 2)
    store = WindowStore()
    feed(store, [p], 600, now)
    cpu, _ = compute(snapshot([p], 7.9, 31 * GI, now), store, 8.0, 32 * GI, PODS)
    assert cpu.reclaimable == pytest.approx(0.8)
    assert cpu.headroom < 0 and cpu.oversubscription == 0.0


def test_requests_limits_and_allocatable_from_api_objects() -> None:
    pod = {
        "spec": {
            "containers": [
                {
                    "resources": {
                        "requests": {"cpu": "250m", "memory": "256Mi"},
                        "limits": {"cpu": "1", "memory": "1Gi"},
                    }
                },
                {"resources": {"requests": {"cpu": "1.5", "memory": "1G"}, "limits": {"cpu": "2"}}},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "4", "memory": "64Mi"}}}],
            "overhead": {"cpu": "100m"},
        }
    }
    cpu, mem = pod_requests(pod)
    assert cpu == pytest.approx(4.1)  # the init container's 4 cores dominate, plus overhead
    assert mem == 256 * (1 << 20) + 10**9
    assert pod_limits(pod) == (3.0, None)  # one container has no memory limit
    assert pod_requests({"spec": {"containers": [{"resources": {"requests": {"cpu": "bogus"}}}]}}) == (0.0, 0)
    assert node_allocatable({"status": {"allocatable": {"cpu": "3920m", "memory": "15Gi"}}}) == (3.92, 15 * GI)
    assert node_allocatable({}) == (None, None)


def _init(cpu: str, mem: str, sidecar: bool = False) -> dict[str, object]:
    c: dict[str, object] = {"resources": {"requests": {"cpu": cpu, "memory": mem}}}
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


@pytest.mark.parametrize(
    ("containers", "inits", "overhead", "expected"),
    [
        # (app containers' cpu requests, init containers in order, overhead) -> (cpu, memory in Mi)
        (["1"], [], None, (1.0, 100)),
        (["1"], [_init("2", "50Mi")], None, (2.0, 100)),  # a regular init container alone
        (["1"], [_init("500m", "300Mi", sidecar=True)], None, (1.5, 400)),  # a sidecar runs with the app
        # a regular init container after a sidecar needs both: 0.5 + 1.8 = 2.3 > 1 + 0.5
        (["1"], [_init("500m", "10Mi", sidecar=True), _init("1800m", "10Mi")], None, (2.3, 110)),
        # the same init container before the sidecar runs alone: max(1.8, 1 + 0.5)
        (["1"], [_init("1800m", "10Mi"), _init("500m", "10Mi", sidecar=True)], None, (1.8, 110)),
        # two sidecars, a regular one between them sees only the first
        (["1"], [_init("1", "1Mi", sidecar=True), _init("3", "1Mi"), _init("1", "1Mi", sidecar=True)], None, (4.0, 102)),
        (["1"], [_init("1", "1Mi", sidecar=True), _init("1", "1Mi", sidecar=True), _init("2500m", "1Mi")], None, (4.5, 102)),
        (["1", "2"], [_init("2", "1Gi")], {"cpu": "250m", "memory": "10Mi"}, (3.25, 1024 + 10)),  # + overhead
    ],
)  # fmt: skip
def test_pod_requests_follow_the_schedulers_sidecar_rule(
    containers: list[str], inits: list[dict[str, object]], overhead: dict[str, str] | None, expected: tuple[float, int]
) -> None:
    spec: dict[str, object] = {
        "containers": [{"resources": {"requests": {"cpu": c, "memory": "100Mi" if i == 0 else "0"}}}
                       for i, c in enumerate(containers)],
        "initContainers": inits,
    }  # fmt: skip
    if overhead:
        spec["overhead"] = overhead
    cpu, mem = pod_requests({"spec": spec})
    assert (cpu, mem) == (pytest.approx(expected[0]), expected[1] << 20)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, {"cpu", "memory"}), ("cpu", {"cpu"}), ("memory", {"memory"}), ("cpu,memory", {"cpu", "memory"}),
     (" memory , cpu ", {"cpu", "memory"}), ("gpu", {"cpu", "memory"}), ("", {"cpu", "memory"}), ("cpu,disk", {"cpu", "memory"})],
)  # fmt: skip
def test_oversubscription_types(value: str | None, expected: set[str]) -> None:
    warnings: list[str] = []
    assert parse_types(value, warnings.append) == expected
    assert bool(warnings) == (
        value is not None and value.strip() not in ("cpu", "memory", "cpu,memory", "memory , cpu")
    )


def test_current_growth_counts_before_the_next_minute_boundary() -> None:
    now = 10_000.0
    p = sample("g", "online", 4.0, 8 * GI, 3.0, GI)
    store = WindowStore()
    for i in range(1200):  # 20 minutes at 0.5 cores, then the last 30 s at 3.5 cores
        t = now - 1200 + 1 + i
        store.add(("pod", "g", "cpu"), t, 0.5 if i < 1170 else 3.5)
        store.add(("pod", "g", "memory"), t, float(GI))
    avg5 = (270 * 0.5 + 30 * 3.5) / 300
    cpu, _ = compute(snapshot([p], 3.0, 2 * GI, now), store, 8.0, 32 * GI, PODS)
    assert cpu.online_peak == pytest.approx(max(avg5, store.value(("pod", "g", "cpu"), "max_avg_1h", now).value or 0))
    assert cpu.online_peak == pytest.approx(avg5)


def test_readme_worked_example() -> None:
    """The README's example, computed by the code."""
    now = 10_000.0
    web = sample("web", "online", 8.0, 16 * GI, 2.5, 6 * GI)
    cache = sample("cache", "online", 2.0, 24 * GI, 2.0, 20 * GI)
    store = WindowStore()
    feed(store, [web, cache], 600, now)
    node = NodeSample(16.0, 5.5, 64 * GI, 30 * GI, 0)
    snap = Snapshot(1, now, 0.0, node, {}, {"web": web, "cache": cache}, (), 0.0)
    cpu, mem = compute(snap, store, 16.0, 64 * GI, PODS)
    assert int(cpu.oversubscription * 1000) == 5500 and cpu.headroom == pytest.approx(7.3)
    assert int(mem.oversubscription) == 15032385536 and mem.headroom == pytest.approx(18 * GI)


def test_oversubscription_metrics_and_section_when_computed() -> None:
    """The published integers and the computation behind them live side by side and both export."""
    from prometheus_client.core import GaugeMetricFamily

    from agent.capacity.owner import OversubscriptionOwner
    from agent.config_sections.lending import OversubscriptionConfig
    from agent.view import AgentView

    now = 10_000.0
    pods = [sample("a", "online", 4.0, 8 * GI, 1.0, 2 * GI)]
    store = WindowStore()
    feed(store, pods, 600, now)
    view = AgentView(store, 1.0, "n1")
    snap = snapshot(pods, node_cpu=1.5, node_mem=4 * GI, now=now)
    owner = OversubscriptionOwner(view, OversubscriptionConfig(enabled_on_all_nodes=True, **PER_POD_CONFIG))
    node_obj = {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}}}
    assert owner.changes(node_obj, now).annotations == {"volcano.sh/oversubscription-cpu": "0",
                                                        "volcano.sh/oversubscription-memory": "0"}  # fmt: skip
    owner.on_state(node_state(snap, node_allocatable(node_obj)), node_obj)  # the pass's capacity stage ...
    view.publish(snap)  # ... then the snapshot is visible
    changes = owner.changes(node_obj, now)
    assert changes.annotations == {"volcano.sh/oversubscription-cpu": "3000",
                                   "volcano.sh/oversubscription-memory": str(6 * GI)}  # fmt: skip
    section = owner.section()
    assert section["cpu_millicores"] == 3000 and section["memory_bytes"] == 6 * GI
    assert section["cpu"]["unit"] == "cores" and section["memory"]["reclaimable"] == 6 * GI
    families = {m.name: m for m in owner.metrics()}
    assert isinstance(families["colo_oversubscription_cpu_cores"], GaugeMetricFamily)
    assert families["colo_oversubscription_cpu_cores"].samples[0].value == 3.0
    assert families["colo_capacity_reclaimable_bytes"].samples[0].value == 6 * GI
    # what the Node carries, beside what the agent would lend (ColoBatchCapacityAboveLendable compares them)
    assert families["colo_node_batch_status_cpu_cores"].samples[0].value == 0.0  # the Node carries none
    node_obj["status"]["allocatable"] |= {"kubernetes.io/batch-cpu": "2500", "kubernetes.io/batch-memory": "1Gi"}
    owner.changes(node_obj, now)
    families = {m.name: m for m in owner.metrics()}
    assert families["colo_node_batch_status_cpu_cores"].samples[0].value == 2.5
    assert families["colo_node_batch_status_memory_bytes"].samples[0].value == GI
