"""The learned lending margin: the share of its lendable capacity a node lends, per resource, shrunk fast when
online usage enters capacity that was lent and grown back slowly.

A would-be violation is seen on the node itself: the online pods' usage of the last minute (`avg_1m` of the
node's online series) plus the usage outside pods is above allocatable minus what the previous pass lent. The
rule is additive increase, multiplicative decrease (Chiu and Jain, "Analysis of the increase and decrease
algorithms for congestion avoidance in computer networks", Computer Networks and ISDN Systems 17(1), 1989,
the rule TCP's congestion control follows: a cut fast enough to stop repeated overload, a slow probe back): on
such an event the factor is multiplied by
`decrease` 0.5 (at most once per 300 s, so a 1 s agent and a 300 s replay cut alike, as TCP
halves once per round trip); otherwise it grows by 0.05 × the hours passed; it stays
within [`margin_floor`, 1]. `margin_floor` 1 switches it off.

The factor is kept with the windows (their store's notes: saved in the state file, restored at start), so a
restart neither forgets a bad hour nor starts at the floor.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.windows.store import WindowStore, online_key


@dataclass(frozen=True, slots=True)
class MarginParams:
    decrease: float = 0.5
    increase_per_hour: float = 0.05
    floor: float = 0.2
    hold_seconds: float = 300.0


def note_key(resource: str) -> str:
    return f"margin/{resource}"


class LearnedMargin:
    """One resource's factor; `update` once a pass, before the pass lends. Not thread-safe: one pass at a time."""

    __slots__ = ("_cut_at", "_last", "factor", "lent", "params", "resource")

    def __init__(self, resource: str, params: MarginParams, factor: float = 1.0) -> None:
        self.resource = resource
        self.params = params
        self.factor = min(1.0, max(params.floor, factor))
        self._last: float | None = None  # the previous update's time
        self._cut_at = -float("inf")
        self.lent = 0.0  # what the latest pass lent (set by the caller): online usage entering it is an event

    @classmethod
    def restored(cls, resource: str, params: MarginParams, windows: WindowStore) -> LearnedMargin:
        """The factor the windows' notes kept (a restart), else 1."""
        return cls(resource, params, windows.notes.get(note_key(resource), 1.0))

    def update(self, now: float, online: float, system: float, allocatable: float) -> float:
        """The factor for this pass, from what the node's online pods and system use now (cores or bytes) and
        what the previous pass lent (`lent`)."""
        p = self.params
        lent_before = self.lent
        elapsed = 0.0 if self._last is None else max(0.0, now - self._last)
        self._last = now
        if lent_before > 0 and online + system > allocatable - lent_before:
            if now - self._cut_at >= p.hold_seconds:
                self.factor = max(p.floor, self.factor * p.decrease)
                self._cut_at = now
        else:
            self.factor = min(1.0, self.factor + p.increase_per_hour * elapsed / 3600.0)
        return self.factor

    def keep(self, windows: WindowStore) -> None:
        """Note the factor in the windows' store (saved with them); the caller holds its lock."""
        windows.notes[note_key(self.resource)] = self.factor


def online_now(windows: WindowStore, resource: str, now: float) -> float | None:
    """The online usage a would-be violation is judged on: the last minute's mean (one 1 s spike is not one);
    None without it (the caller takes the pass's own figure)."""
    return windows.value(online_key(resource), "avg_1m", now).value
