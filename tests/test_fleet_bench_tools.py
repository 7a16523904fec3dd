"""The lending benchmarks (bench/busy_fleet.py, bench/frontier.py) run end to end on a small synthetic trace in
the shared trace's schema: the busy fleet is calibrated to its level, never lowers a sample and keeps its cap;
both tools score every policy on both halves; bad settings are one line and exit 2. Run as programs: tests do
not import bench/. No figure of the shared trace is asserted (timings and results live in bench/ and docs)."""

from __future__ import annotations

import csv
import gzip
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEADER = ("vm", "unix_s", "cores", "cpu_prov_mhz", "cpu_used_mhz", "mem_prov_kb", "mem_used_kb")
T0 = 1_373_839_200  # 2013-07-14 22:00 UTC: two days, either side of the benchmarks' split (07-15 22:00)


def tiny_trace(path: Path) -> None:
    """Six VMs over two days at 5 minutes: a daily CPU wave, steady memory, seeded noise."""
    rng = random.Random(32)
    with gzip.open(path, "wt", newline="") as f:
        out = csv.writer(f)
        out.writerow(HEADER)
        for vm in range(6):
            cores = (2, 4, 8)[vm % 3]
            mhz = 2600.0 * cores
            for k in range(576):
                wave = 0.5 + 0.5 * math.sin(2 * math.pi * k / 288 + vm)
                used = mhz * min(1.0, 0.05 + 0.2 * wave + rng.uniform(0.0, 0.05))
                mem_kb = 4 << 20
                out.writerow((vm, T0 + 300 * k, cores, mhz, round(used, 1), mem_kb, int(mem_kb * 0.2 * (1 + wave))))


def run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip


def rows(path: Path) -> list[dict[str, float]]:
    with gzip.open(path, "rt") as f:
        return [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "tiny.csv.gz"
    tiny_trace(path)
    return path


def test_the_busy_fleet_reaches_its_level_within_the_cap_and_scores_every_policy(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "busy.json"
    done = run("bench.busy_fleet", "--trace", str(trace), "--dir", str(tmp_path), "--levels", "0.5", "--jobs", "1",
               "--node-cpu", "16", "--node-memory", "32", "--variant", "tight:cpu_reclaim_ratio=0.9", "--json",
               str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text())
    cpu = doc["facts"]["busy 50%"]["cpu"]
    assert cpu["target_reached"] and cpu["k"] > 1
    assert cpu["node_utilization_p10_median_p90"][1] == pytest.approx(0.5, abs=1e-6)
    before, after = rows(trace), rows(Path(doc["facts"]["busy 50%"]["path"]))
    assert len(before) == len(after)
    for a, b in zip(before, after, strict=True):  # scaled up, never down, and never past what was provisioned
        assert a["cpu_used_mhz"] <= b["cpu_used_mhz"] <= max(a["cpu_used_mhz"], a["cpu_prov_mhz"]) + 1e-6
        assert (a["unix_s"], a["cpu_prov_mhz"], a["mem_prov_kb"]) == (b["unix_s"], b["cpu_prov_mhz"], b["mem_prov_kb"])
    for level in doc["levels"].values():
        assert set(level["halves"]) == {"oracle", "colo", "tight", "koordinator", "volcano"}
        assert sum(level["node_steps"]) > 0
        for halves in level["halves"]["colo"].values():
            assert all(0.0 <= h["oracle_fraction"] <= 1.0 and 0.0 <= h["violation_rate"] <= 1.0 for h in halves)


def test_the_frontier_replays_every_setting_and_the_defaults(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "frontier.json"
    done = run("bench.frontier", "--trace", str(trace), "--jobs", "1", "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert set(doc["halves"]) == set(doc["settings"]) | {"oracle", "koordinator", "volcano"}
    assert "colo" in doc["settings"] and len(doc["settings"]) == 36  # the defaults and 5 columns x 7 rows
    assert all(s["memory_fill_limit"] == 1.0 for name, s in doc["settings"].items() if name != "colo")
    assert "| `cpu_reclaim_ratio` | `node_peak` |" in done.stdout  # the tables docs/simulation.md quotes


@pytest.mark.parametrize(
    ("module", "args", "names"),
    [
        ("bench.busy_fleet", ("--variant", "x:not_a_field=1"), "not_a_field"),
        ("bench.busy_fleet", ("--variant", "no-settings"), "NAME:KEY=VALUE"),
        ("bench.frontier", ("--set", "margin=on"), "margin"),
        ("bench.frontier", ("--plot", "{tmp}/missing/x.png"), "not writable"),
    ],
)
def test_bad_settings_are_one_line_and_exit_2(
    trace: Path, tmp_path: Path, module: str, args: tuple[str, ...], names: str
) -> None:
    where = ("--dir", str(tmp_path)) if module == "bench.busy_fleet" else ()  # (nothing outside the test's folder)
    done = run(module, "--trace", str(trace), *where, *(a.format(tmp=tmp_path) for a in args))
    assert done.returncode == 2 and names in done.stderr and "Traceback" not in done.stderr, done.stderr
