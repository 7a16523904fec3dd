"""The extender's pod classifier: the agent's own rules (agent.classify), so both sides always agree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from agent.classify import Classifier
from controller.config import ClassifySettings

PodClass = Literal["online", "offline"]


class PodClassifier:
    """Online/offline with the controller's configured knobs."""

    def __init__(self, cfg: ClassifySettings) -> None:
        self._classifier = Classifier(cfg.offline_priority_classes, cfg.offline_priority_below)

    def __call__(self, pod: Mapping[str, Any]) -> PodClass:
        return self._classifier.classify(pod)
