"""Logs an operator can live with: text or JSON lines, decisions logged when they change rather than every
interval, and repeated failures rate-limited with a count of what was held back."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import IO

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (RFC 3339, UTC), level, logger, message, and the traceback if any."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def setup(level: str, fmt: str = "text", stream: IO[str] | None = None) -> None:
    """Configure the root logger once, at start-up (after the configuration is known to be valid)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


class OnChange:
    """Remembers the last value logged per subject: `changed(subject, value)` is True when it differs, so
    a decision taken every interval is logged once, when it is first taken or changes."""

    def __init__(self) -> None:
        self._last: dict[Hashable, object] = {}
        self._lock = threading.Lock()

    def changed(self, subject: Hashable, value: object) -> bool:
        with self._lock:
            if subject in self._last and self._last[subject] == value:
                return False
            self._last[subject] = value
            return True

    def forget(self, subject: Hashable) -> None:
        """The subject is gone (or back to normal): its next value is news again."""
        with self._lock:
            self._last.pop(subject, None)


@dataclass(slots=True)
class _Streak:
    logged_at: float
    held_back: int = 0  # since the last logged occurrence
    total: int = 1  # since the streak began


class Repeats:
    """Rate limit for a failure that repeats: the first occurrence is logged, later ones at most once per
    `period` seconds, each saying how many were held back; `ended` reports when the failures stop."""

    def __init__(self, period: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.period = period
        self.clock = clock
        self._streaks: dict[Hashable, _Streak] = {}
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        """Is anything failing? (cheap: lets a hot path skip `ended` while nothing fails)"""
        return bool(self._streaks)

    def occurred(self, subject: Hashable) -> int | None:
        """None: hold this one back. Else log it now, noting the returned count held back since the last."""
        with self._lock:
            return self._occurred(subject, self.clock())

    def _occurred(self, subject: Hashable, now: float) -> int | None:
        streak = self._streaks.get(subject)
        if streak is None:
            self._streaks[subject] = _Streak(now)
            return 0
        streak.total += 1
        if now - streak.logged_at < self.period:
            streak.held_back += 1
            return None
        held = streak.held_back
        streak.logged_at, streak.held_back = now, 0
        return held

    def ended(self, subject: Hashable) -> int | None:
        """The failure stopped: None if it was not failing, else how many times it occurred in a row."""
        with self._lock:
            streak = self._streaks.pop(subject, None)
        return None if streak is None else streak.total


def repeated(held_back: int) -> str:
    """Suffix for a rate-limited line: '' or ' (and 12 more like it)'."""
    return f" (and {held_back} more like it since the last report)" if held_back else ""
