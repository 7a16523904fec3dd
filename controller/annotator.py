"""Decide which annotations each node needs now: the heart of one cycle, pure and clock-driven.

- each syncPolicy metric is written when its annotation is missing, unreadable, or at least its own
  period old, and only from a sample polled in this cycle (a failing node keeps its last value, which
  ages out as crane expects);
- `node_hot_value` is written with any metric, when it changed, or early enough that the next chance to
  rewrite it (one cycle gap later, plus polling and writing) still comes before crane's 5 minutes are up;
- the deprecated `colo.io/oversubscription` (a copy of the agent's `volcano.sh/oversubscription-*`) rides
  along with metric writes (or when missing/stale) only with `legacy_oversubscription`; otherwise a node
  that still carries it has it removed with its next patch;
- `colo.io/load-score` is written when the node's score (computed on the annotations after this patch)
  differs from the published one, and rides along with any other write.
All changed keys of one node go into one merge patch.
"""

from __future__ import annotations

from collections.abc import Mapping

from controller import annotations as ann
from controller.poller import AgentSample
from controller.scoring import HOT_VALUE_ACTIVE_PERIOD, MAX_POLLING_INTERVAL, REFRESH_MARGIN, Scorer

__all__ = ["MAX_POLLING_INTERVAL", "REFRESH_MARGIN", "Annotator"]


class Annotator:
    """Plans patches from a node's current annotations.

    `current` must be the freshest known state of the node, our own latest patch included (see
    controller.latest): an annotation we have written but the informer has not shown yet would otherwise
    look missing and be written again.
    """

    def __init__(self, scorer: Scorer, *, interval: float = 30.0, legacy_oversubscription: bool = False) -> None:
        self.scorer = scorer
        self.interval = interval
        self.legacy_oversubscription = legacy_oversubscription
        self.periods = {s.name: s.period for s in scorer.spec.sync_policy}
        self.shortest = min(self.periods.values(), default=180.0)

    def refresh(self, gap: float | None = None) -> float:
        """Age at which the hot value and oversubscription are rewritten, given `gap` seconds to the next cycle.

        crane trusts `node_hot_value` for 5 minutes only, and we see the node again only a cycle later
        (the polling interval, or longer when cycles overrun), so the value is rewritten once it is older
        than 5 minutes minus that gap minus REFRESH_MARGIN; never later than the shortest sync period.
        """
        gap = self.interval if gap is None else max(gap, self.interval)
        return max(0.0, min(self.shortest, HOT_VALUE_ACTIVE_PERIOD - gap - REFRESH_MARGIN))

    @staticmethod
    def _stamp(raw: str | None) -> float | None:
        return ann.parse_time(raw.rsplit(",", 1)[-1]) if raw is not None else None

    def plan(
        self,
        node: str,
        current: Mapping[str, str],
        sample: AgentSample | None,
        hot_value: int,
        now: float,
        *,
        gap: float | None = None,
    ) -> dict[str, str | None]:
        """The annotations to patch on `node` now (None: remove; empty: nothing to do); `gap`: see `refresh`."""
        refresh = self.refresh(gap)
        patch: dict[str, str] = {}
        if sample is not None:
            for name, period in self.periods.items():
                value = sample.windows.get(name)
                if value is None:
                    continue
                last = self._stamp(current.get(name))
                if last is None or now - last >= period or ann.parse_value(current.get(name, "")) is None:
                    patch[name] = ann.format_value(value, sample.at)

        hot_raw = current.get(ann.HOT_VALUE)
        hot_parsed = ann.parse_value(hot_raw) if hot_raw is not None else None
        hot_last = self._stamp(hot_raw)
        if (
            patch
            or hot_parsed is None
            or hot_parsed[0] != float(hot_value)
            or hot_last is None
            or now - hot_last >= refresh
        ):
            patch[ann.HOT_VALUE] = ann.format_value(float(hot_value), now)

        if self.legacy_oversubscription and sample is not None and sample.oversubscription is not None:
            over_raw = current.get(ann.OVERSUBSCRIPTION)
            over_last = self._stamp(over_raw)
            over_parsed = ann.parse_oversubscription(over_raw) if over_raw is not None else None
            if (
                any(k in self.periods for k in patch)
                or over_parsed is None
                or over_last is None
                or now - over_last >= refresh
            ):
                patch[ann.OVERSUBSCRIPTION] = ann.format_oversubscription(sample.oversubscription, sample.at)

        merged = {**current, **patch}
        score = self.scorer.evaluate(node, self.scorer.parse(merged), now).score
        score_raw = current.get(ann.LOAD_SCORE)
        published: int | None = None
        if score_raw is not None:
            head = score_raw.split(",", 1)[0]
            published = int(head) if head.isdigit() else None
        if patch or published != score:
            patch[ann.LOAD_SCORE] = ann.format_score(score, now)
        out: dict[str, str | None] = dict(patch)
        if patch and not self.legacy_oversubscription and ann.OVERSUBSCRIPTION in current:
            out[ann.OVERSUBSCRIPTION] = None  # the deprecated copy goes with the next write
        return out
