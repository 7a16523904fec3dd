"""API failures logged when they change, with a count: during an outage every component retries every few
seconds, and a warning per attempt would fill the log with one line repeated. Built on the common
rate limit (`common.logs.Repeats`), keyed by what failed: a new kind of failure is logged at once."""

from __future__ import annotations

import logging

from common.logs import Repeats, repeated


class FailureLog:
    """One per kind of call. A failure whose key (the HTTP status, 0 for no answer) is new since the last
    success is logged at WARNING at once; repeats of it at most once a minute with the number held back;
    the first success after failures is logged at INFO with how many attempts failed."""

    def __init__(self, logger: logging.Logger, what: str, period: float = 60.0) -> None:
        self.logger, self.what = logger, what
        self._repeats = Repeats(period)
        self._keys: set[object] = set()

    def failed(self, key: object, message: str) -> None:
        self._keys.add(key)
        if (held := self._repeats.occurred(key)) is not None:
            self.logger.warning("%s failed: %s%s", self.what, message, repeated(held))

    def succeeded(self) -> None:
        if not self._repeats:
            return
        failures = sum(self._repeats.ended(key) or 0 for key in list(self._keys))
        self._keys.clear()
        if failures:
            self.logger.info("%s works again after %d failed attempts", self.what, failures)
