"""Polling for a condition in tests that watch threads and servers work."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(cond: Callable[[], Any], timeout: float = 30.0, step: float = 0.05, *, what: str = "condition") -> Any:
    """The condition's first truthy value, or AssertionError (naming `what`) after `timeout` seconds.

    The timeout only bounds a failure: it is generous, so a busy machine never turns a slow pass into a red
    test. How soon something happens is tested on decisions with an injected clock, or timed in bench/."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"{what} not met within {timeout}s")
