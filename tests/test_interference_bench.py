"""The interference benchmark's harness works (bench/interference.py --quick): every configuration runs with
its processes in their cgroups, the load generator's requests come back, the agent enforces in (C) and (D)
and puts the batch pods' cgroups back when it stops. No latency figure is asserted: timings live in bench/."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.cgroupv1,
    pytest.mark.skipif(shutil.which("gcc") is None, reason="the benchmark compiles its programs with gcc"),
]


def test_the_quick_run_measures_every_configuration(tmp_path: Path) -> None:
    out = tmp_path / "runs.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "bench.interference", "--quick", "--json", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text())
    runs = {r["config"]: r for r in doc["runs"]}
    assert set(runs) == {"A", "B", "C", "D", "C2", "D2", "DS", "E", "ED", "S", "F0", "F1"}
    for r in runs.values():
        assert r["requests"] > 0 and r["lost"] < r["requests"], r
        assert r["service_cores"] > 0, r  # the service did its work in its pod's cgroup
        assert r["own_p99_ms"] > 0, r  # ... and its histogram endpoint answered (NaN when it did not)
    for config in ("B", "C", "D", "C2", "D2", "DS", "E", "ED", "S"):
        assert runs[config]["batch_cores"] > 0 and runs[config]["burn_rounds_per_s"] > 0, runs[config]
    for config in ("A", "F0"):
        assert runs[config]["batch_cores"] == 0, runs[config]
    # the agent enforced: it wrote the batch pods' quotas, and its run-queue protection reported in (D)
    assert all(runs[c]["colo_writes"] > 0 for c in ("C", "D", "C2", "D2", "DS", "E", "ED", "S"))
    assert all("guard_states" in runs[c]["protection"] for c in ("D", "D2", "DS", "ED"))
    assert not any("guard_states" in runs[c]["protection"] for c in ("C", "C2", "E", "S"))
    assert doc["quotas_after"] == [-1, -1, -1, -1]  # ... and put them back when it stopped
    assert doc["tier_idle_after"] == "0"  # (E) left the BestEffort tier as kubelet has it
    assert {row["config"] for row in doc["summary"]} == set(runs)


def test_bad_arguments_are_one_line_and_exit_2() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "bench.interference", "--configs", "A,Z"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr and "--configs" in done.stderr
    done = subprocess.run([sys.executable, "-m", "bench.interference", "--configs", "DS,A"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr and "list A before DS" in done.stderr
