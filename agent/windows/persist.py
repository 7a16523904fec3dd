"""Persistence of the rolling windows across agent restarts.

A restart should not turn a day of history into a cold window, so the agent saves every series
periodically and at shutdown, and loads them at start. Monotonic time restarts with the machine, so the
file holds wall-clock times: every time is stored as its age relative to ``saved_wall``, the wall-clock
time of the save (``wall_t = saved_wall + age``, ``age = t - mono_now`` at save). At load the times move
onto the new monotonic base ``mono_now - elapsed`` with ``elapsed = wall_now - saved_wall``; if the wall
clock is now *behind* ``saved_wall`` (it was stepped back) ``elapsed`` is taken as 0, the state treated as
just saved, and a warning logged. Data older than each window's span at load time is dropped, and a
series left without any data is not restored.

File format (version 1, little-endian)::

    b"COLOWIN\\0" | u32 version | u32 header length | header (JSON) | records | u32 CRC-32 of all before

The JSON header names the format, the node, ``saved_wall``, the grid phase relative to the save
(``phase - mono_now``), ``max_gap``, the ring sizes, and per series ``[scope, id, resource, n_raw]``, and
``notes`` (the store's small named figures, e.g. the learned lending margins) and ``hours`` (per series index,
the hourly maxima of the series that keep them: [hhead, 170 values, null for none]); both absent in older
files, which load as before. Each
record is ``<dddqq`` (d0, age of the latest sample, age of the latest gap sample, current bucket, current
day slot) followed by float64 arrays: n_raw times (ages), n_raw values, then the minute ring (sum, count,
coverage, 5-minute average; 64 each) and the day ring (max average, coverage; 289 each). About 11.5 KB
per series at 1 Hz: 250 pods x 2 resources is ~5.5 MiB, saved in ~25 ms (fsync included).

Writes are atomic: a temp file in the same directory, fsync, os.replace, fsync of the directory. A crash
mid-write leaves the previous file intact (and a stray ``<name>.*.tmp``, removed by the next save).
Loading never raises for a bad file: a missing file starts empty quietly; a corrupt, truncated, foreign
(other format or version, or another node's) or unreadable file is logged with its path and the reason
and ignored.

The file is named for what it is, ``windows.colowin`` (``FILE_NAME``), where Colo picks the name. Until issue
33 it was ``agent-state.json`` though never JSON (``jq`` failed on it): a path named ``windows.colowin`` that
does not exist is loaded from ``agent-state.json`` beside it, and the first save under the new name removes
the old file.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import json
import logging
import math
import os
import struct
import sys
import tempfile
import zlib
from array import array
from typing import Any

from agent.windows.grid import HOUR_SLOTS
from agent.windows.store import (
    DAY_SLOTS,
    DEFAULT_MAX_GAP,
    MINUTE_SLOTS,
    PHASE_PERIOD,
    SeriesKey,
    SeriesState,
    WindowStore,
    wall_aligned_phase,
)

log = logging.getLogger(__name__)

FORMAT = "colo-windows"
VERSION = 1
#: the state file's name where Colo picks the path (the DaemonSet's /var/lib/colo, the per-user state directory)
FILE_NAME = "windows.colowin"
#: the same file's name before issue 33, migrated: read when FILE_NAME is absent beside it, removed once saved
LEGACY_FILE_NAME = "agent-state.json"
MAGIC = b"COLOWIN\x00"
#: A state file larger than this is not read (250 pods need ~6 MB).
MAX_FILE_BYTES = 256 << 20

_PRE = struct.Struct("<8sII")  # magic, version, header length
_REC = struct.Struct("<dddqq")  # d0, last_t age, last_gap_t age, kc, dhead
_CRC = struct.Struct("<I")
_RING_FLOATS = 4 * MINUTE_SLOTS + 2 * DAY_SLOTS
_SWAP = sys.byteorder != "little"


class StateError(Exception):
    """Why a state file was ignored (the message goes to the log)."""


def _le(arr: array[float]) -> bytes:
    if _SWAP:
        arr = array("d", arr)
        arr.byteswap()
    return arr.tobytes()


def _floats(buf: memoryview, pos: int, n: int) -> tuple[array[float], int]:
    end = pos + 8 * n
    arr = array("d")
    arr.frombytes(buf[pos:end])
    if _SWAP:
        arr.byteswap()
    return arr, end


def _finite(arr: array[float], what: str, *, allow_neg_inf: bool = False) -> None:
    vals = [x for x in arr if x != -math.inf] if allow_neg_inf else arr
    if not math.isfinite(math.fsum(vals)):
        raise StateError(f"non-finite {what}")


def _hours(entry: object) -> dict[str, Any]:
    """A series' hourly maxima from the header's `hours` entry ([hhead, values with null for none]); {} without."""
    if entry is None:
        return {}
    if not (
        isinstance(entry, list)
        and len(entry) == 2
        and isinstance(entry[0], int)
        and isinstance(entry[1], list)
        and len(entry[1]) == HOUR_SLOTS
    ):
        raise StateError(f"bad hourly maxima {entry!r:.80}")
    values = [-math.inf if v is None else v for v in entry[1]]
    if not all(isinstance(v, int | float) and (v == -math.inf or math.isfinite(v)) for v in values):
        raise StateError("non-finite hourly maxima")
    return {"hours": array("d", values), "hhead": entry[0]}


def save_windows(store: WindowStore, path: str, *, node: str, mono_now: float, wall_now: float) -> None:
    """Write every series of `store` to `path` atomically.

    Raises OSError when the file cannot be written (the previous file, if any, stays as it was).
    """
    snap = store.snapshot()
    records: list[bytes] = []
    series: list[list[object]] = []
    hours: dict[str, list[object]] = {}
    for key, st in snap:
        if st.hours is not None:
            hours[str(len(series))] = [st.hhead, [v if v > -math.inf else None for v in st.hours]]
        series.append([key[0], key[1], key[2], len(st.times)])
        records.append(_REC.pack(st.d0, st.last_t - mono_now, st.last_gap_t - mono_now, st.kc, st.dhead))
        records.append(_le(array("d", [t - mono_now for t in st.times])))
        for arr in (st.values, st.msum, st.mcnt, st.mcov, st.mev, st.dmax, st.dcov):
            records.append(_le(arr))
    header = json.dumps(
        {
            "format": FORMAT,
            "version": VERSION,
            "node": node,
            "saved_wall": wall_now,
            "phase": store.phase - mono_now,
            "max_gap": store.max_gap,
            "minute_slots": MINUTE_SLOTS,
            "day_slots": DAY_SLOTS,
            "series": series,
            "notes": {k: v for k, v in store.notes.items() if math.isfinite(v)},
            "hours": hours,
        },
        separators=(",", ":"),
    ).encode()
    body = b"".join([_PRE.pack(MAGIC, VERSION, len(header)), header, *records])
    _write_atomic(path, body + _CRC.pack(zlib.crc32(body)))
    legacy = legacy_path(path)
    if legacy is not None and os.path.lexists(legacy):
        try:
            os.unlink(legacy)
        except OSError as e:  # the new file is saved; the old one is only left over
            log.warning("window state saved to %s; cannot remove its old name %s: %s", path, legacy, e.strerror or e)
        else:
            log.info("window state saved to %s; removed its old name %s", path, legacy)


def legacy_path(path: str) -> str | None:
    """`agent-state.json` beside a path named FILE_NAME (the old name of the same file); None for other names,
    which the operator chose and Colo never renames."""
    if os.path.basename(path) != FILE_NAME:
        return None
    return os.path.join(os.path.dirname(path), LEGACY_FILE_NAME)


def _write_atomic(path: str, data: bytes) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    prefix = os.path.basename(path) + "."
    for stale in glob.glob(os.path.join(glob.escape(directory), glob.escape(prefix) + "*.tmp")):
        with contextlib.suppress(OSError):  # left by a crash mid-save (one writer per path)
            os.unlink(stale)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    try:  # make the rename itself durable
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def load_windows(
    path: str, *, node: str, mono_now: float, wall_now: float, max_gap: float | None = None
) -> WindowStore:
    """The store saved at `path`, moved onto the current monotonic clock; an empty store (with a logged
    reason) when the file is missing, unreadable, corrupt, truncated, foreign or another node's.

    `max_gap` overrides the saved one for new samples; an empty store uses it (or the default) and a grid
    aligned to wall-clock minutes.
    """
    empty_gap = DEFAULT_MAX_GAP if max_gap is None else max_gap

    def empty() -> WindowStore:
        return WindowStore(phase=wall_aligned_phase(mono_now, wall_now), max_gap=empty_gap)

    legacy = legacy_path(path)
    if legacy is not None and not os.path.lexists(path) and os.path.lexists(legacy):
        log.info("no window state at %s: reading its old name %s (removed at the first save)", path, legacy)
        path = legacy
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_FILE_BYTES:
                raise StateError(f"{size} bytes is more than the {MAX_FILE_BYTES} a state file can be")
            data = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        log.info("no window state at %s; starting with empty windows", path)
        return empty()
    except StateError as e:
        log.warning("ignoring window state file %s: %s", path, e)
        return empty()
    except OSError as e:
        log.warning("ignoring window state file %s: cannot read it: %s", path, e.strerror or e)
        return empty()
    try:
        return _decode(data, path, node=node, mono_now=mono_now, wall_now=wall_now, max_gap=max_gap)
    except StateError as e:
        log.warning("ignoring window state file %s: %s", path, e)
    except Exception as e:  # any other malformation: the file is only a cache of history
        log.warning("ignoring window state file %s: malformed (%s: %s)", path, type(e).__name__, e)
    return empty()


def _decode(
    data: bytes, path: str, *, node: str, mono_now: float, wall_now: float, max_gap: float | None
) -> WindowStore:
    if len(data) < _PRE.size + _CRC.size:
        raise StateError(f"truncated: {len(data)} bytes")
    magic, version, hlen = _PRE.unpack_from(data)
    if magic != MAGIC:
        raise StateError(f"not a {FORMAT} file (bad magic {bytes(magic)!r})")
    if version != VERSION:
        raise StateError(f"unsupported {FORMAT} version {version} (this agent reads {VERSION})")
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if zlib.crc32(memoryview(data)[: -_CRC.size]) != crc:
        raise StateError("checksum mismatch: the file is corrupt or truncated")
    pos = _PRE.size + hlen
    if pos > len(data) - _CRC.size:
        raise StateError("truncated header")
    try:
        head: Any = json.loads(data[_PRE.size : pos])
    except ValueError as e:
        raise StateError(f"unreadable header: {e}") from e
    if not isinstance(head, dict) or head.get("format") != FORMAT or head.get("version") != VERSION:
        raise StateError(f"header does not describe a {FORMAT} v{VERSION} file")
    if head.get("node") != node:
        raise StateError(f"written for node {head.get('node')!r}, this is node {node!r}")
    if head.get("minute_slots") != MINUTE_SLOTS or head.get("day_slots") != DAY_SLOTS:
        raise StateError("written with other ring sizes")
    saved_wall, phase_rel, saved_gap = (float(head[k]) for k in ("saved_wall", "phase", "max_gap"))
    if not (math.isfinite(saved_wall) and math.isfinite(phase_rel) and 0.0 < saved_gap <= 300.0):
        raise StateError("bad saved_wall, phase or max_gap in the header")
    series = head["series"]
    if not isinstance(series, list):
        raise StateError("bad series list")
    elapsed = wall_now - saved_wall
    if elapsed < 0:
        log.warning(
            "window state %s was saved %.1f s in the future of this wall clock (clock stepped back?); "
            "treating it as saved just now",
            path,
            -elapsed,
        )
        elapsed = 0.0
    base = mono_now - elapsed  # the current monotonic time of the save
    phase = (phase_rel + base) % PHASE_PERIOD
    store = WindowStore(phase=phase, max_gap=saved_gap if max_gap is None else max_gap)
    notes = head.get("notes", {})  # absent in files written before the notes: none
    if not isinstance(notes, dict) or not all(
        isinstance(k, str) and isinstance(v, int | float) and math.isfinite(v) for k, v in notes.items()
    ):
        raise StateError("bad notes in the header")
    store.notes.update({k: float(v) for k, v in notes.items()})
    hours_of = head.get("hours", {})  # absent in files written before the hourly maxima
    if not isinstance(hours_of, dict):
        raise StateError("bad hours in the header")
    buf = memoryview(data)
    end = len(data) - _CRC.size
    states: list[tuple[SeriesKey, SeriesState]] = []
    for entry in series:
        if not (
            isinstance(entry, list)
            and len(entry) == 4
            and all(isinstance(x, str) for x in entry[:3])
            and isinstance(entry[3], int)
            and 0 <= entry[3] <= 10_000_000
        ):
            raise StateError(f"bad series entry {entry!r:.80}")
        n = entry[3]
        if pos + _REC.size + 8 * (2 * n + _RING_FLOATS) > end:
            raise StateError("truncated series records")
        d0, last_age, gap_age, kc, dhead = _REC.unpack_from(data, pos)
        pos += _REC.size
        times, pos = _floats(buf, pos, n)
        values, pos = _floats(buf, pos, n)
        msum, pos = _floats(buf, pos, MINUTE_SLOTS)
        mcnt, pos = _floats(buf, pos, MINUTE_SLOTS)
        mcov, pos = _floats(buf, pos, MINUTE_SLOTS)
        mev, pos = _floats(buf, pos, MINUTE_SLOTS)
        dmax, pos = _floats(buf, pos, DAY_SLOTS)
        dcov, pos = _floats(buf, pos, DAY_SLOTS)
        for what, arr in (("times", times), ("values", values), ("minute sums", msum)):
            _finite(arr, what)
        for what, arr in (("minute counts", mcnt), ("coverage", mcov), ("coverage", dcov)):
            _finite(arr, what)
            if min(arr) < 0:
                raise StateError(f"negative {what}")
        _finite(mev, "averages", allow_neg_inf=True)
        _finite(dmax, "averages", allow_neg_inf=True)
        if not (0.0 <= d0 < math.inf and math.isfinite(last_age) and gap_age < math.inf):
            raise StateError("non-finite sample times")
        if any(b < a for a, b in itertools.pairwise(times)) or (n and times[-1] > last_age):
            raise StateError("sample times out of order")
        if last_age > 3600.0:
            raise StateError("sample times after the save")
        if abs(kc - math.ceil((last_age - phase_rel) / 60.0)) > 1 or dhead > kc // 5:
            raise StateError("bucket indexes do not match the sample times")
        key: SeriesKey = (entry[0], entry[1], entry[2])
        states.append(
            (
                key,
                SeriesState(
                    phase=phase_rel,
                    max_gap=saved_gap,
                    times=times,
                    values=values,
                    d0=d0,
                    last_t=last_age,
                    last_gap_t=gap_age,
                    kc=kc,
                    msum=msum,
                    mcnt=mcnt,
                    mcov=mcov,
                    mev=mev,
                    dhead=dhead,
                    dmax=dmax,
                    dcov=dcov,
                    **_hours(hours_of.get(str(len(states)))),
                ),
            )
        )
    if pos != end:
        raise StateError(f"{end - pos} unexpected bytes after the last series")
    dropped = sum(not store.restore(key, st, shift=base, now=mono_now) for key, st in states)
    log.info(
        "loaded window state %s: %d series (%d without data in any window dropped), saved %.0f s ago",
        path,
        len(store),
        dropped,
        elapsed,
    )
    return store
