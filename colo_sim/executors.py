"""Where the nodes are replayed: in this process, in `--jobs N` local processes, or on a Dask cluster
(`--cluster ADDRESS`). Each runs `colo_sim.replay.replay_node` on one node per task and yields the outcomes in
node order, so the merged result never depends on which node finished first.

At most `AHEAD` tasks per worker are in flight: a node's rows travel with its task (or are read by the worker
from the dataset), and the outcomes are merged as they arrive, so memory stays that of a few nodes.

Dask distributed rather than Ray: a platform team that runs batch jobs on Kubernetes already has it or can
start it with Dask's Kubernetes operator (one `DaskCluster` resource, docs/simulation.md); it is pure Python
(no daemon, no object store, a few MB), it speaks the same pyarrow filesystems and Parquet the dataset is
written in, and its per-task overhead (about a millisecond) is nothing beside a node's replay (a second or
more). Ray would bring a 100 MB wheel and its own object store for no gain on tasks this coarse.
"""

from __future__ import annotations

import collections
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from colo_sim.replay import NodeOutcome, NodeTask, replay_node

Executor = Callable[[Iterable[NodeTask]], Iterator[NodeOutcome]]

#: Tasks in flight per worker. The outcomes are taken in node order, so a slow node holds back the merge
#: while later ones finish: with 8 per worker a worker finds another node to replay meanwhile. What waits costs
#: little: a queued task is the node's file names, or a reference to rows the parent already holds (pickled only
#: when sent), and an outcome is a few numbers per policy.
AHEAD = 8


class ExecutorError(Exception):
    """The engine cannot be used (not installed, unreachable): one line for the user."""


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _ordered(
    submit: Callable[[NodeTask], Any], result: Callable[[Any], NodeOutcome], work: Iterable[NodeTask], window: int
) -> Iterator[NodeOutcome]:
    """Submit `work` with at most `window` tasks in flight and yield the outcomes in submission order."""
    pending: collections.deque[Any] = collections.deque()
    for task in work:
        pending.append(submit(task))
        if len(pending) >= window:
            yield result(pending.popleft())
    while pending:
        yield result(pending.popleft())


def local(jobs: int) -> Executor:
    """`jobs` processes on this machine (1: this process)."""

    def run(work: Iterable[NodeTask]) -> Iterator[NodeOutcome]:
        if jobs <= 1:
            yield from map(replay_node, work)
            return
        # forkserver: a worker never inherits the parent's threads (pyarrow's pools) in a forked state
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["colo_sim.replay"])
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:

            def result(future: Future[NodeOutcome]) -> NodeOutcome:
                try:
                    return future.result()
                except BrokenProcessPool as exc:  # a worker killed (out of memory, a signal)
                    raise ExecutorError(f"a replay process died: {exc}") from None

            yield from _ordered(lambda t: pool.submit(replay_node, t), result, work, AHEAD * jobs)

    return run


def dask(address: str) -> Executor:
    """The workers of the Dask scheduler at `address` (tcp://host:8786)."""
    try:
        from distributed import Client
    except ImportError:
        raise ExecutorError(
            "--cluster needs Dask distributed: .venv/bin/pip install -e '.[fleet]' in a clone"
        ) from None
    try:
        client = Client(address, timeout="20s", set_as_default=False)  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError, ValueError) as exc:
        raise ExecutorError(f"--cluster {address}: cannot reach the Dask scheduler: {exc}") from None
    workers = max(1, sum(info.get("nthreads", 1) for info in client.scheduler_info()["workers"].values()))

    def run(work: Iterable[NodeTask]) -> Iterator[NodeOutcome]:
        try:
            yield from _ordered(
                lambda t: client.submit(replay_node, t, pure=False), _dask_result, work, AHEAD * workers
            )
        finally:
            client.close()  # type: ignore[no-untyped-call]

    return run


def _dask_result(future: Any) -> NodeOutcome:
    """A task's outcome; the engine's own failures (a worker lost, the scheduler gone) as one line. An error
    of the replay itself (TraceError: a worker that cannot read the dataset) is re-raised as it is."""
    from distributed import KilledWorker

    from colo_sim.trace import TraceError

    try:
        outcome: NodeOutcome = future.result()
    except TraceError:
        raise
    except KilledWorker as exc:
        raise ExecutorError(f"Dask lost the workers replaying a node: {exc}") from None
    except (OSError, TimeoutError) as exc:
        raise ExecutorError(f"the Dask cluster failed: {exc}") from None
    return outcome
