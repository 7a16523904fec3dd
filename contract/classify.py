"""Online or offline: which pods Colo may throttle, limit and evict (the agent) and how the extender scores
them (the controller); one implementation, so both always agree.

Offline when any rule holds (else online):
- annotation `volcano.sh/qos-level` is a negative integer in -7..-1 or `BE` (Volcano's named levels:
  LC/HLS = 2, LS = 1, BE = -1); any other value, non-integers and integers outside -7..7 included, is
  online, with a warning logged once per pod;
- label `koordinator.sh/qosClass=BE`;
- `spec.priorityClassName` is in the configured list, or `spec.priority` is below the threshold;
- a container (init containers too) requests or limits `kubernetes.io/batch-cpu` or
  `kubernetes.io/batch-memory`: the pod runs on reclaimed capacity (see `has_batch_resources`).
Pods with priority >= 2000000000 (system-node-critical/system-cluster-critical) are always online.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Mapping
from typing import Any, Literal

from contract.annotations import BATCH_CPU, BATCH_MEMORY, KOORD_QOS_CLASS, QOS_LEVEL

log = logging.getLogger(__name__)

QOS_LEVEL_ANNOTATION = QOS_LEVEL
KOORD_QOS_LABEL = KOORD_QOS_CLASS
CRITICAL_PRIORITY = 2_000_000_000
VOLCANO_NAMED_LEVELS = {"LC": 2, "HLS": 2, "LS": 1, "BE": -1}
DEFAULT_OFFLINE_CLASSES = ("koord-batch", "koord-free")
#: Pods remembered as warned about; past this the memory starts over (it holds what strangers send the
#: controller's extender, so it must stay bounded in count and, through `warn_key`, in size).
MAX_WARNED = 4096
_MAX_SHOWN = 80  # characters of an untrusted value in a log line

PodClassName = Literal["online", "offline"]
# ASCII digits only, as Volcano parses it: int() would also take '-0_1', '+1' and other scripts' digits
_LEVEL = re.compile(r"-?[0-9]+")


def qos_level(value: str) -> int | None:
    """Volcano's qos-level as an integer in -7..7, or None when malformed."""
    v = value.strip()
    if v in VOLCANO_NAMED_LEVELS:
        return VOLCANO_NAMED_LEVELS[v]
    if not _LEVEL.fullmatch(v) or len(v) > 12:  # a longer one is out of range anyway (and int() may refuse it)
        return None
    level = int(v)
    return level if -7 <= level <= 7 else None


def has_batch_resources(pod: Mapping[str, Any]) -> bool:
    """Whether any container (init containers too) requests or limits kubernetes.io/batch-cpu or -memory."""
    spec = pod.get("spec") or {}
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        res = c.get("resources") or {}
        for field in ("requests", "limits"):
            values = res.get(field) or {}
            if BATCH_CPU in values or BATCH_MEMORY in values:
                return True
    return False


def warn_key(meta: Mapping[str, Any]) -> str:
    """What a warning is remembered under: the UID (or namespace/name), cut to a UID's length and a bit."""
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")[:128]


def _clip(value: object) -> str:
    text = repr(value[: _MAX_SHOWN + 1] if isinstance(value, str) else value)
    return text if len(text) <= _MAX_SHOWN else f"{text[:_MAX_SHOWN]}…"


class Classifier:
    """Classifies pod objects (API JSON); remembers which pods it already warned about."""

    def __init__(
        self,
        offline_priority_classes: Collection[str] = DEFAULT_OFFLINE_CLASSES,
        offline_priority_below: int = 0,
    ) -> None:
        self.offline_priority_classes = frozenset(offline_priority_classes)
        self.offline_priority_below = offline_priority_below
        self._warned: set[str] = set()

    def classify(self, pod: Mapping[str, Any]) -> PodClassName:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        priority = spec.get("priority")
        if isinstance(priority, int) and not isinstance(priority, bool) and priority >= CRITICAL_PRIORITY:
            return "online"
        annotations = meta.get("annotations") or {}
        raw = annotations.get(QOS_LEVEL_ANNOTATION)
        if raw is not None:
            level = qos_level(str(raw))
            if level is None:
                self._warn_once(meta, raw)
            elif level < 0:
                return "offline"
        labels = meta.get("labels") or {}
        if labels.get(KOORD_QOS_LABEL) == "BE":
            return "offline"
        if spec.get("priorityClassName") in self.offline_priority_classes:
            return "offline"
        if isinstance(priority, int) and not isinstance(priority, bool) and priority < self.offline_priority_below:
            return "offline"
        if has_batch_resources(pod):
            return "offline"
        return "online"

    def _warn_once(self, meta: Mapping[str, Any], raw: object) -> None:
        uid = warn_key(meta)
        if uid in self._warned:
            return
        if len(self._warned) >= MAX_WARNED:
            self._warned.clear()
        self._warned.add(uid)
        log.warning(
            "pod %s/%s: annotation %s=%s is not an integer in -7..7 nor LC/HLS/LS/BE; treating the pod as online",
            str(meta.get("namespace"))[:_MAX_SHOWN],
            str(meta.get("name"))[:_MAX_SHOWN],
            QOS_LEVEL_ANNOTATION,
            _clip(raw),
        )

    def forget(self, live_uids: Collection[str]) -> None:
        """Drop warning memory of pods that are gone."""
        self._warned &= set(live_uids)
