"""Poll every agent's `GET /api/v1/node` concurrently, with a fixed worker pool and per-request deadline.

Overload safety: the number of in-flight requests never exceeds `concurrency` (a fixed set of workers pulls
targets from a queue, so no per-node task is created), every request has a hard total deadline, and a
slow or broken agent only ever holds one worker for at most that deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from contract.agent_api import DocumentRejected, clamp_ratio, parse_node_document
from controller.httpget import FetchError, http_get
from controller.load_annotations import Oversubscription


@dataclass(frozen=True, slots=True)
class AgentSample:
    """One node's answer: usage ratios 0..1 by crane window name (None = no data yet), and the capacity the
    agent publishes on its Node (None while oversubscription is off there)."""

    node: str
    at: float
    windows: Mapping[str, float | None]
    oversubscription: Oversubscription | None
    #: Why the agent publishes no capacity ("standalone: ..."), from its document; "" when it publishes.
    oversubscription_off: str = ""


@dataclass(slots=True)
class PollResult:
    """Outcome of polling a set of targets."""

    samples: dict[str, AgentSample] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # node -> reason label
    errors: dict[str, str] = field(default_factory=dict)  # node -> detail, for logs
    rejected: dict[str, str] = field(default_factory=dict)  # node -> why its document was rejected (REASONS)


class SampleRejected(FetchError):
    """The agent answered, but its document cannot be trusted: polling fails with `bad_payload`, and
    `rejection` (one of contract.agent_api.REASONS) says why."""

    def __init__(self, rejection: str, detail: str) -> None:
        super().__init__("bad_payload", f"{rejection}: {detail}")
        self.rejection = rejection


def parse_sample(node: str, body: bytes | str, wanted: Collection[str], at: float) -> AgentSample:
    """Validate the agent's /api/v1/node with the contract's model; SampleRejected on anything we cannot
    trust (a missing or renamed field, a wrong type, NaN, a ratio outside 0..1, capacity beyond the node's),
    so a bad number is never written. `wanted` must be among contract.windows.NODE_WINDOW_KEYS."""
    try:
        doc = parse_node_document(body)
    except DocumentRejected as err:
        raise SampleRejected(err.reason, str(err)) from None
    if doc.node_name is not None and doc.node_name != node:
        raise SampleRejected("wrong_node", f"agent reports node {doc.node_name[:64]!r}")
    windows = doc.windows
    values: dict[str, float | None] = {}
    for name in wanted:
        value = windows[name].value
        values[name] = None if value is None else clamp_ratio(value)
    over = doc.oversubscription
    published: Oversubscription | None = None
    if over.enabled and over.cpu_millicores is not None and over.memory_bytes is not None:
        published = Oversubscription(over.cpu_millicores, over.memory_bytes)
    return AgentSample(node, at, values, published, "" if published is not None else over.reason)


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
        return parse_sample(node, body, self.wanted, self.clock())

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
                    if isinstance(err, SampleRejected):
                        result.rejected[node] = err.rejection
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
