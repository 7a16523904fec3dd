"""A ledger written by the Colo before parts were registered (version 1: one field per part on each entry,
`shared` for memory QoS only) is migrated on load without losing an original, and saved in the new format.

tests/data/ledger_v1.json is what that version's `Ledger.save` wrote (field for field, `asdict` of its
entry): an offline pod with every offline part, an online pod with every online part after a start from
the pod spec, and an entry older still (no `quota`/`baseline` flags: it had both changed)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from agent.enforce.ledger import VERSION, Ledger
from agent.enforce.parts.registry import held_parts, known_parts

OLD = Path(__file__).parent / "data" / "ledger_v1.json"


def load_copy(tmp_path: Path) -> Ledger:
    path = tmp_path / "ledger.json"
    shutil.copy(OLD, path)
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
    assert "quota" not in saved["pods"]["off-1"]  # no part is a field of the entry any more
    assert json.loads((tmp_path / "ledger.json.bak").read_text()) == json.loads(OLD.read_text())  # the old file
    again = Ledger(str(tmp_path / "ledger.json"))
    again.load()
    assert again.entries == ledger.entries and again.shared == ledger.shared and again.tiers == ledger.tiers


def test_a_ledger_of_a_newer_version_is_kept_aside_not_misread(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps({"format": "colo-enforcement-ledger", "version": VERSION + 1, "pods": {}}))
    ledger = Ledger(str(path))
    ledger.load()
    assert not ledger.trusted and ledger.entries == {} and "newer" in (ledger.problem or "")
    assert not path.exists() and list(tmp_path.glob("ledger.json.corrupt-*"))
