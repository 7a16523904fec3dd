"""Decide which annotations each node needs now: the heart of one cycle, pure and clock-driven.

A node is written only when what crane would read before our next chance to write differs from what it
should read (issue 22: the controller's writes are API load on every node, every hour):

- the load metrics (syncPolicy) are written, all together from this cycle's sample, when one of them is
  missing or unreadable, would expire (crane trusts it until its stamp + period + 5 minutes) before the
  next cycle could renew it, moved by `min_change` or more since it was written (at most once per
  `min_interval`), or crossed a predicate's limit (at once: that changes where pods may go). Noise below
  `min_change` is not written; only a sample polled in this cycle is (a failing node keeps its last values,
  which age out as crane expects);
- `node_hot_value` is written when crane would read another value before the next cycle: it changed, or a
  non-zero value would expire (crane reads an expired hot value as 0, so a 0 is never refreshed); it rides
  along with any other write;
- the deprecated `colo.io/oversubscription` (a copy of the agent's `volcano.sh/oversubscription-*`) rides
  along with metric writes (or when missing/stale) only with `legacy_oversubscription`; otherwise a node
  that still carries it has it removed with its next patch;
- `colo.io/load-score` is written when the node's score (computed on the annotations after this patch)
  differs from the published one, and rides along with any other write.
All changed keys of one node go into one merge patch.
"""

from __future__ import annotations

from collections.abc import Mapping

from controller import load_annotations as ann
from controller.poller import AgentSample
from controller.scoring import (
    EXTRA_ACTIVE_PERIOD,
    HOT_VALUE_ACTIVE_PERIOD,
    MAX_POLLING_INTERVAL,
    REFRESH_MARGIN,
    Scorer,
)

__all__ = ["MAX_POLLING_INTERVAL", "REFRESH_MARGIN", "Annotator", "write_margin"]

#: Slack on top of the measured parts of `write_margin` (scheduling, the clock's second granularity).
MARGIN_SLACK = 5.0


def write_margin(poll_timeout: float, nodes: int, qps: float) -> float:
    """How long after a cycle's start its writes may land: the slowest poll, then `nodes` patches drained
    at `qps`, plus MARGIN_SLACK; never more than REFRESH_MARGIN (the bound the polling interval's limit
    assumes). A small cluster renews its annotations later, so less often, than 5000 nodes must."""
    return min(REFRESH_MARGIN, poll_timeout + nodes / qps + MARGIN_SLACK)


class Annotator:
    """Plans patches from a node's current annotations.

    `current` must be the freshest known state of the node, our own latest patch included (see
    controller.latest): an annotation we have written but the informer has not shown yet would otherwise
    look missing and be written again.
    """

    def __init__(
        self,
        scorer: Scorer,
        *,
        interval: float = 30.0,
        legacy_oversubscription: bool = False,
        min_change: float = 0.05,
        min_interval: float = 120.0,
    ) -> None:
        self.scorer = scorer
        self.interval = interval
        self.legacy_oversubscription = legacy_oversubscription
        self.min_change = min_change
        self.min_interval = min_interval
        self.periods = {s.name: s.period for s in scorer.spec.sync_policy}
        self.shortest = min(self.periods.values(), default=180.0)
        #: metric -> the predicate limits crane compares it with (`usage > limit` filters the node)
        self.limits: dict[str, tuple[float, ...]] = {}
        for p in scorer.spec.predicate:
            if p.name in self.periods and p.max_limit_percent != 0:
                self.limits[p.name] = (*self.limits.get(p.name, ()), p.max_limit_percent)

    def lookahead(self, gap: float | None = None, margin: float = REFRESH_MARGIN) -> float:
        """Seconds until a value written at the next chance lands: one cycle gap (the polling interval, or
        longer while cycles overrun) plus `margin` for that cycle's own polling and the writer's queue."""
        return (self.interval if gap is None else max(gap, self.interval)) + margin

    def refresh(self, gap: float | None = None, margin: float = REFRESH_MARGIN) -> float:
        """Age at which a non-zero `node_hot_value` (crane trusts it for 5 minutes) is rewritten."""
        return max(0.0, HOT_VALUE_ACTIVE_PERIOD - self.lookahead(gap, margin))

    @staticmethod
    def _stamp(raw: str | None) -> float | None:
        return ann.parse_time(raw.rsplit(",", 1)[-1]) if raw is not None else None

    def _metric_due(self, name: str, raw: str | None, value: float, now: float, ahead: float) -> bool:
        """Whether metric `name` must be written now, given its published text `raw` and the new `value`."""
        parsed = ann.parse_value(raw) if raw is not None else None
        if parsed is None:
            return True
        published, stamp = parsed
        if now + ahead >= stamp + self.periods[name] + EXTRA_ACTIVE_PERIOD:
            return True  # it would expire before the next cycle could renew it
        new = ann.sanitize_ratio(value)
        if any((published > limit) != (new > limit) for limit in self.limits.get(name, ())):
            return True  # crossed a predicate's limit: the filter's answer changes
        moved = abs(new - published) >= self.min_change - 1e-9  # 5 decimals are written: no float dust
        return moved and now - stamp >= self.min_interval

    def plan(
        self,
        node: str,
        current: Mapping[str, str],
        sample: AgentSample | None,
        hot_value: int,
        now: float,
        *,
        gap: float | None = None,
        margin: float = REFRESH_MARGIN,
    ) -> dict[str, str | None]:
        """The annotations to patch on `node` now (None: remove; empty: nothing to do); `gap` and `margin`:
        see `lookahead`."""
        ahead = self.lookahead(gap, margin)
        patch: dict[str, str] = {}
        if sample is not None:
            values = {name: v for name in self.periods if (v := sample.windows.get(name)) is not None}
            if any(self._metric_due(name, current.get(name), v, now, ahead) for name, v in values.items()):
                patch = {name: ann.format_value(v, sample.at) for name, v in values.items()}

        hot_raw = current.get(ann.HOT_VALUE)
        hot_parsed = ann.parse_value(hot_raw) if hot_raw is not None else None
        # what crane reads once our next chance to write has passed: an expired value reads as 0
        hot_then = 0.0
        if hot_parsed is not None and now + ahead < hot_parsed[1] + HOT_VALUE_ACTIVE_PERIOD:
            hot_then = hot_parsed[0]
        hot_now = hot_parsed[0] if hot_parsed is not None and now < hot_parsed[1] + HOT_VALUE_ACTIVE_PERIOD else 0.0
        if patch or hot_then != float(hot_value) or hot_now != float(hot_value):
            patch[ann.HOT_VALUE] = ann.format_value(float(hot_value), now)

        if self.legacy_oversubscription and sample is not None and sample.oversubscription is not None:
            over_raw = current.get(ann.OVERSUBSCRIPTION)
            over_last = self._stamp(over_raw)
            over_parsed = ann.parse_oversubscription(over_raw) if over_raw is not None else None
            if (
                any(k in self.periods for k in patch)
                or over_parsed is None
                or over_last is None
                or now - over_last >= min(self.shortest, self.refresh(gap, margin))
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
