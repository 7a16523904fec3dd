"""Poll the agents' `GET /api/v1/pods` for per-pod usage, only on the nodes that are sources this cycle.

Why only there: the pod list is ~1.5 KB per pod against ~2 KB for a whole node document, so polling every
agent's pods each cycle would multiply the polling cost of 5000 nodes by the pods per node (x30: ~300 MB
per cycle). Pod usage is needed only to pick what to evict from a confirmed source, and only when a low
node can take something, so the controller asks just those agents, after the node poll.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from urllib.parse import urlsplit, urlunsplit

from controller.httpget import FetchError, http_get
from controller.rebalance.usage import PodUsage, pod_usages

Fetch = Callable[[str, int], Awaitable[bytes]]


def pods_url(node_url: str, path: str) -> str:
    """The agent's pod list next to its node document: same scheme, host and port, `path` instead."""
    parts = urlsplit(node_url)
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


async def fetch_pod_usages(
    targets: Mapping[str, str],
    nodes: Iterable[str],
    *,
    path: str,
    window: str,
    timeout: float,
    limit: int,
    concurrency: int,
    fetch: Fetch = http_get,
) -> tuple[dict[str, list[PodUsage]], dict[str, str]]:
    """(node -> pods' usage, node -> failure) for the nodes that have an agent URL in `targets`."""
    usages: dict[str, list[PodUsage]] = {}
    failed: dict[str, str] = {}
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(node: str, url: str) -> None:
        async with gate:
            try:
                async with asyncio.timeout(timeout):
                    body = await fetch(pods_url(url, path), limit)
                usages[node] = pod_usages(json.loads(body), window)
            except TimeoutError:
                failed[node] = "timeout"
            except FetchError as err:
                failed[node] = err.reason
            except (ValueError, UnicodeDecodeError, RecursionError):
                failed[node] = "bad_payload"

    wanted = [(n, targets[n]) for n in nodes if n in targets]
    for n in nodes:
        if n not in targets:
            failed[n] = "no_agent"
    await asyncio.gather(*(one(n, u) for n, u in wanted))
    return usages, failed
