"""Poll every agent's `GET /api/v1/node` concurrently, with a fixed worker pool and per-request deadline.

Overload safety: the number of in-flight requests never exceeds `concurrency` (a fixed set of workers pulls
targets from a queue, so no per-node task is created), every request has a hard total deadline, and a
slow or broken agent only ever holds one worker for at most that deadline.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.annotations import Oversubscription
from controller.httpget import FetchError, http_get


@dataclass(frozen=True, slots=True)
class AgentSample:
    """One node's answer: usage ratios by crane window name (None = no data yet)."""

    node: str
    at: float
    windows: Mapping[str, float | None]
    oversubscription: Oversubscription | None


@dataclass(slots=True)
class PollResult:
    """Outcome of polling a set of targets."""

    samples: dict[str, AgentSample] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # node -> reason label
    errors: dict[str, str] = field(default_factory=dict)  # node -> detail, for logs


def _ratio(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("window value must be a number or null")
    return float(value)  # NaN/negatives are kept here; the annotation formatter zeroes them


def _nonneg_int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError("oversubscription fields must be numbers")
    return max(0, int(value))


def parse_sample(node: str, doc: object, wanted: Collection[str], at: float) -> AgentSample:
    """Validate the agent's JSON; ValueError on anything we cannot trust."""
    if not isinstance(doc, Mapping):
        raise ValueError("response is not a JSON object")
    reported = doc.get("node_name")
    if reported is not None and reported != node:
        raise ValueError(f"agent reports node {reported!r}")
    windows = doc.get("windows")
    if not isinstance(windows, Mapping):
        raise ValueError("missing 'windows' object")
    values: dict[str, float | None] = {}
    for name in wanted:
        entry = windows.get(name)
        if entry is None:
            values[name] = None
            continue
        if not isinstance(entry, Mapping):
            raise ValueError(f"windows.{name} is not an object")
        values[name] = _ratio(entry.get("value"))
    over: Oversubscription | None = None
    raw = doc.get("oversubscription")
    if isinstance(raw, Mapping):
        over = Oversubscription(_nonneg_int(raw.get("cpu_millicores", 0)), _nonneg_int(raw.get("memory_bytes", 0)))
    return AgentSample(node, at, values, over)


Fetch = Callable[[str, int], Any]  # async (url, limit) -> bytes


class AgentPoller:
    """Polls agents; one instance is reused across cycles."""

    def __init__(
        self,
        *,
        wanted: Collection[str],
        concurrency: int,
        timeout: float,
        max_response_bytes: int = 1 << 20,
        clock: Callable[[], float] = time.time,
        fetch: Fetch = http_get,
    ) -> None:
        self.wanted = tuple(wanted)
        self.concurrency = concurrency
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self.clock = clock
        self.fetch = fetch

    async def poll_one(self, node: str, url: str) -> AgentSample:
        """Fetch and parse one agent within the deadline; FetchError on failure."""
        try:
            async with asyncio.timeout(self.timeout):
                body = await self.fetch(url, self.max_response_bytes)
        except TimeoutError:
            raise FetchError("timeout", f"no complete answer within {self.timeout:g}s") from None
        at = self.clock()
        try:
            return parse_sample(node, json.loads(body), self.wanted, at)
        except (ValueError, UnicodeDecodeError, RecursionError) as err:
            raise FetchError("bad_payload", str(err)) from None

    async def poll_all(self, targets: Mapping[str, str]) -> PollResult:
        """Poll every target once; never more than `concurrency` at a time."""
        result = PollResult()
        queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        for item in targets.items():
            queue.put_nowait(item)

        async def worker() -> None:
            while True:
                try:
                    node, url = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                try:
                    result.samples[node] = await self.poll_one(node, url)
                except FetchError as err:
                    result.failed[node] = err.reason
                    result.errors[node] = str(err)
                except Exception as err:  # a bug in one poll must not stop the cycle
                    result.failed[node] = "internal"
                    result.errors[node] = repr(err)

        workers = [asyncio.create_task(worker()) for _ in range(min(self.concurrency, len(targets)))]
        try:
            await asyncio.gather(*workers)
        finally:
            for w in workers:
                w.cancel()
        return result
