"""The agent's pod classes: the rules live in contract.classify, shared with the controller."""

from contract.classify import (
    CRITICAL_PRIORITY,
    DEFAULT_OFFLINE_CLASSES,
    KOORD_QOS_LABEL,
    QOS_LEVEL_ANNOTATION,
    VOLCANO_NAMED_LEVELS,
    Classifier,
    PodClassName,
    qos_level,
)

__all__ = [
    "CRITICAL_PRIORITY",
    "DEFAULT_OFFLINE_CLASSES",
    "KOORD_QOS_LABEL",
    "QOS_LEVEL_ANNOTATION",
    "VOLCANO_NAMED_LEVELS",
    "Classifier",
    "PodClassName",
    "qos_level",
]
