"""The controller without a cluster: poll the agents named on the command line, plan crane's annotations,
hot values and scores exactly as a leader would, and keep them in memory instead of writing them.

Each node's annotations are what they would be had every planned patch been written, so the next cycle
plans from them exactly as the leader plans from its freshest node (controller.latest). No pods are known,
so hot values are 0. The ScoreBoard fed here is the one the extender answers from.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from common.config import ConfigError
from controller import load_annotations as ann
from controller.annotator import Annotator
from controller.config import ControllerConfig
from controller.extender import Extender
from controller.httpget import AgentClient
from controller.metrics import ControllerMetrics
from controller.policy import DynamicSchedulerPolicy
from controller.poller import AgentPoller
from controller.scoring import ScoreBoard, Scorer


def parse_agents(specs: list[str], default_path: str) -> dict[str, str]:
    """`--agent NAME=URL` values -> {node name: URL of its /api/v1/node}; ConfigError names the bad one.

    URL is the agent's base address (`http://127.0.0.2:9817`); a URL without a path gets `default_path`.
    """
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, url = spec.partition("=")
        if not sep or not name or not url:
            raise ConfigError(f"--agent {spec!r}: expected NAME=URL, e.g. node-a=http://127.0.0.2:9817")
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError:
            port = -1
        if parts.scheme != "http" or not parts.hostname or port == -1:
            raise ConfigError(f"--agent {spec!r}: URL must be http://HOST[:PORT][/PATH]")
        if name in out:
            raise ConfigError(f"--agent {spec!r}: node {name} is given twice")
        out[name] = url if parts.path not in ("", "/") else url.rstrip("/") + default_path
    return out


@dataclass(frozen=True, slots=True)
class NodeReport:
    """One node after one cycle: what the leader would have written and what the extender answers."""

    url: str
    annotations: dict[str, str]
    score: int
    overloaded: str | None
    hot_value: int
    would_patch: tuple[str, ...]
    error: str | None
    #: The batch capacity the agent computes and publishes (millicores, bytes), or None: then why not.
    capacity: tuple[int, int] | None = None
    capacity_off: str = ""

    def document(self) -> dict[str, Any]:
        if self.capacity is not None:
            over: dict[str, Any] = {"cpu_millicores": self.capacity[0], "memory_bytes": self.capacity[1]}
        else:
            over = {"enabled": False, "reason": self.capacity_off or None}
        return {
            "annotations": self.annotations,
            "score": self.score,
            "overloaded": self.overloaded,
            "hot_value": self.hot_value,
            "would_patch": list(self.would_patch),
            "oversubscription": over,
            "agent": self.url,
            "error": self.error,
        }


class StandaloneController:
    """Polls fixed agents; `cycle()` returns every node's report. Writes nothing anywhere."""

    def __init__(
        self,
        targets: Mapping[str, str],
        cfg: ControllerConfig,
        policy: DynamicSchedulerPolicy,
        *,
        clock: Callable[[], float] = time.time,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self.targets = dict(targets)
        self.cfg = cfg
        self.clock = clock
        self.metrics = metrics or ControllerMetrics()
        self.scorer = Scorer(policy.spec)
        self.board = ScoreBoard(self.scorer)
        self.annotator = Annotator(
            self.scorer,
            interval=cfg.polling.interval,
            min_change=cfg.writer.min_change,
            min_interval=cfg.writer.min_interval,
        )
        self.extender = Extender(self.board, cfg.classify, clock=clock, settings=cfg.extender, metrics=self.metrics)
        self.poller = AgentPoller(
            wanted=self.scorer.metric_names,
            concurrency=cfg.polling.concurrency,
            timeout=cfg.polling.timeout,
            max_response_bytes=cfg.polling.max_response_bytes,
            clock=clock,
            # agents kept connected from one cycle to the next, as in a cluster
            fetch=AgentClient(max_idle=cfg.polling.max_idle_connections),
        )
        self.annotations: dict[str, dict[str, str]] = {name: {} for name in self.targets}
        self.cycles = 0
        self.metrics.is_leader.set(1)  # the only replica: it plans every node

    async def cycle(self) -> dict[str, NodeReport]:
        """Poll every agent once, plan each node's patch, keep it as written, and report."""
        started = time.monotonic()
        result = await self.poller.poll_all(self.targets)
        now = self.clock()
        last_seconds = time.monotonic() - started
        reports: dict[str, NodeReport] = {}
        for name, url in self.targets.items():
            current = self.annotations[name]
            patch = self.annotator.plan(name, current, result.samples.get(name), 0, now, gap=last_seconds)
            for key, value in patch.items():  # None removes (the deprecated oversubscription copy)
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = value
            self.board.update_node({"metadata": {"name": name, "annotations": dict(current)}})
            verdict = self.board.verdict(name, now)
            score, overloaded = (verdict.score, verdict.overloaded) if verdict is not None else (0, None)
            self.metrics.node_score.labels(name).set(score)
            self.metrics.node_overloaded.labels(name).set(1 if overloaded else 0)
            error = result.errors.get(name)
            if error is not None and result.rejected.get(name) == "wrong_node":
                error += " (NAME in --agent NAME=URL must be the agent's node name: its --node-name or hostname)"
            sample = result.samples.get(name)
            published = sample.oversubscription if sample is not None else None
            reports[name] = NodeReport(
                url,
                dict(current),
                score,
                overloaded,
                0,
                tuple(sorted(patch)),
                error,
                capacity=(published.cpu_millicores, published.memory_bytes) if published is not None else None,
                capacity_off=sample.oversubscription_off if sample is not None else "",
            )
        self.metrics.count_polls(result.failed, result.rejected, len(result.samples))
        self.metrics.cycles.inc()
        self.metrics.cycle_duration.observe(time.monotonic() - started)
        self.cycles += 1
        return reports


def cycle_document(reports: Mapping[str, NodeReport], at: float) -> dict[str, Any]:
    """The `--output json` line of one cycle: `{"time": ..., "nodes": {NAME: {"annotations": ..., ...}}}`."""
    return {"time": ann.format_time(at), "nodes": {name: r.document() for name, r in reports.items()}}
