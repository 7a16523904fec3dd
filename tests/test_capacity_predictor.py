"""The node_peak predictor (agent.capacity.lendable, issue 20): the node's online peak from its own series, young pods'
requests, the system peak from a window, and each publishing model's number by its own rule."""

from __future__ import annotations

import pytest

from agent.capacity.lendable import (
    CapacityParams,
    OnlinePod,
    PodAges,
    memory_fill_limit,
    params_from,
    resource_capacity,
)
from agent.config_sections.lending import OversubscriptionConfig
from agent.windows.store import WindowStore, online_key, system_key

NOW = 100_000.0
P = CapacityParams(peak_window="max_avg_1h", min_history_seconds=300.0, cpu_reclaim_ratio=0.9, trust_seconds=0.0)


def fed(online: list[float], system: float = 0.0, seconds: int = 3600) -> WindowStore:
    """The node's online cpu at 1 Hz for `seconds` up to NOW, cycling through `online` minute by minute."""
    store = WindowStore()
    for i in range(seconds):
        t = NOW - seconds + 1 + i
        store.add(online_key("cpu"), t, online[(i // 60) % len(online)])
        store.add(system_key("cpu"), t, system)
    return store


def aged(*uids: str, since: float = NOW - 3600.0) -> PodAges:
    ages = PodAges()
    ages.observe(since, uids)
    ages.observe(NOW, uids)
    return ages


def test_node_peak_lends_unrequested_capacity_under_batch_and_requested_but_unused_under_annotations() -> None:
    # 10 minutes at 3 cores, then 1 core: the hour's peak of the node's online usage is 3 cores
    store = fed([3.0] * 10 + [1.0] * 50)
    pods = [OnlinePod("a", 2.0, 0.5), OnlinePod("b", 2.0, 0.5)]  # requests 4 of 16 cores
    cap = resource_capacity(store, NOW, "cpu", 16.0, 0.0, pods, aged("a", "b"), P)
    assert cap.online_peak == pytest.approx(3.0) and cap.online_request == 4.0
    assert cap.reclaimable == pytest.approx(1.0)  # 4 requested, 3 at the node's peak
    assert cap.headroom == pytest.approx(16 * 0.9 - 3.0)
    assert cap.batch == pytest.approx(16 * 0.9 - 3.0)  # kubernetes.io/batch-*: unrequested capacity too
    assert cap.oversubscription == pytest.approx(1.0)  # Volcano's annotation: on top of allocatable


def test_node_peak_is_below_the_sum_of_pod_peaks() -> None:
    """Two pods peaking at different times: the node's peak is one of them, not their sum."""
    store = WindowStore()
    for i in range(3600):
        t = NOW - 3599 + i
        a, b = (2.0, 0.1) if i < 1800 else (0.1, 2.0)
        store.add_many(t, [(("pod", "a", "cpu"), a), (("pod", "b", "cpu"), b), (online_key("cpu"), a + b)])
    pods = [OnlinePod("a", 2.0, 0.1), OnlinePod("b", 2.0, 2.0)]
    node = resource_capacity(store, NOW, "cpu", 8.0, 0.0, pods, aged("a", "b"), P)
    per_pod = resource_capacity(store, NOW, "cpu", 8.0, 0.0, pods, aged("a", "b"),
                                CapacityParams("max_avg_1h", 300.0, 0.9, 0.7, "pod_peaks"))  # fmt: skip
    assert node.online_peak == pytest.approx(2.1) and per_pod.online_peak == pytest.approx(4.0)


def test_young_pods_count_what_they_requested_and_do_not_use() -> None:
    store = fed([1.0])
    pods = [OnlinePod("old", 2.0, 1.0), OnlinePod("new", 4.0, 0.5)]
    ages = aged("old")
    ages.observe(NOW, ["old", "new"])  # "new" first seen now
    cap = resource_capacity(store, NOW, "cpu", 16.0, 0.0, pods, ages, P)
    assert cap.online_peak == pytest.approx(1.0 + 3.5)
    later = NOW + 300.0
    ages.observe(later, ["old", "new"])
    store.add(online_key("cpu"), later, 1.0)
    assert resource_capacity(store, later, "cpu", 16.0, 0.0, pods, ages, P).online_peak == pytest.approx(1.0)
    ages.observe(later + 1, ["old"])  # gone for a pass: young again when it comes back
    assert ages.age("new", later + 2) == 0.0 and ages.age("old", later + 2) == pytest.approx(3902.0)


def test_without_node_history_the_requests_count() -> None:
    store = fed([1.0], seconds=120)  # 2 minutes: less than min_history_seconds
    pods = [OnlinePod("a", 2.0, 0.5), OnlinePod("b", 1.0, 1.5)]
    cap = resource_capacity(store, NOW, "cpu", 16.0, 0.0, pods, aged("a", "b"), P)
    assert cap.online_peak == pytest.approx(2.0 + 1.5) and cap.reclaimable == 0.0
    empty = resource_capacity(WindowStore(), NOW, "cpu", 16.0, 0.0, pods, aged("a", "b"), P)
    assert empty.online_peak == pytest.approx(3.5)


def test_system_usage_is_the_peak_window_not_the_instant() -> None:
    store = WindowStore()
    for i in range(3600):
        t = NOW - 3599 + i
        store.add_many(t, [(online_key("cpu"), 1.0), (system_key("cpu"), 2.0 if 600 <= i < 1200 else 0.2)])
    cap = resource_capacity(store, NOW, "cpu", 16.0, 0.2, [OnlinePod("a", 2.0, 1.0)], aged("a"), P)
    assert cap.system_usage == pytest.approx(2.0)  # the hour's peak 5-minute average, not the 0.2 of this pass
    assert cap.headroom == pytest.approx(16 * 0.9 - 2.0 - 1.0)
    now_high = resource_capacity(store, NOW, "cpu", 16.0, 5.0, [OnlinePod("a", 2.0, 1.0)], aged("a"), P)
    assert now_high.system_usage == 5.0  # an instant above the window counts at once


def test_never_negative_and_params_from_config() -> None:
    store = fed([15.0])
    cap = resource_capacity(store, NOW, "cpu", 16.0, 0.0, [OnlinePod("a", 16.0, 15.0)], aged("a"), P)
    assert cap.batch == 0.0 and cap.oversubscription == 0.0 and cap.headroom < 0
    defaults = params_from(OversubscriptionConfig())
    assert defaults == CapacityParams()
    assert (defaults.predictor_for("cpu"), defaults.predictor_for("memory")) == ("week_peak", "nsigma")
    assert (defaults.peak_window, defaults.cpu_reclaim_ratio, defaults.memory_reclaim_ratio) == (
        "max_avg_1d",
        0.98,
        0.7,
    )


def test_memory_is_lent_up_to_the_margin_below_the_memory_watermark() -> None:
    """Lending stops pressure_margin_percent below eviction's memory high watermark (issue 33); CPU is not
    bounded by it (the watermark does not count batch CPU within its request)."""
    config = OversubscriptionConfig(memory_reclaim_ratio=0.9, cpu_reclaim_ratio=0.95)
    assert memory_fill_limit(80, 10) == 0.7 and memory_fill_limit(5, 10) == 0.0
    assert params_from(config).ratio("memory") == 0.9  # no watermark given: the ratio alone
    assert params_from(config, 60).ratio("memory") == 0.5
    assert params_from(config, 100).ratio("memory") == 0.9
    assert params_from(config, 60).ratio("cpu") == 0.95
    store = fed([2.0])
    capped = resource_capacity(store, NOW, "memory", 16.0, 1.0, [OnlinePod("a", 4.0, 2.0)], aged("a"),
                               params_from(config, 60))  # fmt: skip
    # no memory history: the pod counts its request (4); 0.5 of 16, less the system's 1
    assert capped.batch == pytest.approx(16.0 * 0.5 - 1.0 - 4.0)
