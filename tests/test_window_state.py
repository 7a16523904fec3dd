"""Saving and loading the windows: restarts against the brute force, bad files, atomic writes."""

from __future__ import annotations

import builtins
import json
import logging
import math
import os
import random
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

from agent.windows import persist as window_state
from agent.windows.persist import load_windows, save_windows
from agent.windows.store import WINDOW_NAMES, SeriesKey, SeriesWindows, WindowStore
from tests.test_windows import Ref, _keys, check, drive, fill_day, noisy_with_gaps, spikes

NODE = "node-a"
KEY: SeriesKey = ("pod", "0b5d6f0e-uid", "cpu")
WALL0 = 1_700_000_000.0


def restart(
    tmp_path: Path,
    sw: SeriesWindows,
    ref: Ref,
    *,
    mono_save: float,
    wall_save: float,
    mono_load: float,
    wall_load: float,
) -> tuple[WindowStore, SeriesWindows | None]:
    """Save `sw` (phase from its store), load it on a new clock, and move `ref` the documented way."""
    store = WindowStore(phase=sw.phase)
    store.put(KEY, sw)
    path = str(tmp_path / "windows.state")
    save_windows(store, path, node=NODE, mono_now=mono_save, wall_now=wall_save)
    loaded = load_windows(path, node=NODE, mono_now=mono_load, wall_now=wall_load)
    elapsed = max(0.0, wall_load - wall_save)
    base = mono_load - elapsed
    assert loaded.phase == pytest.approx(((sw.phase - mono_save) + base) % 300.0, abs=1e-9)
    ref.rebase([(t - mono_save) + base for t in ref.ts], loaded.phase)
    return loaded, loaded.get(KEY)


def continue_after(
    loaded: WindowStore, got: SeriesWindows | None, ref: Ref, stream: list[tuple[float, float]]
) -> SeriesWindows:
    sw = got if got is not None else SeriesWindows(phase=loaded.phase, max_gap=loaded.max_gap)
    drive(stream, sw=sw, ref=ref, every=89, probes=(0.0, 30.0, 400.0))
    return sw


@pytest.mark.parametrize(
    ("mono_save", "mono_load", "downtime", "label"),
    [
        (7300.0, 50.0, 120.0, "reboot, 2 minutes down (integer clocks: exact)"),
        (7300.0, 91234.0, 20 * 60.0, "agent restart, 20 minutes down"),
        (7300.0, 12.0, 3 * 3600.0, "3 hours down: the hour is gone, the day is not"),
        (7300.0, 5.0, 0.0, "no wall time between save and load"),
    ],
)
def test_restart_matches_brute_force(
    tmp_path: Path, mono_save: float, mono_load: float, downtime: float, label: str
) -> None:
    stream = noisy_with_gaps(2 * 3600, seed=11)
    shift = mono_save - stream[-1][0] - 1.0
    stream = [(t + shift, v) for t, v in stream]  # the first process's clock ends at mono_save - 1
    sw, ref, _ = drive(stream, every=101, probes=(0.0, 0.5))
    loaded, got = restart(
        tmp_path,
        sw,
        ref,
        mono_save=mono_save,
        wall_save=WALL0,
        mono_load=mono_load,
        wall_load=WALL0 + downtime,
    )
    assert got is not None, label
    check(got, ref, mono_load, f"{label}: right after load")
    after = [(mono_load + 1 + i + 0.5 * (i % 2), v) for i, (_, v) in enumerate(spikes(3000))]
    continue_after(loaded, got, ref, after)


def test_restart_fractional_clocks(tmp_path: Path) -> None:
    """Clocks that are not whole seconds: samples sit 0.5 s off the boundaries, so rounding of the time
    conversion cannot move a sample across one."""
    mono_save, mono_load = 5123.371, 77.913
    sw, ref = SeriesWindows(phase=13.25), Ref(13.25)
    stream = [(13.25 + i + 0.5, 1.0 + (i % 97) / 10) for i in range(5000)]
    drive(stream, sw=sw, ref=ref, every=301, probes=(0.0,))
    mono_save = stream[-1][0] + 0.371
    wall_save = WALL0 + 0.123
    loaded, got = restart(
        tmp_path, sw, ref, mono_save=mono_save, wall_save=wall_save, mono_load=mono_load, wall_load=wall_save + 95.7
    )
    assert got is not None
    phase = loaded.phase
    after = [(phase + 60 * math.ceil((mono_load - phase) / 60) + i + 0.5, float(i % 13)) for i in range(1500)]
    continue_after(loaded, got, ref, after)


def test_restart_after_a_gap_of_days(tmp_path: Path) -> None:
    """A series silent for two days, then fed again: its day ring is stale but the file is valid."""
    sw, ref = SeriesWindows(), Ref()
    stream = [(float(i), 1.0 + i % 5) for i in range(2000)]
    stream += [(2000.0 + 2 * 86400 + i, 3.0) for i in range(400)]
    drive(stream, sw=sw, ref=ref, every=397, probes=(0.0,))
    loaded, got = restart(
        tmp_path, sw, ref, mono_save=stream[-1][0] + 1, wall_save=WALL0, mono_load=100.0, wall_load=WALL0 + 60
    )
    assert got is not None
    continue_after(loaded, got, ref, [(101.0 + i, 2.0) for i in range(600)])


def test_wall_clock_stepped_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The wall clock went back an hour between save and load: treated as saved just now, with a warning."""
    sw, ref, _ = drive(noisy_with_gaps(3000, seed=2), every=500, probes=(0.0,))
    mono_save = (sw.last_t or 0.0) + 1.0
    with caplog.at_level(logging.INFO, logger="agent.windows.persist"):
        loaded, got = restart(
            tmp_path, sw, ref, mono_save=mono_save, wall_save=WALL0, mono_load=30.0, wall_load=WALL0 - 3600.0
        )
    assert any("clock stepped back" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert got is not None
    check(got, ref, 30.0, "after the step back")
    assert got.stats(30.0)["avg_1m"].value is not None  # the data is as fresh as at the save
    continue_after(loaded, got, ref, [(31.0 + i, 2.0) for i in range(700)])


def test_wall_clock_jumped_two_days(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    sw, _ = fed(3000)
    store = WindowStore()
    store.put(KEY, sw)
    path = str(tmp_path / "w")
    save_windows(store, path, node=NODE, mono_now=3001.0, wall_now=WALL0)
    with caplog.at_level(logging.INFO, logger="agent.windows.persist"):
        loaded = load_windows(path, node=NODE, mono_now=10.0, wall_now=WALL0 + 2 * 86400)
    assert len(loaded) == 0
    assert any("1 without data" in r.getMessage() for r in caplog.records)


def fed(n: int, seed: int = 1) -> tuple[SeriesWindows, Ref]:
    sw, ref = SeriesWindows(), Ref()
    rng = random.Random(seed)
    for i in range(n):
        v = rng.random()
        sw.add(float(i), v)
        ref.add(float(i), v)
    return sw, ref


def test_roundtrip_many_series(tmp_path: Path) -> None:
    store = WindowStore(phase=42.0)
    keys = _keys(5)
    rng = random.Random(4)
    for s in range(4000):
        for key in keys:
            if rng.random() < 0.97:
                store.add(key, float(s), rng.random() * 100)
    path = str(tmp_path / "state.bin")
    save_windows(store, path, node=NODE, mono_now=4000.0, wall_now=WALL0)
    loaded = load_windows(path, node=NODE, mono_now=4000.0, wall_now=WALL0)
    assert sorted(loaded.keys()) == sorted(store.keys())
    assert loaded.phase == store.phase and loaded.max_gap == store.max_gap
    for key in keys:
        for now in (4000.0, 4100.0, 7000.0):
            a, b = store.stats(key, now), loaded.stats(key, now)
            for name in WINDOW_NAMES:
                assert b[name] == a[name], (key, now, name)  # the same grid and numbers: exactly equal
    # the restored store keeps working and can be pruned
    loaded.add(keys[0], 4001.0, 1.0)
    assert loaded.retain(lambda k: k != keys[0]) == 1


def test_file_header(tmp_path: Path) -> None:
    sw, _ = fed(100)
    store = WindowStore()
    store.put(KEY, sw)
    path = tmp_path / "w"
    save_windows(store, str(path), node=NODE, mono_now=100.0, wall_now=WALL0)
    data = path.read_bytes()
    assert data[:8] == window_state.MAGIC
    _, version, hlen = struct.unpack_from("<8sII", data)
    head = json.loads(data[16 : 16 + hlen])
    assert version == 1 and head["node"] == NODE and head["saved_wall"] == WALL0
    assert head["series"] == [[*KEY, 100]]
    assert zlib.crc32(data[:-4]) == struct.unpack("<I", data[-4:])[0]


# ---------------------------------------------------------------------- the file's old name


def test_the_old_name_is_read_when_the_new_is_absent_then_removed_by_the_first_save(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old = saved(tmp_path, window_state.LEGACY_FILE_NAME)
    new = tmp_path / window_state.FILE_NAME
    with caplog.at_level(logging.INFO, logger="agent.windows.persist"):
        store = load_windows(str(new), node=NODE, mono_now=2000.0, wall_now=WALL0 + 1)
    assert store.keys() == [KEY] and not new.exists() and old.exists()  # loading alone changes nothing
    assert any(str(old) in r.getMessage() and "old name" in r.getMessage() for r in caplog.records)
    assert any(f"loaded window state {old}" in r.getMessage() for r in caplog.records)
    save_windows(store, str(new), node=NODE, mono_now=2001.0, wall_now=WALL0 + 2)
    assert new.read_bytes()[:8] == window_state.MAGIC and not old.exists()
    again = load_windows(str(new), node=NODE, mono_now=2001.0, wall_now=WALL0 + 2)
    assert again.stats(KEY, 2001.0) == store.stats(KEY, 2001.0)


def test_the_new_name_wins_over_an_old_file_left_beside_it(tmp_path: Path) -> None:
    old = tmp_path / window_state.LEGACY_FILE_NAME
    old.write_bytes(b"not even a state file")
    new = saved(tmp_path, window_state.FILE_NAME)
    store = load_windows(str(new), node=NODE, mono_now=2000.0, wall_now=WALL0 + 1)
    assert store.keys() == [KEY]
    save_windows(store, str(new), node=NODE, mono_now=2001.0, wall_now=WALL0 + 2)
    assert not old.exists()


def test_a_name_the_operator_chose_never_reads_or_removes_the_old_file(tmp_path: Path) -> None:
    old = saved(tmp_path, window_state.LEGACY_FILE_NAME)
    mine = tmp_path / "my-windows.bin"
    store = load_windows(str(mine), node=NODE, mono_now=2000.0, wall_now=WALL0 + 1)
    assert len(store) == 0
    save_windows(store, str(mine), node=NODE, mono_now=2001.0, wall_now=WALL0 + 2)
    assert old.exists()
    assert len(load_windows(str(old), node=NODE, mono_now=2000.0, wall_now=WALL0 + 1)) == 1  # its own name


# ---------------------------------------------------------------------- bad files


def saved(tmp_path: Path, name: str = "w.state") -> Path:
    sw, _ = fed(2000)
    store = WindowStore()
    store.put(KEY, sw)
    path = tmp_path / name
    save_windows(store, str(path), node=NODE, mono_now=2000.0, wall_now=WALL0)
    return path


def load_ignored(path: Path, caplog: pytest.LogCaptureFixture, reason: str, *, node: str = NODE) -> None:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="agent.windows.persist"):
        store = load_windows(str(path), node=node, mono_now=2000.0, wall_now=WALL0 + 1)
    assert isinstance(store, WindowStore) and len(store) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings, f"nothing logged for {reason}"
    assert str(path) in warnings[0] and reason in warnings[0], warnings


def reseal(data: bytes) -> bytes:
    """Recompute the checksum so that the structural checks, not the CRC, must catch a change."""
    return data[:-4] + struct.pack("<I", zlib.crc32(data[:-4]))


def test_missing_file_is_quiet(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="agent.windows.persist"):
        store = load_windows(str(tmp_path / "nope"), node=NODE, mono_now=1.0, wall_now=WALL0)
    assert len(store) == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("no window state" in r.getMessage() for r in caplog.records)


def test_corrupt_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = saved(tmp_path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))
    load_ignored(path, caplog, "checksum mismatch")


@pytest.mark.parametrize("keep", [0, 3, 15, 100, 0.5, -1])
def test_truncated_file(tmp_path: Path, caplog: pytest.LogCaptureFixture, keep: float) -> None:
    path = saved(tmp_path)
    data = path.read_bytes()
    n = int(len(data) * keep) if isinstance(keep, float) else (len(data) + keep if keep < 0 else keep)
    path.write_bytes(data[:n])
    load_ignored(path, caplog, "truncated" if n < 20 else "checksum mismatch")


def test_truncated_records_with_valid_checksum(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = saved(tmp_path)
    data = path.read_bytes()
    path.write_bytes(reseal(data[:-2000] + data[-4:]))
    load_ignored(path, caplog, "truncated series records")


def test_foreign_files(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "w.state"
    path.write_text(json.dumps({"format": "something-else", "series": []}))
    load_ignored(path, caplog, "bad magic")
    path.write_bytes(b"\x00" * 64)
    load_ignored(path, caplog, "bad magic")
    data = saved(tmp_path).read_bytes()
    path.write_bytes(reseal(data[:8] + struct.pack("<I", 2) + data[12:]))
    load_ignored(path, caplog, "unsupported colo-windows version 2")
    _, _, hlen = struct.unpack_from("<8sII", data)
    head = json.loads(data[16 : 16 + hlen])
    head["format"] = "other"
    raw = json.dumps(head).encode()
    path.write_bytes(reseal(data[:12] + struct.pack("<I", len(raw)) + raw + data[16 + hlen :]))
    load_ignored(path, caplog, "header does not describe")


def test_other_node(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = saved(tmp_path)
    load_ignored(path, caplog, "written for node 'node-a', this is node 'node-b'", node="node-b")


def test_unreadable_file(tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    path = saved(tmp_path)
    if os.geteuid() != 0:  # root reads mode-000 files: simulate the denial instead
        path.chmod(0)
        load_ignored(path, caplog, "cannot read it")
        path.chmod(0o600)
    real_open = builtins.open

    def deny(file: Any, *args: Any, **kwargs: Any) -> Any:
        if str(file) == str(path):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", deny)
    load_ignored(path, caplog, "cannot read it: Permission denied")
    monkeypatch.undo()
    load_ignored(tmp_path, caplog, "cannot read it")  # a directory


def test_fuzzed_files_never_raise(tmp_path: Path) -> None:
    """Random damage, resealed so that parsing itself meets it: never an exception, and what loads works."""
    path = saved(tmp_path)
    good = path.read_bytes()
    rng = random.Random(8)
    for i in range(300):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(data)) if i % 3 else rng.randrange(min(400, len(data)))
            data[pos] = rng.randrange(256)
        path.write_bytes(reseal(bytes(data)) if i % 5 else bytes(data))
        store = load_windows(str(path), node=NODE, mono_now=2000.0, wall_now=WALL0 + 1)
        for key in store:
            store.stats(key, 2001.0)
            store.add(key, 2001.0, 1.0)
            store.stats(key, 2100.0)


# ---------------------------------------------------------------------- atomic writes

_CRASH = """
import os, sys
from agent.windows import persist as window_state
from agent.windows.store import WindowStore
store = WindowStore()
for s in range(100):
    store.add(("node", "", "cpu"), float(s), 9.0)
os.replace = lambda a, b: os._exit(3)  # the process dies between writing the temp file and the rename
window_state.save_windows(store, sys.argv[1], node="node-a", mono_now=100.0, wall_now=1.7e9)
"""


def test_crash_mid_save_keeps_old_file(tmp_path: Path) -> None:
    path = saved(tmp_path)
    before = path.read_bytes()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.run([sys.executable, "-c", _CRASH, str(path)], env=env, check=False)
    assert proc.returncode == 3
    assert path.read_bytes() == before
    leftovers = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(leftovers) == 1 and leftovers[0].stat().st_size > 0
    store = load_windows(str(path), node=NODE, mono_now=2000.0, wall_now=WALL0)
    assert store.value(KEY, "avg_1m", 2000.0).value is not None  # the old state, not the crashed one's
    saved(tmp_path)  # the next save removes the leftover
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_failed_write_raises_and_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = saved(tmp_path)
    before = path.read_bytes()

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space"):
        saved(tmp_path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_save_and_load_250_pods_day_are_fast(tmp_path: Path) -> None:
    store = WindowStore()
    now = fill_day(store, _keys(250))
    path = str(tmp_path / "w")
    t0 = time.perf_counter()
    save_windows(store, path, node=NODE, mono_now=now, wall_now=WALL0)
    t1 = time.perf_counter()
    loaded = load_windows(path, node=NODE, mono_now=5.0, wall_now=WALL0 + 10)
    t2 = time.perf_counter()
    size = os.path.getsize(path)
    print(f"save {1e3 * (t1 - t0):.1f} ms, load {1e3 * (t2 - t1):.1f} ms, {size / 2**20:.2f} MiB")
    assert len(loaded) == 502
    # how fast is bench/bench_windows.py's business (save 27 ms, load 50 ms for a day of 250 pods)
    for key in loaded.keys()[:20]:  # 10 s of wall time passed: loaded at 5 is the old store at now + 10
        assert loaded.stats(key, 5.0) == store.stats(key, now + 10.0)
