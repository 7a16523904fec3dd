"""The pure parts of the lending benchmarks (bench/busy_fleet.py, bench/frontier.py): how a busy fleet is
scaled and calibrated, how a variant is parsed, how a verdict and a frontier cell read the scores. The replays
themselves are colo-sim's code, tested there; no trace file is read here."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest

from agent.capacity.lendable import CapacityParams
from bench.busy_fleet import Raw, Scores, calibrate, fleet_facts, scaled, utilizations, variant, verdict
from bench.frontier import COLUMNS, CPU_RATIOS, cell, settings
from colo_sim.packing import NodeSize

GIB = float(1 << 30)


def raw_fleet() -> Raw:
    """Two nodes of 4 cores and 8 GiB, two steps: node 0 holds VMs a and b, node 1 holds c."""
    vm = ["a", "a", "b", "b", "c", "c"]
    columns = {
        "unix_s": np.array([0.0, 300.0, 0.0, 300.0, 0.0, 300.0]),
        "cores": np.array([2.0, 2.0, 2.0, 2.0, 4.0, 4.0]),
        "cpu_prov_mhz": np.array([2000.0, 2000.0, 2000.0, 2000.0, 4000.0, 4000.0]),
        # a uses 0.2 and 0.4 cores; b 0.5 and 2.5 (above what it provisioned); c 0.4 and 0.4
        "cpu_used_mhz": np.array([200.0, 400.0, 500.0, 2500.0, 400.0, 400.0]),
        "mem_prov_kb": np.array([2.0, 2.0, 2.0, 2.0, 4.0, 4.0]) * (1 << 20),
        "mem_used_kb": np.array([0.5, 0.5, 1.0, 1.0, 1.0, 1.0]) * (1 << 20),
    }
    return Raw(vm, np.array([0, 0, 0, 0, 1, 1]), 2, 2, columns, NodeSize(4.0, 8 * GIB))


def test_scaling_multiplies_and_caps_at_what_was_provisioned_but_never_lowers_a_sample() -> None:
    used, provisioned = np.array([1.0, 3.0, 5.0]), np.array([4.0, 4.0, 4.0])
    assert scaled(used, provisioned, 2.0).tolist() == [2.0, 4.0, 5.0]  # 5 was already above 4: kept
    assert scaled(used, provisioned, 1.0).tolist() == used.tolist()


def test_a_nodes_utilization_is_its_usage_over_the_month_per_step_and_allocatable() -> None:
    raw = raw_fleet()
    # node 0: cores (0.2 + 0.5) + (0.4 + 2.5) = 3.6 over 2 steps of 4 cores; node 1: 0.8 / 2 / 4
    assert utilizations(raw, "cpu", 1.0).tolist() == pytest.approx([0.45, 0.1])
    # memory: node 0 (0.5 + 1 + 0.5 + 1) GiB / 2 / 8; node 1 2 GiB / 2 / 8
    assert utilizations(raw, "memory", 1.0).tolist() == pytest.approx([3 / 16, 1 / 8])


def test_calibration_finds_the_factor_that_brings_the_median_node_to_the_target() -> None:
    raw = raw_fleet()
    k, reached = calibrate(raw, "cpu", 0.4)
    assert reached
    assert float(np.median(utilizations(raw, "cpu", k))) == pytest.approx(0.4, abs=1e-9)
    assert float(np.median(utilizations(raw, "cpu", k * 0.999))) < 0.4  # the smallest such factor


def test_an_unreachable_target_is_reported_with_the_factor_that_caps_every_sample() -> None:
    raw = raw_fleet()
    # every memory sample at its cap: node 0 (2 + 2) GiB per step of 8, node 1 4 of 8: median 0.5
    k, reached = calibrate(raw, "memory", 0.75)
    assert not reached
    assert k == 4.0  # the largest provisioned / used: a's 2 GiB over 0.5
    facts = fleet_facts(raw, "memory", k, reached)
    assert facts["samples_at_cap"] == 1.0 and facts["target_reached"] is False
    assert facts["node_requests_median"] == pytest.approx(0.5)


def test_a_variant_names_capacity_parameters_and_refuses_what_is_not_one() -> None:
    base = CapacityParams()
    name, params = variant("tight:cpu_reclaim_ratio=0.9,predictor=nsigma,margin=off", base)
    assert name == "tight"
    assert (params.cpu_reclaim_ratio, params.predictor, params.margin) == (0.9, "nsigma", None)
    assert params.memory_reclaim_ratio == base.memory_reclaim_ratio
    for bad in ("no-settings", ":cpu_reclaim_ratio=1", "x:not_a_field=1", "x:margin=on"):
        with pytest.raises(argparse.ArgumentTypeError):
            variant(bad, base)


def half(fraction: float, rate: float) -> dict[str, float]:
    return {"oracle_fraction": fraction, "violation_rate": rate}


def scores(colo: tuple[float, float], koordinator: tuple[float, float], first_hour: tuple[int, int]) -> Scores:
    """Both halves and both resources alike; Volcano lends less than both and violates more."""
    table = {"colo": colo, "koordinator": koordinator, "volcano": (0.1, 0.01)}
    halves = {name: {r: (half(*v), half(*v)) for r in ("cpu", "memory")} for name, v in table.items()}
    first = {
        "colo": {"cpu": first_hour[0], "memory": 0},
        "koordinator": {"cpu": first_hour[1], "memory": 0},
        "volcano": {"cpu": first_hour[1], "memory": 0},
    }
    return Scores(halves, first, [], 2, (10, 10), 24)


def test_the_verdict_names_each_peer_not_dominated_and_a_worse_first_hour() -> None:
    assert verdict(scores((0.8, 0.001), (0.6, 0.002), (0, 0))) == []
    lines = verdict(scores((0.8, 0.003), (0.6, 0.002), (2, 1)))
    assert "cpu, half 1: colo does not dominate koordinator" in lines
    assert "memory, half 2: colo does not dominate koordinator" in lines
    assert not any("volcano" in line for line in lines)
    assert "cpu, first hour: colo 2 violations, the better peer 1" in lines


def test_the_frontier_pairs_each_predictor_with_every_ratio_row() -> None:
    base = CapacityParams()
    named = settings(base)
    assert len(named) == len(COLUMNS) * len(CPU_RATIOS)
    params = dict(named)
    assert params["node_peak@0"].margin is None and params["node_peak + margin@0"].margin == base.margin
    assert params["nsigma + margin@6"].cpu_reclaim_ratio == CPU_RATIOS[6]
    assert all(math.isclose(p.memory_fill_limit, 1.0) for _, p in named)  # no watermark bound on the frontier


def test_a_frontier_cell_shows_both_halves_and_first_hour_violations_only_when_there_are_some() -> None:
    s = scores((0.8, 0.0012), (0.6, 0.0), (3, 0))
    assert cell(s, "colo", "cpu") == "0.800 / 0.12 → 0.800 / 0.12 (3)"
    assert cell(s, "koordinator", "cpu") == "0.600 / 0.00 → 0.600 / 0.00"
