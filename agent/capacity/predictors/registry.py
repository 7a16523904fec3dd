"""The capacity predictors' registry: the agent's configuration, its generated reference and colo-sim all read
this one list (`names`), and `agent.capacity.lendable` calls a predictor by name, with no special case.

A predictor is a pure function of one `Reading` (the windows, the pass's time and resource, its online pods,
the parameters) to a `Prediction`: the online pods' peak over the coming hour, the seconds of history behind it
(the cold-start rule of `lendable` trusts it in proportion) and, for a per-pod predictor, the reclaimable
capacity by its own rule. Each module registers its predictor once, with its place in the listing order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent.capacity.params import CapacityParams, OnlinePod
from agent.windows.grid import RAW_SPAN, WINDOW_SPANS, WindowValue
from agent.windows.store import SeriesKey, WindowStore
from common.plugins import check_new


@dataclass(slots=True)
class Reading:
    """What a predictor may read in one pass for one resource (cores or bytes); the caller holds the lock. Not
    frozen, as `Prediction`: one of each per resource and pass (per policy and step in colo-sim's replay), and a
    frozen dataclass's `__init__` sets each field through `object.__setattr__`."""

    windows: WindowStore
    now: float
    resource: str
    pods: Sequence[OnlinePod]
    params: CapacityParams
    #: predictions already made for this pass and resource with the same parameters but the predictor, by
    #: predictor name (colo-sim replays several predictors over one store: `max` then reuses `nsigma`'s and
    #: `rc_like`'s); None: none shared (the agent, one predictor a resource)
    shared: dict[str, Prediction] | None = None


@dataclass(slots=True)
class Prediction:
    peak: float  # the online pods' predicted peak
    history: float  # seconds of history behind it (0: none; the cold-start rule weighs the peak by it)
    reclaimable: float | None = None  # a per-pod rule's Σ max(0, request − peak); None: Σ requests − peak


Predict = Callable[[Reading], Prediction]


@dataclass(frozen=True, slots=True)
class PredictorSpec:
    name: str
    order: int  # its place in listings (the reference, colo-sim's help)
    predict: Predict
    #: reads each pod's own series (colo-sim then feeds them); a node-level predictor instead has lendable add
    #: young pods' unused requests
    per_pod: bool
    #: lends only what online pods requested and do not use, under both publishing models (the rule of
    #: `pod_peaks`, kept to compare)
    requested_only: bool = False


_SPECS: dict[str, PredictorSpec] = {}


def register(name: str, predict: Predict, *, order: int, per_pod: bool = False, requested_only: bool = False) -> None:
    """Called once per predictor by its module; a second predictor of the same name, or at an order taken, is a
    mistake."""
    check_new("predictor", name, order, {s.name: s.order for s in _SPECS.values()})
    _SPECS[name] = PredictorSpec(name, order, predict, per_pod, requested_only)


def unregister(name: str) -> None:
    _SPECS.pop(name, None)


def specs() -> tuple[PredictorSpec, ...]:
    """Every registered predictor in order (importing agent.capacity.predictors registers them all)."""
    return tuple(sorted(_SPECS.values(), key=lambda s: s.order))


def predict(name: str, r: Reading) -> Prediction:
    """The prediction of the predictor `name` for `r`, made once per `r.shared` when it is given."""
    shared = r.shared
    if shared is None:
        return spec(name).predict(r)
    got = shared.get(name)
    if got is None:
        got = shared[name] = spec(name).predict(r)
    return got


def names() -> tuple[str, ...]:
    return tuple(s.name for s in specs())


def spec(name: str) -> PredictorSpec:
    """The predictor called `name`; KeyError naming the registered ones when there is none."""
    got = _SPECS.get(name)
    if got is None:
        raise KeyError(f"unknown predictor {name!r} (registered: {', '.join(names())})")
    return got


# -- what several predictors read -----------------------------------------------------------------------


def seen_seconds(window: str, wv: WindowValue, avg5: WindowValue) -> float:
    """Seconds of history that `wv` (the window `window`) and the current 5-minute average `avg5` cover."""
    return max(wv.coverage * WINDOW_SPANS[window], avg5.coverage * RAW_SPAN)


#: The window a series' history is measured over. Not the window a predictor reads: an hour's coverage stays
#: below 1 for an hour after any gap longer than the store's `max_gap` (an agent's restart), so a predictor
#: reading the hour would count as young for that hour whenever `min_history_seconds` is an hour.
HISTORY_WINDOW = "max_avg_1d"


def history(windows: WindowStore, key: SeriesKey, now: float) -> float:
    """Seconds of `key`'s history over the last day (the day window's coverage, or the current 5-minute
    average's): how long the series has been watched, a gap costing only its own length."""
    day, avg5 = windows.values(key, (HISTORY_WINDOW, "avg_5m"), now)
    return seen_seconds(HISTORY_WINDOW, day, avg5)


def window_peak(windows: WindowStore, key: SeriesKey, now: float, window: str) -> tuple[float | None, float]:
    """max(`window`, the current 5-minute average) of `key` (None without data) and the history behind it (over
    the day, as `history`): the max-of-averages windows see the minute in progress only at its end, a pod that
    grows now counts at once."""
    if window == HISTORY_WINDOW:
        wv, avg5 = windows.values(key, (window, "avg_5m"), now)
        day = wv
    else:
        wv, avg5, day = windows.values(key, (window, "avg_5m", HISTORY_WINDOW), now)
    a, b = wv.value, avg5.value
    peak = b if a is None else a if b is None or a >= b else b
    return peak, seen_seconds(HISTORY_WINDOW, day, avg5)


def requested(pods: Sequence[OnlinePod]) -> float:
    """Σ max(request, usage): what online pods may take when nothing is known of their peaks."""
    return sum(max(p.request, p.usage) for p in pods)


def pod_key(uid: str, resource: str) -> SeriesKey:
    return ("pod", uid, resource)
