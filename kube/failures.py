"""API failures logged once per change, with a count: during an outage every component retries every few
seconds, and a warning per attempt would fill the log with one line repeated."""

from __future__ import annotations

import logging
import threading


class FailureLog:
    """One per kind of call. The first failure, and each failure whose key (the HTTP status, 0 for no
    answer) differs from the last, is logged at WARNING with how often the previous one repeated; repeats
    are only counted; the first success after failures is logged at INFO with their number."""

    def __init__(self, logger: logging.Logger, what: str) -> None:
        self.logger, self.what = logger, what
        self._lock = threading.Lock()
        self._key: object = None
        self._repeats = 0  # failures with the current key since it was logged
        self._failures = 0  # failures since the last success

    def failed(self, key: object, message: str) -> None:
        with self._lock:
            self._failures += 1
            if self._failures > 1 and key == self._key:
                self._repeats += 1
                return
            before = f" (the previous error repeated {self._repeats} more times)" if self._repeats else ""
            self._key, self._repeats = key, 0
        self.logger.warning("%s failed: %s%s", self.what, message, before)

    def succeeded(self) -> None:
        with self._lock:
            failures, self._failures, self._repeats, self._key = self._failures, 0, 0, None
        if failures:
            self.logger.info("%s works again after %d failed attempts", self.what, failures)
