"""Table tests of each rebalancing step (controller/rebalance/), on real Node/Pod objects cut to facts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contract.agent_api import DocumentRejected
from contract.classify import Classifier
from controller.config import build_config
from controller.errors import ConfigError
from controller.rebalance import anomaly
from controller.rebalance.budget import budget, exhausted, gate
from controller.rebalance.candidates import Candidate, candidates
from controller.rebalance.fit import Destination, DestinationPool, misfit
from controller.rebalance.node_levels import Limits, classify_node, effective_limits, over_resources
from controller.rebalance.plan import Source, plan_moves
from controller.rebalance.settings import RebalanceSettings
from controller.rebalance.traits import Amounts, PodTraits, node_traits, pod_traits
from controller.rebalance.usage import node_usage, percent, pod_usages
from testsupport.rebalance_objects import GIB, agent_pod, node, pod

CFG = RebalanceSettings(enabled=True)


def settings(**doc: Any) -> RebalanceSettings:
    return RebalanceSettings.model_validate(doc)


CLASSIFIER = Classifier()


def facts(p: dict[str, Any], cfg: RebalanceSettings = CFG) -> PodTraits:
    f = pod_traits(p, CLASSIFIER, cfg.selector_label_keys() | {"koordinator.sh/qosClass"})
    assert f is not None
    return f


# ---- step 1: usage -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "ratios", "expected_pct"),
    [
        (node("a", cpu=16, memory_gib=64), (0.5, 0.25), (50.0, 25.0)),
        # allocatable below capacity: the same load is a larger share of what pods may use
        (node("b", cpu=16, memory_gib=64, alloc_cpu=12, alloc_memory_gib=48), (0.75, 0.6), (100.0, 80.0)),
        (node("c"), (None, 0.2), None),  # no fresh CPU window
        (node("d"), (0.2, float("nan")), None),
        ({"metadata": {"name": "e"}, "status": {}}, (0.2, 0.2), None),  # no capacity/allocatable
    ],
)
def test_node_usage_is_window_ratio_times_capacity_over_allocatable(
    obj: dict[str, Any], ratios: tuple[float | None, float | None], expected_pct: tuple[float, float] | None
) -> None:
    f = node_traits(obj)
    usage = node_usage(f, *ratios)
    if expected_pct is None:
        assert usage is None
        return
    assert usage is not None and f.allocatable is not None
    pct = percent(usage, f.allocatable)
    assert pct.cpu == pytest.approx(expected_pct[0]) and pct.memory == pytest.approx(expected_pct[1])


def test_pod_usages_parse_the_agents_pod_list() -> None:
    unnamed = {**agent_pod("a", "p3", 1.0, GIB), "namespace": None, "name": None}  # standalone: no API metadata
    doc = [agent_pod("a", "p1", 1.5, 2 * GIB), agent_pod("a", "p2", None, GIB), unnamed]
    (only,) = pod_usages(json.dumps(doc), "avg_5m")
    assert (only.namespace, only.name, only.usage) == ("a", "p1", Amounts(1.5, 2 * GIB))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda p: p.pop("memory_working_set_bytes"), "missing_field"),  # a renamed key
        (lambda p: p.update(memory_working_set_bytes="1Gi"), "wrong_type"),
        (lambda p: p["windows"]["avg_5m"]["cpu_cores"].update(value=-1.0), "out_of_range"),
        (lambda p: p.update(cpu_throttled_ratio=7.5), "out_of_range"),
    ],
)
def test_a_pod_list_the_contract_rejects_is_rejected_whole(
    change: Callable[[dict[str, Any]], object], reason: str
) -> None:
    bad = agent_pod("a", "p2", 1.0, GIB)
    change(bad)
    with pytest.raises(DocumentRejected) as err:
        pod_usages(json.dumps([agent_pod("a", "p1", 1.0, GIB), bad]), "avg_5m")
    assert err.value.reason == reason
    for body, why in ((b'{"not": "a list"}', "not_object"), (b"[{", "not_json")):
        with pytest.raises(DocumentRejected) as err:
            pod_usages(body, "avg_5m")
        assert err.value.reason == why


# ---- step 2: classification ----------------------------------------------------------------------

FIXED = Limits(Amounts(45, 55), Amounts(75, 80))


@pytest.mark.parametrize(
    ("pct", "expected"),
    [
        ((30, 40), "low"),
        ((44.9, 54.9), "low"),
        ((45, 40), "normal"),  # every resource must be under its low threshold
        ((30, 60), "normal"),
        ((75, 80), "normal"),  # at the high threshold is not over it
        ((75.1, 10), "high"),  # any resource over its high threshold
        ((10, 80.5), "high"),
        ((90, 90), "high"),
    ],
)
def test_classification(pct: tuple[float, float], expected: str) -> None:
    assert classify_node(Amounts(*pct), FIXED) == expected


def test_deviation_thresholds_are_around_the_cluster_average() -> None:
    pcts = {"a": Amounts(20, 30), "b": Amounts(40, 50), "c": Amounts(60, 70)}  # average 40 / 50
    limits = effective_limits(Amounts(10, 10), Amounts(15, 15), pcts, deviation=True)
    assert limits == Limits(Amounts(30, 40), Amounts(55, 65))
    assert [classify_node(p, limits) for p in pcts.values()] == ["low", "normal", "high"]
    clamped = effective_limits(Amounts(90, 90), Amounts(90, 90), pcts, deviation=True)
    assert clamped == Limits(Amounts(0, 0), Amounts(100, 100))
    assert effective_limits(Amounts(1, 2), Amounts(3, 4), pcts, deviation=False) == Limits(Amounts(1, 2), Amounts(3, 4))


def test_over_resources_worst_first() -> None:
    assert over_resources(Amounts(80, 95), Amounts(75, 80)) == ("memory", "cpu")
    assert over_resources(Amounts(90, 81), Amounts(75, 80)) == ("cpu", "memory")
    assert over_resources(Amounts(70, 81), Amounts(75, 80)) == ("memory",)


# ---- step 3: anomaly confirmation ----------------------------------------------------------------


def test_a_node_is_a_source_only_after_consecutive_high_cycles() -> None:
    high_by_cycle = [{"a", "b"}, {"a", "b"}, {"a"}, {"a", "b"}, {"a", "b"}, {"a", "b"}]
    counts: dict[str, int] = {}
    confirmed = []
    for high in high_by_cycle:
        counts = anomaly.next_counts(counts, high)
        confirmed.append(anomaly.confirmed(counts, 3))
    assert confirmed == [[], [], ["a"], ["a"], ["a"], ["a", "b"]]  # b's count reset in cycle 3
    assert counts == {"a": 6, "b": 3}
    assert anomaly.after_evictions(counts, {"a"}) == {"a": 0, "b": 3}
    assert anomaly.next_counts(counts, set()) == {}  # not high (or no fresh sample): reset
    assert anomaly.next_counts(counts, {"a", "b"}, settling={"a"}) == {"b": 4}  # lost pods recently: held at 0


@pytest.mark.parametrize(
    ("window", "seconds"),
    [("avg_1m", 60), ("avg_5m", 300), ("p95_5m", 300), ("max_avg_1h", 3600), ("max_avg_1d", 86400)],
)
def test_a_node_settles_for_its_windows_span(window: str, seconds: float) -> None:
    assert anomaly.settle_seconds(window) == seconds
    acted = {"a": 1000.0, "b": 1000.0 - seconds}
    assert anomaly.settling(acted, 1000.0 + seconds - 1, seconds) == {"a"}


# ---- step 4: budget ------------------------------------------------------------------------------


def test_budget_is_the_room_of_low_nodes_up_to_their_high_thresholds() -> None:
    rooms = [(Amounts(4, 10 * GIB), Amounts(12, 40 * GIB)), (Amounts(13, 1 * GIB), Amounts(12, 40 * GIB))]
    assert budget(rooms) == Amounts(8, 69 * GIB)  # a node over its threshold adds nothing, never less
    assert not exhausted(Amounts(0.1, 1)) and exhausted(Amounts(0, 1)) and exhausted(Amounts(1, -1))


@pytest.mark.parametrize(
    ("low", "sources", "number_of_nodes", "expected"),
    [
        (1, 1, 0, None),
        (0, 1, 0, "no_low_node"),
        (3, 0, 0, "no_confirmed_high_node"),
        (2, 1, 3, "too_few_low_nodes"),
        (3, 1, 3, None),
    ],
)
def test_gate(low: int, sources: int, number_of_nodes: int, expected: str | None) -> None:
    assert gate(low, sources, number_of_nodes) == expected


# ---- step 5: candidates --------------------------------------------------------------------------

U = Amounts(1.0, GIB)


@pytest.mark.parametrize(
    ("p", "cfg", "reason"),
    [
        (pod("ok", "hot"), CFG, None),
        (pod("ds", "hot", owner="DaemonSet"), CFG, "daemonset"),
        (pod("mirror", "hot", owner=None, annotations={"kubernetes.io/config.mirror": "x"}), CFG, "mirror_pod"),
        (pod("static", "hot", owner="Node"), CFG, "mirror_pod"),
        (pod("critical", "hot", priority=2_000_001_000), CFG, "priority"),
        (pod("high-prio", "hot", priority=1000), RebalanceSettings(priority_below=1000), "priority"),
        (pod("low-prio", "hot", priority=999), RebalanceSettings(priority_below=1000), None),
        (pod("sys", "hot", namespace="kube-system"), CFG, "excluded_namespace"),
        (pod("unsel", "hot"), settings(pod_selectors=({"matchLabels": {"app": "web"}},)), "not_selected"),
        (pod("sel", "hot", labels={"app": "web"}), settings(pod_selectors=({"matchLabels": {"app": "web"}},)), None),
        (
            pod("expr", "hot", labels={"tier": "batch"}),
            settings(pod_selectors=({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["batch"]}]},)),
            "not_selected",
        ),
        (pod("empty", "hot", volumes=[{"name": "v", "emptyDir": {}}]), CFG, "local_storage"),
        (pod("host", "hot", volumes=[{"name": "v", "hostPath": {"path": "/x"}}]), CFG, "local_storage"),
        (pod("empty-ok", "hot", volumes=[{"name": "v", "emptyDir": {}}]), RebalanceSettings(evict_local_storage_pods=True), None),
        (pod("cm", "hot", volumes=[{"name": "v", "configMap": {"name": "c"}}]), CFG, None),
        (pod("bare", "hot", owner=None), CFG, "no_owner"),
        (pod("bare-ok", "hot", owner=None), RebalanceSettings(evict_bare_pods=True), None),
        (pod("done", "hot", phase="Succeeded"), CFG, "not_running"),
        (pod("elsewhere", "other"), CFG, "unknown_pod"),
    ],
)  # fmt: skip
def test_candidate_filters(p: dict[str, Any], cfg: RebalanceSettings, reason: str | None) -> None:
    kept, skipped = candidates([(facts(p, cfg), "x", U)], "hot", ("cpu",), cfg)
    assert [s.reason for s in skipped] == ([reason] if reason else [])
    assert len(kept) == (0 if reason else 1)


def test_a_pod_that_uses_none_of_the_overloaded_resource_is_no_relief() -> None:
    _, skipped = candidates([(facts(pod("idle", "hot")), "x", Amounts(0.0, GIB))], "hot", ("cpu",), CFG)
    assert [s.reason for s in skipped] == ["no_relief"]
    assert candidates([(None, "default/gone", U)], "hot", ("cpu",), CFG)[1][0].reason == "unknown_pod"


def test_candidate_order_offline_then_priority_then_usage_of_the_worst_resource() -> None:
    pods = [
        (pod("online-big", "hot", priority=10), Amounts(4, 1 * GIB)),
        (pod("offline-small", "hot", offline=True, priority=0), Amounts(0.5, 1 * GIB)),
        (pod("offline-low-prio", "hot", offline=True, priority=-10), Amounts(0.1, 1 * GIB)),
        (pod("online-mem", "hot", priority=10), Amounts(1, 8 * GIB)),
        (pod("online-prio", "hot", priority=5), Amounts(0.2, 1 * GIB)),  # (a negative priority is offline)
    ]
    rows = [(facts(p), p["metadata"]["name"], u) for p, u in pods]
    by_cpu = [c.traits.name for c in candidates(rows, "hot", ("cpu",), CFG)[0]]
    assert by_cpu == ["offline-low-prio", "offline-small", "online-prio", "online-big", "online-mem"]
    by_mem = [c.traits.name for c in candidates(rows, "hot", ("memory", "cpu"), CFG)[0]]
    assert by_mem == ["offline-low-prio", "offline-small", "online-prio", "online-mem", "online-big"]


# ---- step 6: node fit ----------------------------------------------------------------------------


DEST_USAGE = Amounts(2, 8 * GIB)
NOTHING = Amounts(0, 0)
ALLOC = Amounts(16, 64 * GIB)


def dest(obj: dict[str, Any], usage: Amounts = DEST_USAGE, requested: Amounts = NOTHING) -> Destination:
    f = node_traits(obj)
    assert f.allocatable is not None
    high = Amounts(0.75 * f.allocatable.cpu, 0.80 * f.allocatable.memory)
    return Destination(obj["metadata"]["name"], f, f.allocatable, usage, high, requested)


ZONE_A = {"topology.kubernetes.io/zone": "a"}
TERM_ZONE_A = [{"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]}]
GPU_TAINT = [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]


@pytest.mark.parametrize(
    ("p", "d", "usage", "expected"),
    [
        (pod("p", "hot"), dest(node("cold")), U, None),
        (pod("p", "cold"), dest(node("cold")), U, "same_node"),
        (pod("p", "hot"), dest(node("cold", unschedulable=True)), U, "unschedulable"),
        (pod("p", "hot", node_selector=ZONE_A), dest(node("cold")), U, "node_selector"),
        (pod("p", "hot", node_selector=ZONE_A), dest(node("cold", labels=ZONE_A)), U, None),
        (pod("p", "hot", affinity_terms=TERM_ZONE_A), dest(node("cold", labels={"topology.kubernetes.io/zone": "b"})), U, "node_affinity"),
        (pod("p", "hot", affinity_terms=TERM_ZONE_A), dest(node("cold", labels=ZONE_A)), U, None),
        # terms are ORed: the second one (by node name, matchFields) matches
        (pod("p", "hot", affinity_terms=[*TERM_ZONE_A, {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["cold"]}]}]),
         dest(node("cold")), U, None),
        (pod("p", "hot", affinity_terms=[{"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["8"]}]}]),
         dest(node("cold", labels={"cores": "16"})), U, None),
        (pod("p", "hot", affinity_terms=[{"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["8"]}]}]),
         dest(node("cold", labels={"cores": "4"})), U, "node_affinity"),
        (pod("p", "hot", affinity_terms=[{"matchExpressions": [{"key": "spot", "operator": "DoesNotExist"}]}]),
         dest(node("cold", labels={"spot": "true"})), U, "node_affinity"),
        (pod("p", "hot"), dest(node("cold", taints=GPU_TAINT)), U, "taints"),
        (pod("p", "hot"), dest(node("cold", taints=[{"key": "soft", "effect": "PreferNoSchedule"}])), U, None),
        (pod("p", "hot", tolerations=[{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]),
         dest(node("cold", taints=GPU_TAINT)), U, None),
        (pod("p", "hot", tolerations=[{"key": "gpu", "operator": "Equal", "value": "false"}]),
         dest(node("cold", taints=GPU_TAINT)), U, "taints"),
        (pod("p", "hot", tolerations=[{"operator": "Exists"}]), dest(node("cold", taints=GPU_TAINT)), U, None),
        (pod("p", "hot", tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}]),
         dest(node("cold", taints=GPU_TAINT)), U, "taints"),
        # requests: 16 cores allocatable, 15.6 requested, the pod asks 500m
        (pod("p", "hot"), dest(node("cold"), requested=Amounts(15.6, 0)), U, "requests"),
        (pod("p", "hot", memory="2Gi"), dest(node("cold"), requested=Amounts(0, 63 * GIB)), U, "requests"),
        # usage: high threshold 12 cores / 51.2 GiB; 11.5 + 1 > 12
        (pod("p", "hot"), dest(node("cold"), usage=Amounts(11.5, 8 * GIB)), U, "usage"),
        (pod("p", "hot"), dest(node("cold"), usage=Amounts(11.0, 8 * GIB)), U, None),  # exactly at the threshold
        (pod("p", "hot"), dest(node("cold"), usage=Amounts(2, 51 * GIB)), U, "usage"),
    ],
)  # fmt: skip
def test_node_fit(p: dict[str, Any], d: Destination, usage: Amounts, expected: str | None) -> None:
    assert misfit(facts(p), usage, d) == expected


def test_the_pool_takes_the_node_with_most_room_that_fits_and_says_why_none_did() -> None:
    p = facts(pod("p", "hot", node_selector=ZONE_A))
    a, b = dest(node("a", labels=ZONE_A)), dest(node("b", labels=ZONE_A), usage=Amounts(1, 8 * GIB))
    c = dest(node("c"), usage=Amounts(0, 0))  # most room, but not in zone a
    pool = DestinationPool([a, b, c])
    assert pool.find(p, U) == (b, "")
    pool.reserve(b, Amounts(0.5, GIB), Amounts(2, GIB))  # b now has less room than a
    assert b.usage == Amounts(3, 9 * GIB) and b.requested == Amounts(0.5, GIB)
    assert pool.find(p, U) == (a, "")
    assert pool.find(p, Amounts(11, GIB)) == (None, "usage")  # 10 cores of room at most
    assert pool.find(p, Amounts(9.5, GIB)) == (a, "")
    assert DestinationPool([c]).find(p, U) == (None, "node_selector")
    assert DestinationPool([]).find(p, U) == (None, "no_low_node")


# ---- step 7: the plan ----------------------------------------------------------------------------


def source(name: str, usage: Amounts, alloc: Amounts = ALLOC) -> Source:
    high = Amounts(0.75 * alloc.cpu, 0.80 * alloc.memory)
    over = over_resources(percent(usage, alloc), Amounts(75, 80))
    return Source(name, alloc, usage, high, over)


def cands(node_name: str, *cpu: float, namespace: str = "default") -> list[Candidate]:
    return [
        Candidate(facts(pod(f"{node_name}-p{i}", node_name, namespace=namespace)), Amounts(c, GIB))
        for i, c in enumerate(cpu)
    ]


def test_plan_evicts_until_under_the_threshold_and_no_further() -> None:
    src = source("hot", Amounts(14, 20 * GIB))  # 87.5% CPU, 2 cores over 12
    d = dest(node("cold"))
    out = plan_moves(
        [src],
        lambda _s: cands("hot", 1.5, 1.0, 1.0),
        [d],
        Amounts(10, 40 * GIB),
        RebalanceSettings(max_evictions_per_node=5),
        lambda *a: "evicted",
    )
    assert [m.pod for m in out.moves] == ["default/hot-p0", "default/hot-p1"]  # 14 - 1.5 - 1.0 = 11.5 <= 12
    assert src.usage == Amounts(11.5, 18 * GIB) and out.budget_left == Amounts(7.5, 38 * GIB)
    assert d.usage == Amounts(4.5, 10 * GIB) and d.requested == Amounts(1.0, 2 * GIB)
    assert out.acted_on == {"hot"} and out.skips == []


def test_a_refused_eviction_moves_on_to_the_next_candidate() -> None:
    src = source("hot", Amounts(14, 20 * GIB))
    results = {"default/hot-p0": "blocked", "default/hot-p1": "evicted", "default/hot-p2": "evicted"}
    out = plan_moves([src], lambda _s: cands("hot", 3, 2.5, 1), [dest(node("cold"))], Amounts(10, 40 * GIB), CFG,
                     lambda c, *a: results[c.key])  # fmt: skip
    assert [(m.pod, m.result) for m in out.moves] == [("default/hot-p0", "blocked"), ("default/hot-p1", "evicted")]


@pytest.mark.parametrize(
    ("cfg", "budget_", "expected_moves", "stopped"),
    [
        (RebalanceSettings(max_evictions_per_node=1), Amounts(10, 40 * GIB), ["a-p0", "b-p0"], None),
        (RebalanceSettings(max_evictions_per_cycle=3), Amounts(10, 40 * GIB), ["a-p0", "a-p1", "b-p0"], "cycle_limit"),
        (RebalanceSettings(max_evictions_per_namespace=1), Amounts(10, 40 * GIB), ["a-p0"], None),
        (CFG, Amounts(1.5, 40 * GIB), ["a-p0", "a-p1"], "budget_exhausted"),
    ],
)
def test_plan_limits(cfg: RebalanceSettings, budget_: Amounts, expected_moves: list[str], stopped: str | None) -> None:
    a = source("a", Amounts(15.5, 20 * GIB))  # worst first: a is 3.5 cores over, b 2
    b = source("b", Amounts(14, 20 * GIB))
    out = plan_moves([b, a], lambda s_: {"a": cands("a", 1, 1, 1), "b": cands("b", 1, 1)}[s_.name], [dest(node("cold"), usage=Amounts(0, 0))],
                     budget_, cfg, lambda *x: "dry_run")  # fmt: skip
    assert [m.pod.split("/")[1] for m in out.moves] == expected_moves
    assert out.stopped == stopped


def test_plan_skips_say_why() -> None:
    src = source("hot", Amounts(14, 20 * GIB))
    tight = dest(node("cold"), usage=Amounts(11.9, 8 * GIB))
    out = plan_moves([src, source("empty", Amounts(15, 1 * GIB))], lambda s_: cands("hot", 1, 1) if s_.name == "hot" else [], [tight],
                     Amounts(10, 40 * GIB), CFG, lambda *a: "evicted")  # fmt: skip
    assert [(s.node, s.reason, dict(s.details)) for s in out.skips] == [
        ("empty", "no_candidates", {}),
        ("hot", "no_fit_usage", {"no_fit_usage": 2}),
    ]
    lost = plan_moves(
        [src], lambda _s: cands("hot", 1, 1), [dest(node("cold"))], Amounts(10, 40 * GIB), CFG, lambda *a: "not_leader"
    )
    assert lost.stopped == "not_leader" and len(lost.moves) == 1 and lost.acted_on == set()
    away = plan_moves([src, source("b", Amounts(15, GIB))], lambda s_: cands(s_.name, 1, 1), [dest(node("cold"))],
                      Amounts(10, 40 * GIB), CFG, lambda *a: "unavailable")  # fmt: skip
    assert away.stopped == "unavailable" and len(away.moves) == 1
    assert [(s.node, s.reason) for s in away.skips] == [("b", "unavailable"), ("hot", "unavailable")]


# ---- config --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "key"),
    [
        ({"windo": "avg_5m"}, "rebalance.windo: unknown key"),
        ({"window": "avg_7m"}, "rebalance.window"),
        ({"high_thresholds": {"cpu": 101, "memory": 80}}, "rebalance.high_thresholds.cpu"),
        ({"low_thresholds": {"cpu": 80, "memory": 10}}, "low_thresholds.cpu must not be above high_thresholds.cpu"),
        ({"consecutive_abnormalities": 0}, "rebalance.consecutive_abnormalities"),
        ({"priority_below": 2_000_000_001}, "rebalance.priority_below"),
        ({"max_evictions_per_cycle": 0}, "rebalance.max_evictions_per_cycle"),
        ({"pod_selectors": [{"matchExpressions": [{"key": "a", "operator": "In"}]}]}, "rebalance.pod_selectors[0]"),
    ],
)
def test_config_is_validated_strictly(doc: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_config({"rebalance": doc})
    assert key in str(err.value) and "\n" not in str(err.value)


def test_defaults_off_and_dry_run() -> None:
    cfg = build_config({}).rebalance
    assert not cfg.enabled and cfg.dry_run and cfg.window == "avg_5m" and cfg.consecutive_abnormalities == 5
    assert (cfg.low_thresholds.cpu, cfg.low_thresholds.memory, cfg.high_thresholds.cpu, cfg.high_thresholds.memory) == (
        45,
        55,
        75,
        80,
    )
    assert build_config({"rebalance": {"enabled": True}}).rebalance.dry_run  # switched on: still a dry run


# ---- the README's worked example -----------------------------------------------------------------


def test_readme_worked_example() -> None:
    """README.md, "Rebalancing": four 16-core, 64 GiB nodes, default settings, n1 confirmed hot."""
    from controller.rebalance.assess import assess
    from controller.rebalance.moves import select_and_plan
    from controller.rebalance.traits import TRAITS
    from controller.rebalance.usage import PodLoad

    cfg = RebalanceSettings(enabled=True, dry_run=False)
    ratios = {"n1": (0.90, 0.50), "n2": (0.30, 0.40), "n3": (0.40, 0.60), "n4": (0.20, 0.30)}
    nodes = {name: node_traits(node(name)) for name in ratios}
    a = assess(nodes, ratios, {"n1": 4}, cfg)  # n1 was high in the 4 cycles before: this is the 5th
    assert {n: v.cls for n, v in a.views.items()} == {"n1": "high", "n2": "low", "n3": "normal", "n4": "low"}
    assert [s.name for s in a.sources] == ["n1"] and a.gate is None
    assert a.budget.cpu == pytest.approx(7.2 + 8.8) and a.budget.memory == pytest.approx((25.6 + 32) * GIB)

    specs = {
        "batch-1": pod("batch-1", "n1", offline=True),
        "web-1": pod("web-1", "n1"),
        "web-2": pod("web-2", "n1"),
        "web-3": pod("web-3", "n1"),
        "cache": pod("cache", "n1", volumes=[{"name": "scratch", "emptyDir": {}}]),
        "node-exporter": pod("node-exporter", "n1", owner="DaemonSet"),
    }
    used = {"batch-1": 0.6, "web-1": 1.5, "web-2": 1.0, "web-3": 0.4, "cache": 2.0, "node-exporter": 0.2}
    mem = {"batch-1": 2 * GIB, "web-1": 1 * GIB}
    cache = {f"default/{n}": {TRAITS: facts(p)} for n, p in specs.items()}
    usages = {"n1": [PodLoad("default", n, f"uid-default-{n}", Amounts(c, mem.get(n, GIB))) for n, c in used.items()]}
    out = select_and_plan(a, usages, {}, cache.get, cache.values, cfg, lambda *x: "evicted")
    assert [c.traits.name for c in out.candidates["n1"]] == ["batch-1", "web-1", "web-2", "web-3"]
    assert out.skipped_pods["n1"] == {"local_storage": 1, "daemonset": 1}
    moves = [(m.pod, m.destination, round(100 * m.source_after.cpu / 16, 2)) for m in out.plan.moves]
    assert moves == [("default/batch-1", "n4", 86.25), ("default/web-1", "n4", 76.88)]  # max 2 per node
    assert out.plan.budget_left.cpu == pytest.approx(13.9)
    assert out.plan.budget_left.memory == pytest.approx(54.6 * GIB)


def test_a_bad_rebalance_setting_exits_2_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from controller.main import main

    cfg = tmp_path / "controller.yaml"
    cfg.write_text("rebalance:\n  enabled: true\n  max_evictions_per_node: -1\n", encoding="utf-8")
    assert main(["--config", str(cfg), "--check"]) == 2
    err = capsys.readouterr().err.strip()
    assert "rebalance.max_evictions_per_node" in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_pod_lists_are_fetched_next_to_the_node_document_and_failures_named() -> None:
    import asyncio
    import json

    from controller.httpget import FetchError
    from controller.rebalance.agentpods import fetch_pod_usages, pods_url

    assert pods_url("http://10.0.0.1:9817/api/v1/node", "/api/v1/pods") == "http://10.0.0.1:9817/api/v1/pods"
    assert pods_url("http://[fd00::1]:9817/x?y=1", "/api/v1/pods") == "http://[fd00::1]:9817/api/v1/pods"
    asked: list[str] = []

    async def fetch(url: str, limit: int) -> bytes:
        asked.append(url)
        if "slow" in url:
            await asyncio.sleep(1)
        if "broken" in url:
            raise FetchError("http_status", "HTTP 500")
        if "garbage" in url:
            return b"{not json"
        return json.dumps([agent_pod("a", "p", 0.5, GIB)]).encode()

    targets = {n: f"http://{n}:9817/api/v1/node" for n in ("ok", "slow", "broken", "garbage", "other")}
    usages, failed, rejected = asyncio.run(
        fetch_pod_usages(
            targets,
            ["ok", "slow", "broken", "garbage", "gone"],
            path="/api/v1/pods",
            window="avg_5m",
            timeout=0.1,
            limit=1 << 20,
            concurrency=2,
            fetch=fetch,
        )
    )
    assert [u.name for u in usages["ok"]] == ["p"] and set(usages) == {"ok"}
    assert failed == {"slow": "timeout", "broken": "http_status", "garbage": "bad_payload", "gone": "no_agent"}
    assert rejected == {"garbage": "not_json"}
    assert "http://other:9817/api/v1/pods" not in asked  # only the sources' agents are asked
