"""cgroup.kubelet_rules against kubelet's own formulas (helpers_linux.go) and the runtimes' v2 conversions."""

from __future__ import annotations

import pytest

from cgroup.kubelet_rules import (
    BatchResources,
    CgroupValues,
    container_values,
    milli_cpu_to_quota,
    milli_cpu_to_shares,
    pod_values,
    shares_to_weight,
)


@pytest.mark.parametrize(
    ("milli", "period", "quota"),
    [
        (0, 100_000, 0),  # no limit: kubelet writes no quota
        (1, 100_000, 1000),  # 100us would be below the 1ms minimum
        (9, 100_000, 1000),
        (10, 100_000, 1000),  # exactly 1ms
        (11, 100_000, 1100),
        (250, 100_000, 25_000),
        (1000, 100_000, 100_000),
        (1500, 100_000, 150_000),
        (64_000, 100_000, 6_400_000),
        (333, 100_000, 33_300),
        (1001, 50_000, 50_050),  # --cpu-cfs-quota-period 50ms
        (7, 1_000_000, 7000),
    ],
)
def test_milli_cpu_to_quota_is_kubelets(milli: int, period: int, quota: int) -> None:
    assert milli_cpu_to_quota(milli, period) == quota


@pytest.mark.parametrize(
    ("milli", "shares"),
    [(0, 2), (1, 2), (2, 2), (3, 3), (100, 102), (250, 256), (1000, 1024), (1500, 1536), (256_000, 262144),
     (300_000, 262144)],
)  # fmt: skip
def test_milli_cpu_to_shares_is_kubelets(milli: int, shares: int) -> None:
    assert milli_cpu_to_shares(milli) == shares


@pytest.mark.parametrize(
    ("shares", "linear", "quadratic"),
    [
        (2, 1, 1),
        (102, 4, 17),  # 100m: the case that motivated the new formula
        (1024, 39, 100),  # one CPU: v2's default weight under the new formula
        (2048, 79, 174),
        (262144, 10000, 10000),
    ],
)
def test_v2_weight_follows_the_runtimes_formula(shares: int, linear: int, quadratic: int) -> None:
    assert shares_to_weight(shares, "linear") == linear
    assert shares_to_weight(shares, "quadratic") == quadratic


def test_the_quadratic_weight_is_monotonic_and_in_range() -> None:
    weights = [shares_to_weight(s, "quadratic") for s in range(2, 262145, 97)]
    assert weights == sorted(weights) and weights[0] == 1 and all(1 <= w <= 10000 for w in weights)


def test_a_container_gets_quota_shares_and_memory_from_its_batch_values() -> None:
    v = container_values(BatchResources(500, 2000, 1 << 30, 2 << 30), formula="linear")
    assert v == CgroupValues(shares=512, weight=20, quota_us=200_000, period_us=100_000, memory_limit=2 << 30)
    # no limits: no quota, no memory limit, the request still weighs
    v = container_values(BatchResources(cpu_request=250), formula="quadratic")
    assert (v.shares, v.quota_us, v.memory_limit) == (256, None, None)
    # kubelet --cpu-cfs-quota=false: never a quota
    assert container_values(BatchResources(500, 1000), formula="linear", cfs_quota=False).quota_us is None


def test_a_pod_sums_its_containers_like_kubelet() -> None:
    app = [BatchResources(500, 1000, 1 << 30, 1 << 30), BatchResources(250, 500, 256 << 20, 512 << 20)]
    v = pod_values(app, formula="linear")
    assert (v.shares, v.quota_us, v.memory_limit) == (768, 150_000, (1 << 30) + (512 << 20))


def test_a_container_without_a_limit_leaves_that_part_of_the_pod_unlimited() -> None:
    pods = [BatchResources(500, 1000, 1 << 20, None), BatchResources(100, None, None, 1 << 20)]
    v = pod_values(pods, formula="linear")
    assert (v.shares, v.quota_us, v.memory_limit) == (614, None, None)


def test_init_containers_and_sidecars_follow_the_pod_request_rule() -> None:
    pods = [
        BatchResources(3000, 3000, init=True),  # a big init container
        BatchResources(200, 200, init=True, sidecar=True),
        BatchResources(500, 500),
    ]
    v = pod_values(pods, formula="linear")
    # max(app 500 + sidecar 200, init 3000 + sidecars before it 0) = 3000
    assert (v.shares, v.quota_us) == (3072, 300_000)
    pods[0] = BatchResources(100, 100, init=True)
    assert pod_values(pods, formula="linear").quota_us == 70_000  # app + sidecar = 700m


def test_a_pod_without_batch_values_is_best_effort() -> None:
    v = pod_values([BatchResources(), BatchResources(init=True)], formula="quadratic")
    assert v == CgroupValues(shares=2, weight=1, quota_us=None, period_us=100_000, memory_limit=None)


@pytest.mark.parametrize(
    ("res", "period", "problem"),
    [
        (BatchResources(2000, 1000), 100_000, "batch-cpu request 2000m above its limit 1000m"),
        (
            BatchResources(memory_request=8192, memory_limit=4096),
            100_000,
            "batch-memory request 8192 above its limit 4096",
        ),
        (BatchResources(memory_limit=4095), 100_000, "below one page"),
        (BatchResources(cpu_limit=-1), 100_000, "negative"),
        (BatchResources(1000, 1000), 500, "CFS period 500us outside"),
        (BatchResources(1000, 1000), 2_000_000, "CFS period 2000000us outside"),
    ],
)
def test_values_kubelet_would_reject_are_flagged(res: BatchResources, period: int, problem: str) -> None:
    for v in (
        container_values(res, formula="linear", period_us=period),
        pod_values([res], formula="linear", period_us=period),
    ):
        assert len(v.problems) == 1 and problem in v.problems[0], v.problems


def test_valid_values_are_not_flagged() -> None:
    v = pod_values([BatchResources(1, 1, 4096, 4096)], formula="linear", period_us=1000)
    assert v.problems == () and v.quota_us == 1000


def test_runtime_class_overhead_is_added_where_kubelet_adds_it() -> None:
    full = [BatchResources(500, 1000, 1 << 30, 1 << 30)]
    v = pod_values(full, formula="linear", overhead_milli_cpu=250, overhead_memory=128 << 20)
    assert (v.shares, v.quota_us, v.memory_limit) == (768, 125_000, (1 << 30) + (128 << 20))
    no_limits = [BatchResources(cpu_request=500)]
    v = pod_values(no_limits, formula="linear", overhead_milli_cpu=250, overhead_memory=128 << 20)
    assert (v.shares, v.quota_us, v.memory_limit) == (768, None, None)  # no limit to add the overhead to
