"""Upgrades and rollbacks of the enforcement ledger, one test per supported path (docs/install.md#upgrades-and-rollbacks):

- upgrade from the release before parts (version 1: one field per part on each entry, `shared` for memory QoS
  only) and from version 2 (`parts` per entry, `shared` per part): migrated on load without losing an
  original, saved in the new format;
- rollback to the release before parts after a crash: it finds every original of the parts it knows in what
  this one saved (read here exactly as that release read it, `read_as_release_1`);
- rollback after a clean stop: nothing is left to restore;
- a ledger of a newer version: refused, one line naming both versions, the file left as it is.

tests/data/ledger_v1.json is what version 1's `Ledger.save` wrote (field for field, `asdict` of its entry): an
offline pod with every offline part, an online pod with every online part after a start from the pod spec,
and an entry older still (no `quota`/`baseline` flags: it had both changed). tests/data/ledger_v2.json is what
version 2's `Ledger.save` (agent/ledger.py at d2ba15c) wrote after loading it, with a disk QoS record added."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent.enforce.ledger import VERSION, Ledger, LedgerTooNew, _v1_parts
from agent.enforce.parts.registry import held_parts, known_parts
from testsupport.kubeapi.server import FakeKubeAPI

OLD = Path(__file__).parent / "data" / "ledger_v1.json"
V2 = Path(__file__).parent / "data" / "ledger_v2.json"
ROOT = Path(__file__).resolve().parents[1]


def load_copy(tmp_path: Path, source: Path = OLD) -> Ledger:
    path = tmp_path / "ledger.json"
    shutil.copy(source, path)
    ledger = Ledger(str(path))
    ledger.load()
    return ledger


def test_every_original_of_a_version_1_ledger_is_kept(tmp_path: Path) -> None:
    ledger = load_copy(tmp_path)
    assert ledger.trusted and ledger.problem is None
    off, on, older = ledger.entries["off-1"], ledger.entries["on-1"], ledger.entries["older"]
    assert held_parts(off) == {"baseline", "quota", "cpuset", "memory_high"}
    assert off.parts["baseline"] == {"idle": True, "oom_score_adj": {
        "/kubepods/besteffort/podoff-1": 1000, "/kubepods/besteffort/podoff-1/c1": -998}}  # fmt: skip
    assert off.parts["cpuset"] == {"pod": "0-3", "containers": {"/kubepods/besteffort/podoff-1/c1": "0-3"}}
    assert off.parts["memory_high"] == {"before": None}
    assert (off.shares, off.quota_us, off.containers, off.oom_default) == (
        2, None, {"/kubepods/besteffort/podoff-1/c1": None}, 1000)  # fmt: skip
    assert held_parts(on) == {"burst", "quota_burst", "memory_qos"}
    assert on.parts["burst"] == {"/kubepods/burstable/podon-1": 0, "/kubepods/burstable/podon-1/c1": 0}
    assert on.parts["memory_qos"] == {"/kubepods/burstable/podon-1": {"min": 0, "low": 0, "high": None}}
    assert (on.weight, on.quota_us, on.containers, on.from_spec) == (
        20, 60_000, {"/kubepods/burstable/podon-1/c1": 50_000}, True)  # fmt: skip
    assert held_parts(older) == {"baseline", "quota"}
    assert ledger.tiers == {"/kubepods/besteffort": 100_000}
    assert ledger.shared == {"memory_qos": {"/kubepods/burstable": {"min": 0, "low": 0}, "/kubepods": {"low": 0}}}
    assert held_parts(off) | held_parts(on) <= known_parts()


def test_a_migrated_ledger_is_saved_in_the_new_format_and_reads_back_the_same(tmp_path: Path) -> None:
    ledger = load_copy(tmp_path)
    assert ledger.save()
    saved = json.loads((tmp_path / "ledger.json").read_text())
    assert saved["version"] == VERSION and set(saved["pods"]["off-1"]) >= {"uid", "cgroup", "parts"}
    # the parts are what this release reads; their version 1 fields are there for that release (a rollback)
    assert set(saved["pods"]["off-1"]["parts"]) == {"baseline", "quota", "cpuset", "memory_high"}
    assert saved["pods"]["off-1"]["quota"] is True and saved["shared_parts"] == ledger.shared
    assert json.loads((tmp_path / "ledger.json.bak").read_text()) == json.loads(OLD.read_text())  # the old file
    again = Ledger(str(tmp_path / "ledger.json"))
    again.load()
    assert again.entries == ledger.entries and again.shared == ledger.shared and again.tiers == ledger.tiers


#: Version 1's entry (agent/ledger.py before 38b48d9): its fields and their defaults.
RELEASE_1_ENTRY: dict[str, Any] = {
    "containers": {}, "container_periods": {}, "weight": None, "quota": False, "cpuset": None,
    "container_cpusets": {}, "memory_high": False, "memory_high_before": None, "oom_score_adj": {},
    "oom_default": None, "idle": False, "baseline": False, "from_spec": False, "burst": {}, "quota_burst": False,
    "memory_qos": {},
}  # fmt: skip
RELEASE_1_REQUIRED = ("uid", "cgroup", "shares", "quota_us", "period_us")
#: The parts version 1 knew (its fields); disk and network QoS came after it.
RELEASE_1_PARTS = {"baseline", "quota", "cpuset", "memory_high", "burst", "quota_burst", "memory_qos"}


def read_as_release_1(path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, int], dict[str, Any]]:
    """The file as version 1's `Ledger._read` read it: the format checked, no version read, unknown keys of an
    entry dropped, a missing `quota` or `baseline` taken for true, `shared` as cgroup -> {field: int}."""
    raw = json.loads(path.read_text())
    assert isinstance(raw, dict) and raw.get("format", "colo-enforcement-ledger") == "colo-enforcement-ledger"
    entries = {}
    for uid, e in (raw.get("pods") or {}).items():
        known = {k: v for k, v in e.items() if k in RELEASE_1_ENTRY or k in RELEASE_1_REQUIRED}
        known.setdefault("quota", True)
        known.setdefault("baseline", True)
        assert all(k in known for k in RELEASE_1_REQUIRED)
        entries[str(uid)] = {**RELEASE_1_ENTRY, **known}
    tiers = {str(k): int(v) for k, v in (raw.get("tiers") or {}).items()}
    shared = {str(k): {str(f): None if n is None else int(n) for f, n in v.items()}
              for k, v in (raw.get("shared") or {}).items()}  # fmt: skip
    return entries, tiers, shared


def test_every_original_of_a_version_2_ledger_is_kept(tmp_path: Path) -> None:
    """Upgrade from version 2: every part's records, shared ones included, and saved as this version."""
    ledger = load_copy(tmp_path, V2)
    assert ledger.trusted and ledger.problem is None
    off = ledger.entries["off-1"]
    assert held_parts(off) == {"baseline", "quota", "cpuset", "memory_high", "disk"}
    assert off.parts["disk"] == {"/kubepods/besteffort/podoff-1": {"8:0": {"wbps": None, "riops": 500}}}
    assert ledger.shared == {"memory_qos": {"/kubepods/burstable": {"min": 0, "low": 0}, "/kubepods": {"low": 0}}}
    (tmp_path / "v1").mkdir()
    v1 = load_copy(tmp_path / "v1")
    assert {u: e.parts for u, e in v1.entries.items()} == {
        u: {p: r for p, r in e.parts.items() if p != "disk"} for u, e in ledger.entries.items()}  # fmt: skip
    assert ledger.save()
    assert json.loads((tmp_path / "ledger.json").read_text())["version"] == VERSION
    again = Ledger(str(tmp_path / "ledger.json"))
    again.load()
    assert again.entries == ledger.entries and again.shared == ledger.shared and again.tiers == ledger.tiers


def test_rollback_after_a_crash_the_previous_release_finds_every_original_it_knows(tmp_path: Path) -> None:
    """This agent crashed holding every part; the release before parts starts on its file: each entry has
    that release's fields beside `parts`, with every original of the parts it knew, and `shared` is in its
    layout. (It knew no disk or network QoS: docs/install.md says to switch those off before going back.)"""
    ledger = load_copy(tmp_path, V2)
    ledger.changed()
    assert ledger.save()
    entries, tiers, shared = read_as_release_1(tmp_path / "ledger.json")
    assert set(entries) == set(ledger.entries) and tiers == ledger.tiers
    for uid, entry in ledger.entries.items():
        seen = entries[uid]
        assert (seen["shares"], seen["quota_us"], seen["period_us"], seen["containers"], seen["weight"],
                seen["oom_default"], seen["from_spec"]) == (entry.shares, entry.quota_us, entry.period_us,
                entry.containers, entry.weight, entry.oom_default, entry.from_spec)  # fmt: skip
        # what it holds, read back the way this release migrates version 1: every part it knew, unchanged
        assert _v1_parts(seen) == {p: r for p, r in entry.parts.items() if p in RELEASE_1_PARTS}, uid
    off, on = entries["off-1"], entries["on-1"]
    assert (off["cpuset"], off["container_cpusets"]) == ("0-3", {"/kubepods/besteffort/podoff-1/c1": "0-3"})
    assert (off["memory_high"], off["memory_high_before"], off["quota"], off["baseline"]) == (True, None, True, True)
    assert on["burst"] == {"/kubepods/burstable/podon-1": 0, "/kubepods/burstable/podon-1/c1": 0}
    assert on["memory_qos"] == {"/kubepods/burstable/podon-1": {"min": 0, "low": 0, "high": None}}
    assert (on["quota"], on["baseline"], on["quota_burst"]) == (False, False, True), "written, never left out"
    assert shared == {"/kubepods/burstable": {"min": 0, "low": 0}, "/kubepods": {"low": 0}}


def test_rollback_after_a_clean_stop_leaves_nothing_to_restore(tmp_path: Path) -> None:
    """A clean stop restored every pod and dropped its entry: the previous release reads an empty ledger."""
    ledger = load_copy(tmp_path, V2)
    for uid in list(ledger.entries):
        ledger.drop(uid)
    ledger.tiers.clear()
    ledger.shared.clear()
    assert ledger.save()
    assert read_as_release_1(tmp_path / "ledger.json") == ({}, {}, {})


def test_a_ledger_of_a_newer_version_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    text = json.dumps({"format": "colo-enforcement-ledger", "version": VERSION + 1, "pods": {"p": {"uid": "p"}}})
    path.write_text(text)
    ledger = Ledger(str(path))
    with pytest.raises(LedgerTooNew, match=f"is version {VERSION + 1}, .* reads up to version {VERSION}"):
        ledger.load()
    assert path.read_text() == text and not list(tmp_path.glob("*.corrupt-*")), "never moved aside"
    path.rename(tmp_path / "ledger.json.bak")  # the backup alone (a crash between the renames): the same
    with pytest.raises(LedgerTooNew):
        Ledger(str(path)).load()


def test_colo_agent_refuses_to_start_on_a_newer_ledger_in_one_line(tmp_path: Path) -> None:
    """The agent exits 2 with one line naming both versions, before it enforces anything."""
    ledger = tmp_path / "ledger.json"
    text = json.dumps({"format": "colo-enforcement-ledger", "version": VERSION + 1, "pods": {}})
    ledger.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "COLO_", "NODE_NAME"))}
    env.update(PYTHONPATH=str(ROOT), COLO_ENFORCEMENT__LEDGER_FILE=str(ledger))
    with FakeKubeAPI() as api:
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        proc = subprocess.run([sys.executable, "-m", "colo_agent.main", "--kubeconfig", kubeconfig, "--node-name",
                               "n1", "--state-file", "", "--listen", "127.0.0.1:0"],
                              capture_output=True, text=True, timeout=90, env=env)  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"is version {VERSION + 1}" in lines[0] and f"reads up to version {VERSION}" in lines[0]
    assert ledger.read_text() == text
