"""The capacity predictors' registry (issue 32): each predictor as a pure function of known series, a predictor
declared inside the test and used end to end (the agent's configuration and colo-sim), the cold-start rule, and
the learned margin across a restart (the windows saved and loaded as the agent does)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.capacity.lendable import CapacityParams, OnlinePod, PodAges, margins, params_from, resource_capacity
from agent.capacity.margin import LearnedMargin, MarginParams
from agent.capacity.predictors import registry
from agent.capacity.predictors.registry import Prediction, Reading
from agent.config_sections.lending import OversubscriptionConfig
from agent.windows.grid import quantile
from agent.windows.persist import load_windows, save_windows
from agent.windows.store import WindowStore, online_key
from colo_agent.main import main as agent_main
from colo_sim.node_plan import build
from colo_sim.packing import NodeSize
from colo_sim.policies import colo
from colo_sim.trace import Sample
from common.plugins import check_registered
from tools import docgen

NOW = 360_000.0  # on the minute grid (phase 0)
PARAMS = CapacityParams(peak_window="max_avg_1h", trust_seconds=0.0, margin=None)


def fed_minutes(store: WindowStore, key: tuple[str, str, str], minutes: list[float], end: float = NOW) -> None:
    """1 Hz samples, one value per minute, the last minute ending at `end`."""
    for m, value in enumerate(minutes):
        for s in range(60):
            store.add(key, end - 60 * (len(minutes) - m) + s + 1, value)


def reading(store: WindowStore, pods: list[OnlinePod], params: CapacityParams = PARAMS) -> Reading:
    return Reading(store, NOW, "cpu", pods, params)


def test_node_peak_is_the_hours_highest_five_minute_average() -> None:
    store = WindowStore()
    fed_minutes(store, online_key("cpu"), [1.0] * 20 + [4.0] * 5 + [1.0] * 35)
    got = registry.spec("node_peak").predict(reading(store, [OnlinePod("a", 8.0, 1.0)]))
    assert got.peak == pytest.approx(4.0) and got.history == pytest.approx(3600.0, rel=1e-3)  # counted over the day


def test_nsigma_is_the_hours_mean_plus_n_deviations_of_the_minute_means() -> None:
    minutes = [float(1 + m % 3) for m in range(60)]  # 1, 2, 3, 1, 2, 3, ...
    store = WindowStore()
    fed_minutes(store, online_key("cpu"), minutes)
    mean = sum(minutes) / 60
    sd = math.sqrt(sum((x - mean) ** 2 for x in minutes) / 59)
    got = registry.spec("nsigma").predict(reading(store, []))
    assert got.peak == pytest.approx(mean + 5 * sd)
    three = registry.spec("nsigma").predict(reading(store, [], CapacityParams(nsigma=3.0)))
    assert three.peak == pytest.approx(mean + 3 * sd)


def test_rc_like_sums_each_pods_p99_and_counts_a_pod_without_history_by_its_request() -> None:
    store = WindowStore()
    a = [float(m) for m in range(60)]
    b = [0.5] * 60
    fed_minutes(store, ("pod", "a", "cpu"), a)
    fed_minutes(store, ("pod", "b", "cpu"), b)
    pods = [OnlinePod("a", 100.0, 1.0), OnlinePod("b", 2.0, 0.5), OnlinePod("new", 3.0, 0.1)]
    got = registry.spec("rc_like").predict(reading(store, pods))
    assert got.peak == pytest.approx(quantile(sorted(a), 0.99) + 0.5 + 3.0)
    both = registry.spec("max").predict(reading(store, pods))
    assert both.peak == pytest.approx(max(got.peak, registry.spec("nsigma").predict(reading(store, pods)).peak))


def test_pod_peaks_lends_only_requested_but_unused() -> None:
    store = WindowStore()
    fed_minutes(store, ("pod", "a", "cpu"), [2.0] * 60)
    pods = [OnlinePod("a", 3.0, 2.0)]
    got = registry.spec("pod_peaks").predict(reading(store, pods))
    assert (got.peak, got.reclaimable) == (pytest.approx(2.0), pytest.approx(1.0))
    cap = resource_capacity(store, NOW, "cpu", 16.0, 0.0, pods, PodAges(), CapacityParams(predictor="pod_peaks",
                            peak_window="max_avg_1h", trust_seconds=0.0, margin=None))  # fmt: skip
    assert cap.batch == cap.oversubscription == pytest.approx(1.0)


# -- a predictor declared here, used end to end ---------------------------------------------------------


def half_of_requests(r: Reading) -> Prediction:
    """The test's predictor: the online pods take half of what they requested."""
    return Prediction(0.5 * sum(p.request for p in r.pods), math.inf)


@pytest.fixture
def declared() -> Iterator[str]:
    registry.register("half_of_requests", half_of_requests, order=990)
    yield "half_of_requests"
    registry.unregister("half_of_requests")


def test_a_predictor_declared_in_the_test_is_configured_and_replayed(declared: str) -> None:
    config = OversubscriptionConfig.model_validate({"cpu_predictor": declared})
    check_registered(config)  # what colo-agent and colo-sim check once they loaded a configuration
    with pytest.raises(ValueError, match="memory_predictor: unknown predictor 'nope'; registered: node_peak, "):
        check_registered(OversubscriptionConfig.model_validate({"memory_predictor": "nope"}))
    samples = [Sample("n1", f"vm{i}", 1_000_000.0 + 300 * k, 4.0, 1.0, 4e9, 1e9) for k in range(24) for i in range(2)]
    samples.sort(key=lambda s: (s.pod, s.unix_s))
    tl = build(samples, NodeSize(16.0, 64e9), 1.0)
    params = CapacityParams(
        cpu_predictor=declared, cpu_reclaim_ratio=1.0, trust_seconds=0.0, margin=None, min_history_seconds=300.0
    )  # (the pods are young for 300 s, not for the default hour: the trace is two hours long)
    lent = colo.run(tl.nodes[0], tl, params)["colo"][0]
    assert lent[5:] == pytest.approx([16.0 - 0.5 * 8.0] * 19)  # allocatable − half of the 8 requested cores
    # the agent's generated reference lists it among the predictors a configuration may name
    row = next(line for line in docgen.agent_config_page().splitlines() if "`oversubscription.cpu_predictor`" in line)
    assert f"`{declared}`" in row and "`week_peak`" in row


def test_a_name_is_registered_once_at_a_free_order(declared: str) -> None:
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(declared, half_of_requests, order=991)
    with pytest.raises(ValueError, match="order 10 is taken by 'node_peak'"):
        registry.register("another", half_of_requests, order=10)
    with pytest.raises(KeyError, match="unknown predictor 'nope'"):
        registry.spec("nope")


# -- the cold start and a restart -------------------------------------------------------------------------


def node_with_history(seconds: int, usage: float = 1.0) -> WindowStore:
    store = WindowStore()
    for i in range(seconds):
        t = NOW - seconds + 1 + i
        store.add_many(t, [(online_key("cpu"), usage), (("pod", "a", "memory"), 1e9)])
    return store


def cap_at(store: WindowStore, ages: PodAges, params: CapacityParams) -> float:
    pods = [OnlinePod("a", 4.0, 1.0)]
    ages.observe(NOW, ["a"])
    return resource_capacity(store, NOW, "cpu", 16.0, 0.0, pods, ages, params).batch


def test_a_young_node_lends_no_more_than_the_peers_rule_and_more_as_history_grows() -> None:
    params = CapacityParams(
        peak_window="max_avg_1h", cpu_reclaim_ratio=0.95, trust_seconds=3600.0, margin=None, min_history_seconds=300.0
    )  # the predictor trusted from 5 minutes on, so that the trust's growth shows
    peers = 16.0 * 0.6 - 1.0  # koordinator's rule at its default, the safer peer's
    predicted = 16.0 * 0.95 - 1.0  # the node_peak predictor's, with full trust
    aged = PodAges({"a": NOW - 7200})
    five = cap_at(node_with_history(300), aged, params)
    half = cap_at(node_with_history(1800), aged, params)
    full = cap_at(node_with_history(3600), aged, params)
    assert five == pytest.approx(peers + 300 / 3600 * (predicted - peers), rel=1e-3)
    assert five < half < full and half == pytest.approx(peers + 0.5 * (predicted - peers), rel=1e-3)
    assert full == pytest.approx(predicted, rel=1e-3)
    assert cap_at(WindowStore(), aged, params) <= peers  # windows lost: the peers' rule at most


def test_a_pod_just_started_on_an_old_node_counts_its_unused_request_less_and_less() -> None:
    params = CapacityParams(peak_window="max_avg_1h", cpu_reclaim_ratio=0.95, trust_seconds=0.0, margin=None)
    store = node_with_history(7200)  # an old node; the pod young against min_history_seconds, the default hour
    pods = [OnlinePod("a", 4.0, 1.0)]
    lent = [resource_capacity(store, NOW, "cpu", 16.0, 0.0, pods, PodAges({"a": NOW - age}), params).batch
            for age in (0.0, 1800.0, 3600.0)]  # fmt: skip
    assert lent == pytest.approx([16 * 0.95 - 1.0 - 3.0, 16 * 0.95 - 1.0 - 1.5, 16 * 0.95 - 1.0])


def test_a_restart_with_restored_windows_is_not_a_cold_start(tmp_path: Path) -> None:
    params = CapacityParams(peak_window="max_avg_1h", trust_seconds=3600.0)
    store = node_with_history(3600)
    before = cap_at(store, PodAges({"a": NOW - 3600}), params)
    path = str(tmp_path / "state")
    save_windows(store, path, node="n1", mono_now=NOW, wall_now=1e9)
    # the agent starts again 10 s later on a fresh monotonic clock: windows and the pods' ages come back
    mono = 50.0
    restored = load_windows(path, node="n1", mono_now=mono, wall_now=1e9 + 10)
    ages = PodAges.from_windows(restored)
    assert ages.age("a", mono) == pytest.approx(3600.0 + 10.0, abs=5)  # its hour, and the 10 s the agent was down
    pods = [OnlinePod("a", 4.0, 1.0)]
    ages.observe(mono, ["a"])
    after = resource_capacity(restored, mono, "cpu", 16.0, 0.0, pods, ages, params).batch
    assert after == pytest.approx(before, rel=1e-2)
    cold = resource_capacity(WindowStore(), mono, "cpu", 16.0, 0.0, pods, PodAges(), params).batch
    assert cold < 0.8 * after  # without the state file, it is one


@pytest.mark.parametrize("predictor", ["nsigma", "node_peak", "rc_like"])
def test_a_gap_in_the_last_hour_does_not_make_an_old_node_young_again(predictor: str) -> None:
    # two hours at 1 Hz with 20 s missing half an hour ago (an agent's restart): longer than the store's max_gap,
    # so the last hour's coverage stays below 1 until the gap leaves it; the history a predictor needs is the
    # series', not its window's
    params = CapacityParams(peak_window="max_avg_1h", min_history_seconds=3600.0, trust_seconds=0.0, margin=None)
    store = WindowStore()
    for i in range(7200):
        t = NOW - 7200 + 1 + i
        if not 5400 <= i < 5420:
            store.add_many(t, [(online_key("cpu"), 1.0 + i % 2), (("pod", "a", "cpu"), 1.0 + i % 2)])
    got = registry.spec(predictor).predict(reading(store, [OnlinePod("a", 8.0, 1.0)], params))
    assert got.peak < 8.0  # the series' statistic, not Σ max(request, usage)
    hour, avg5 = store.values(online_key("cpu"), ("max_avg_1h", "avg_5m"), NOW)
    assert registry.seen_seconds("max_avg_1h", hour, avg5) < 3600.0  # what it would have read


# -- the learned margin -----------------------------------------------------------------------------------


def test_the_margin_shrinks_fast_grows_slowly_and_stays_within_bounds() -> None:
    m = LearnedMargin("cpu", MarginParams(decrease=0.5, increase_per_hour=0.1, floor=0.2, hold_seconds=300.0))
    m.lent = 6.0
    assert m.update(0.0, online=12.0, system=0.0, allocatable=16.0) == 0.5  # 12 > 16 − 6: online entered it
    assert m.update(1.0, online=12.0, system=0.0, allocatable=16.0) == 0.5  # held: one cut per 300 s
    assert m.update(301.0, online=12.0, system=0.0, allocatable=16.0) == 0.25
    assert m.update(700.0, online=12.0, system=0.0, allocatable=16.0) == 0.2  # the floor
    assert m.update(700.0 + 3600, online=1.0, system=0.0, allocatable=16.0) == pytest.approx(0.3)
    m.factor = 0.99
    assert m.update(700.0 + 7200, online=1.0, system=0.0, allocatable=16.0) == 1.0


def test_the_learned_margin_is_kept_across_a_restart_and_scales_what_is_lent(tmp_path: Path) -> None:
    params = CapacityParams(peak_window="max_avg_1h", cpu_reclaim_ratio=0.95, trust_seconds=0.0)
    store = node_with_history(3600, usage=10.0)
    learned = margins(params, store)
    assert learned is not None
    learned["cpu"].lent = 8.0  # the previous pass lent 8 of 16 cores; online now uses 10
    pods = [OnlinePod("a", 4.0, 10.0)]
    cap = resource_capacity(store, NOW, "cpu", 16.0, 0.0, pods, PodAges({"a": 0.0}), params, learned["cpu"])
    assert cap.margin == 0.5 and cap.batch == pytest.approx(0.5 * (16 * 0.95 - 10.0))
    learned["cpu"].keep(store)
    path = str(tmp_path / "state")
    save_windows(store, path, node="n1", mono_now=NOW, wall_now=1e9)
    restored = load_windows(path, node="n1", mono_now=5.0, wall_now=1e9 + 5)
    again = margins(params, restored)
    assert again is not None and again["cpu"].factor == 0.5 and again["memory"].factor == 1.0
    assert margins(CapacityParams(margin=None), restored) is None


# -- the time-of-day profile --------------------------------------------------------------------------------


def daily(days: int, busy_hour: int, end: float) -> WindowStore:
    """The node's online cpu, one sample a minute for `days` days up to `end` (times from a midnight): 8 cores
    in the hour `busy_hour` of each day, 1 core otherwise."""
    store = WindowStore(max_gap=60.0)
    start = end - days * 86400.0
    for m in range(days * 1440):
        t = start + 60.0 * m
        store.add(online_key("cpu"), t, 8.0 if int(t // 3600) % 24 == busy_hour else 1.0)
    return store


def test_time_of_day_takes_the_same_hours_of_the_last_days() -> None:
    end = 3 * 86400.0 + 13 * 3600.0  # now is 13 h; 10 h to 11 h was busy on each of the last three days
    store = daily(3, 10, end)
    r = Reading(store, end, "cpu", [], CapacityParams(profile_margin=0.1))
    quiet = registry.spec("time_of_day").predict(r)
    assert quiet.peak == pytest.approx(1.0 * 1.1)  # hours 13 and 14 of the last days: 1 core, + 10 %
    assert registry.spec("node_peak").predict(r).peak == pytest.approx(8.0)  # the day's peak
    nine = end - 4 * 3600.0  # at 9 h the busy hour is next
    before = Reading(daily(3, 10, nine), nine, "cpu", [], CapacityParams(profile_margin=0.1))
    assert registry.spec("time_of_day").predict(before).peak == pytest.approx(8.0 * 1.1)
    assert store.day_profile(online_key("cpu"), end, 7)[1] == 3  # three days seen
    assert store.day_profile(("pod", "x", "cpu"), end, 7) == (None, 0)  # pods keep no hourly maxima


def test_the_hourly_maxima_survive_a_restart(tmp_path: Path) -> None:
    for end in (3 * 86400.0 + 9 * 3600.0, 3 * 86400.0 + 13 * 3600.0):  # before the busy hour, and after it
        store = daily(3, 10, end)
        path = str(tmp_path / "state")
        save_windows(store, path, node="n1", mono_now=end, wall_now=2e9)
        # a minute later on a fresh monotonic clock: the grid moves by whole 5-minute slots and the hours by
        # whole hours, so within the hour the profile is the same
        restored = load_windows(path, node="n1", mono_now=100.0, wall_now=2e9 + 60)
        was = store.day_profile(online_key("cpu"), end + 60, 7)
        assert restored.day_profile(online_key("cpu"), 100.0, 7) == was and was[1] == 3


def test_week_peak_remembers_the_busy_hours_of_the_last_days() -> None:
    end = 3 * 86400.0 + 13 * 3600.0
    store = daily(3, 10, end)
    assert store.days_peak(online_key("cpu"), end, 7) == pytest.approx(8.0)
    r = Reading(store, end + 23 * 3600.0, "cpu", [], CapacityParams())
    store.add(online_key("cpu"), r.now, 1.0)  # noon the next day: the day's window has forgotten 10 h, the week has not
    assert registry.spec("node_peak").predict(r).peak == pytest.approx(1.0)
    assert registry.spec("week_peak").predict(r).peak == pytest.approx(8.0)
    one_day = Reading(store, r.now, "cpu", [], CapacityParams(profile_days=1))
    assert registry.spec("week_peak").predict(one_day).peak == pytest.approx(1.0)


def test_colo_agent_refuses_a_predictor_no_module_registered(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLO_OVERSUBSCRIPTION__PREDICTOR", "magic")
    assert agent_main(["--check"]) == 2
    err = capsys.readouterr().err
    assert "oversubscription.predictor: unknown predictor 'magic'; registered: node_peak" in err
    assert len(err.strip().splitlines()) == 1


def test_predictor_names_both_resources_and_a_resources_own_key_wins() -> None:
    defaults = params_from(OversubscriptionConfig())
    assert (defaults.predictor_for("cpu"), defaults.predictor_for("memory")) == ("week_peak", "nsigma")
    both = params_from(OversubscriptionConfig.model_validate({"predictor": "pod_peaks"}))
    assert (both.predictor_for("cpu"), both.predictor_for("memory")) == ("pod_peaks", "pod_peaks")
    own = params_from(OversubscriptionConfig.model_validate({"predictor": "pod_peaks", "memory_predictor": "max"}))
    assert (own.predictor_for("cpu"), own.predictor_for("memory")) == ("pod_peaks", "max")
    keys = {"trust_seconds": 60.0, "margin_floor": 0.5, "cpu_reclaim_ratio": 0.9, "min_history_seconds": 10.0}
    given = params_from(OversubscriptionConfig.model_validate(keys))
    assert (given.trust_seconds, given.cpu_reclaim_ratio, given.min_history_seconds) == (60.0, 0.9, 10.0)
    assert given.margin is not None and given.margin.floor == 0.5
    assert params_from(OversubscriptionConfig.model_validate({"margin_floor": 1.0})).margin is None


def test_replays_of_several_predictors_share_their_predictions_and_give_each_ones_numbers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """colo-sim's paper replay: `max` reuses what `nsigma` and `rc_like` predicted in the same step (each made
    once a step and resource), and every policy's numbers are those of its own replay alone."""
    samples = [
        Sample("n1", f"vm{i}", 1_000_000.0 + 300 * k, 4.0, 0.5 + (k * (i + 1)) % 7 * 0.3, 4e9, 1e9 + 1e7 * k)
        for k in range(60)
        for i in range(3)
    ]
    samples.sort(key=lambda s: (s.pod, s.unix_s))
    tl = build(samples, NodeSize(16.0, 64e9), 1.0)
    node = tl.nodes[0]
    made: list[str] = []
    for name in ("nsigma", "rc_like"):
        spec = registry.spec(name)

        def counted(r: Reading, inner: registry.Predict = spec.predict, name: str = name) -> Prediction:
            made.append(name)
            return inner(r)

        monkeypatch.setitem(registry._SPECS, name, registry.PredictorSpec(name, spec.order, counted, spec.per_pod))
    together = colo.run_paper(node, tl, {"nsigma": "nsigma", "percentile": "rc_like", "max": "max"})
    assert made.count("rc_like") == made.count("nsigma") == 2 * len(node.present)  # once a step and resource
    for policy, predictor in {"nsigma": "nsigma", "percentile": "rc_like", "max": "max"}.items():
        alone = colo.run_paper(node, tl, {policy: predictor})
        assert alone[policy] == together[policy], policy
