"""What the enforcement strategies keep between passes: the CPU budget's split (`cpu_suppression.Demands`:
the same quotas as splitting afresh, computed again as soon as the offline pods or one of their requests or
limits change) and the batch pods' targets (kept by PodMeta, forgotten when the pod leaves)."""

from __future__ import annotations

import dataclasses

import pytest

from agent.config_sections.enforcement import BatchConfig, EnforcementConfig
from agent.enforce.actions import Recorded
from agent.enforce.strategies.batch_limits import BatchLimits
from agent.enforce.strategies.cpu_suppression import (
    CfsQuota,
    Demands,
    OfflineCpu,
    cpu_demand,
    split_budget,
    split_shape,
    split_shaped,
)
from agent.snapshot import ContainerBatch, PodBatch, PodSample
from cgroup.kubelet_rules import BatchResources
from tests.test_batch_limits import batch_pod, state_of
from tests.test_registry import GI, TIER, pod, recorded, state


def _with_meta(p: PodSample, **changes: object) -> PodSample:
    """The pod as the pod source gives it after an update: another PodMeta object."""
    return dataclasses.replace(p, meta=dataclasses.replace(p.meta, **changes))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "demands",
    [
        [],
        [OfflineCpu("a", 0.5, None), OfflineCpu("b", 0.25, 0.1)],
        [OfflineCpu("a", 0.0, None), OfflineCpu("b", 0.0, 0.05)],
        [OfflineCpu("a", 0.3, 1.0), OfflineCpu("b", 0.0, None), OfflineCpu("c", 0.7, None)],
    ],
)
def test_a_shaped_split_is_the_split(demands: list[OfflineCpu]) -> None:
    for budget in (0.1, 0.77, 3.0):
        assert split_shaped(budget, split_shape(demands), 0.2) == split_budget(budget, demands, 0.2)


def test_the_shape_is_kept_while_the_offline_pods_are_the_same_objects() -> None:
    a, b = pod("a", request=0.2), pod("b", request=0.6, limit=0.3)
    demands = Demands()
    first = demands.shape([a, b])
    # a new pass: new PodSamples (new usage), the same metas -> the same shape, not computed again
    again = [dataclasses.replace(a, cpu_cores=0.9), dataclasses.replace(b, cpu_cores=0.0)]
    assert demands.shape(again) is first
    assert first == split_shape([cpu_demand(a), cpu_demand(b)])


@pytest.mark.parametrize(
    "change",
    [
        {"cpu_request_cores": 0.8},  # resized
        {"cpu_limit_cores": 0.05},
        # a batch-cpu request: the demand comes from it
        {"batch": PodBatch((ContainerBatch("main", "c0", BatchResources(900, 1000, GI, 2 * GI)),))},
    ],
)
def test_a_changed_meta_is_split_again(change: dict[str, object]) -> None:
    a, b = pod("a", request=0.2), pod("b", request=0.6)
    demands = Demands()
    before = demands.shape([a, b])
    b2 = _with_meta(b, **change)
    after = demands.shape([a, b2])
    assert after is not before
    assert after == split_shape([cpu_demand(a), cpu_demand(b2)])
    assert demands.of(b2) == cpu_demand(b2) != cpu_demand(b)


def test_a_pod_that_comes_or_goes_is_split_again() -> None:
    a, b, c = pod("a", request=0.2), pod("b", request=0.6), pod("c", request=0.0)
    demands = Demands()
    two = demands.shape([a, b])
    three = demands.shape([a, b, c])
    assert three == split_shape([cpu_demand(p) for p in (a, b, c)]) and three != two
    assert demands.shape([a, c]) == split_shape([cpu_demand(a), cpu_demand(c)])
    assert demands.shape([c, a]) == split_shape([cpu_demand(c), cpu_demand(a)])  # order: the split's


def test_the_strategy_splits_every_budget_as_afresh() -> None:
    """Over passes whose budget, pods and metas change, CfsQuota's quotas are those of `split`."""
    config = EnforcementConfig()
    strategy = CfsQuota(config, TIER)
    a, b, c = pod("a", request=0.2), pod("b", request=0.6, limit=0.1), pod("c", request=0.0)
    passes = [[a, b], [a, b], [a, b, c], [a, _with_meta(b, cpu_request_cores=0.3), c], [a, c]]
    memo = None
    for node_cpu, pods in zip((1.5, 1.2, 1.7, 1.1, 1.4), passes, strict=True):
        s = state(pods, node_cpu=node_cpu)
        plan = strategy.plan(s, recorded(pods, memo))
        memo = plan.memo
        demands = [cpu_demand(p) for p in s.offline]
        expected, _ = split_budget(plan.report.budget_cores, demands, config.besteffort_share)  # type: ignore[attr-defined]
        assert plan.report.quota_cores == expected  # type: ignore[attr-defined]


# -- batch targets kept by PodMeta (agent/enforce/strategies/batch_limits.py) ---------------------------------------
def test_batch_targets_follow_a_new_meta_and_forget_pods_that_left() -> None:
    strategy = BatchLimits(BatchConfig())

    def quotas(pods: list[PodSample]) -> dict[str, int | None]:
        report = strategy.plan(state_of(pods), Recorded({}, {})).report
        return {uid: v["cpu_quota_us"] for uid, v in report.pods.items()}  # type: ignore[attr-defined]

    a, b = batch_pod("a"), batch_pod("b")
    assert quotas([a, b]) == {"a": 100_000, "b": 100_000}
    # resized: a new PodMeta, its targets computed again
    bigger = PodBatch((ContainerBatch("main", "c1", BatchResources(500, 2000, GI, 2 * GI)),))
    assert quotas([a, _with_meta(b, batch=bigger)]) == {"a": 100_000, "b": 200_000}
    # b left and c came (as many pods as before): b is forgotten, c computed
    c = batch_pod("c")
    assert quotas([a, c]) == {"a": 100_000, "c": 100_000}
    assert set(strategy._targets) == {"a", "c"}
    assert quotas([a]) == {"a": 100_000} and set(strategy._targets) == {"a"}
