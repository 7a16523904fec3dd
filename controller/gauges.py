"""Every node's current score as gauges (`colo_controller_node_score`, `..._node_overloaded`), published
by every replica from its ScoreBoard; the series of a node that left the board are removed."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from controller.metrics import ControllerMetrics
from controller.scoring import ScoreBoard


class ScoreGauges:
    """`refresh()` is called from the polling loop only."""

    def __init__(self, board: ScoreBoard, metrics: ControllerMetrics, clock: Callable[[], float]) -> None:
        self.board = board
        self.metrics = metrics
        self.clock = clock
        self._nodes: set[str] = set()

    def refresh(self) -> None:
        now = self.clock()
        names = set(self.board.names())
        for gone in self._nodes - names:
            for gauge in (self.metrics.node_score, self.metrics.node_overloaded):
                with contextlib.suppress(KeyError):
                    gauge.remove(gone)
        for name in names:
            v = self.board.verdict(name, now)
            if v is not None:
                self.metrics.node_score.labels(name).set(v.score)
                self.metrics.node_overloaded.labels(name).set(1 if v.overloaded else 0)
        self._nodes = names
