"""The extender's pod classifier: the agent's own rules (contract.classify), so both sides always agree.

The agent's Classifier warns once per pod about a malformed `volcano.sh/qos-level` and remembers which
pods it warned about until told which pods are still alive. The agent knows its node's pods; the
extender only sees the pods it is asked about, so here "alive" means "asked about within the last
`forget_after` seconds": a pod that keeps failing to schedule is warned about once, and the memory of
pods that were scheduled (or deleted) is dropped instead of growing for as long as the controller runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from contract.classify import MAX_WARNED, QOS_LEVEL_ANNOTATION, Classifier, warn_key
from controller.config import ClassifySettings

PodClass = Literal["online", "offline"]

#: How long a pod must go unseen before its warning is forgotten (it may then be warned about again).
FORGET_AFTER = 600.0


class PodClassifier:
    """Online/offline with the controller's configured knobs."""

    def __init__(
        self,
        cfg: ClassifySettings,
        *,
        forget_after: float = FORGET_AFTER,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._classifier = Classifier(cfg.offline_priority_classes, cfg.offline_priority_below)
        self.forget_after = forget_after
        self._monotonic = monotonic
        self._seen: set[str] = set()  # pods with a qos-level annotation asked about since the last sweep
        self._swept = monotonic()
        self._lock = threading.Lock()

    def __call__(self, pod: Mapping[str, Any]) -> PodClass:
        meta = pod.get("metadata")
        if isinstance(meta, Mapping):
            anns = meta.get("annotations")
            if isinstance(anns, Mapping) and QOS_LEVEL_ANNOTATION in anns:
                with self._lock:
                    if len(self._seen) < MAX_WARNED:  # bounded: every key is cut to 128 characters
                        self._seen.add(warn_key(meta))
        self._sweep()
        return self._classifier.classify(pod)

    def _sweep(self) -> None:
        """Every `forget_after`, forget warnings about pods not asked about since the previous sweep."""
        now = self._monotonic()
        with self._lock:
            if now - self._swept < self.forget_after:
                return
            self._classifier.forget(self._seen)
            self._seen = set()
            self._swept = now
