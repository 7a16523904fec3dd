"""The standalone controller's live table (`make demo`): one row per node, redrawn in place on a terminal,
no wider than 100 columns unless asked (`--wide`), with a legend that says why the numbers move when they
do: crane's annotations are rewritten on the policy's sync periods, not at every poll."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass

from controller import load_annotations as ann
from controller.policy import PolicySpec
from controller.standalone import NodeReport

#: ANSI cursor home + clear screen: the live table redraws in place on a terminal.
CLEAR_SCREEN = "\x1b[H\x1b[2J"
#: The table's width without --wide: fits a default terminal with room to spare.
NARROW = 100


def plural(count: int, word: str) -> str:
    """`1 agent`, `3 agents`."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def short_name(metric: str) -> str:
    """`cpu_usage_avg_5m` -> `cpu 5m`, `mem_usage_max_avg_1h` -> `mem max1h` (crane's metric names)."""
    resource, _, window = metric.partition("_usage_")
    return f"{resource} {window.replace('max_avg_', 'max').replace('avg_', '')}" if window else metric


def duration(seconds: float) -> str:
    """`45s`, `2m41s`, `14m`, `2h59m`: a countdown as a person reads it."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s" if s % 60 and s < 600 else f"{s // 60}m"
    return f"{s // 3600}h" if s % 3600 == 0 else f"{s // 3600}h{(s % 3600) // 60:02d}m"


@dataclass(frozen=True, slots=True)
class Legend:
    """What the table's legend explains, from the policy: when each window is rewritten, the limits that
    filter a node out, and how often the agents are polled."""

    periods: Mapping[str, float]
    limits: Mapping[str, float]
    interval: float

    @classmethod
    def of(cls, spec: PolicySpec, interval: float) -> Legend:
        return cls(
            {s.name: s.period for s in spec.sync_policy},
            {p.name: p.max_limit_percent for p in spec.predicate if p.max_limit_percent > 0},
            interval,
        )


def column_heads(metric_names: tuple[str, ...]) -> list[str]:
    """`cpu 5m`, `max1h`, `max1d`, `mem 5m`, ...: the resource named once, where its columns start."""
    heads, last = [], ""
    for metric in metric_names:
        resource, _, window = short_name(metric).partition(" ")
        heads.append(window if resource == last and window else short_name(metric))
        last = resource
    return heads


def percent(annotation: str | None) -> str:
    """crane's `0.35212,<time>` as `35.2%`; `-` when there is no annotation yet."""
    if annotation is None:
        return "-"
    parsed = ann.parse_value(annotation)
    return "?" if parsed is None else f"{parsed[0] * 100:.1f}%"


def capacity(report: NodeReport, wide: bool) -> str:
    """The batch capacity the node's agent computes, or why it has none."""
    if report.capacity is not None:
        cpu, memory = report.capacity
        return f"{cpu}m, {memory / 2**30:.1f}Gi"
    if report.capacity_off and wide:
        return f"off ({report.capacity_off})"
    return "off" if report.capacity_off else "-"


def status(report: NodeReport, limits: Mapping[str, float], wide: bool) -> str:
    if report.error:
        return f"no answer: {report.error}"
    if report.overloaded:
        if wide:
            return f"filtered: {report.overloaded}"
        over = [m for m in limits if f"[{m}]" in report.overloaded]
        return f"filtered: {short_name(over[0])}" if over else "filtered"
    return "ok"


def fit(line: str, width: int | None) -> str:
    return line if width is None or len(line) <= width else line[: width - 1] + "…"


def table(
    reports: Mapping[str, NodeReport],
    metric_names: tuple[str, ...],
    at: float,
    legend: Legend | None = None,
    *,
    cycle: int = 0,
    wide: bool = False,
) -> str:
    """The table and its legend; every line at most NARROW columns unless `wide`."""
    width = None if wide else NARROW
    limits = legend.limits if legend is not None else {}
    heads = ["NODE", "SCORE", *column_heads(metric_names), "OVERSUB", "STATUS"]
    rows = [heads]
    for name, r in sorted(reports.items()):
        values = [percent(r.annotations.get(m)) for m in metric_names]
        rows.append([name, str(r.score), *values, capacity(r, wide), status(r, limits, wide)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(heads) - 1)]
    polled = f" polled every {legend.interval:g}s" if legend is not None else ""
    clock = ann.format_time(at).partition("T")[2]
    head = f"colo-controller standalone: {plural(len(reports), 'agent')}{polled}, cycle {cycle} at {clock}"
    lines = [fit(head + ", nothing written", width), ""]
    for row in rows:
        cells = [
            cell.rjust(w) if 0 < i < len(heads) - 2 else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=False))
        ]
        lines.append(fit("  ".join(cells) + "  " + row[-1], width))
    if legend is not None:
        lines += ["", *explain(reports, metric_names, at, legend, width or NARROW)]
    return "\n".join(lines)


def explain(
    reports: Mapping[str, NodeReport], metric_names: tuple[str, ...], at: float, legend: Legend, width: int
) -> list[str]:
    """The legend under the table: why a value holds still, what the score and the capacity are."""
    by_window = {short_name(m).partition(" ")[2]: legend.periods[m] for m in metric_names if m in legend.periods}
    every = ", ".join(f"{w} every {duration(p)}" for w, p in by_window.items())
    due: dict[str, float] = {}
    for r in reports.values():
        for m in metric_names:
            parsed = ann.parse_value(r.annotations[m]) if m in r.annotations else None
            if parsed is not None and m in legend.periods:
                due[m] = min(due.get(m, float("inf")), parsed[1] + legend.periods[m] - at)
    windows = list(dict.fromkeys(short_name(m).partition(" ")[2] for m in metric_names))
    soonest: dict[str, float] = {}
    for m, seconds in due.items():
        window = short_name(m).partition(" ")[2]
        soonest[window] = min(soonest.get(window, seconds), seconds)
    nxt = ", ".join(f"{w} in {duration(seconds)}" for w, seconds in soonest.items())
    limits = ", ".join(f"{short_name(m)} > {v * 100:g}%" for m, v in legend.limits.items())
    off = sorted({r.capacity_off for r in reports.values() if r.capacity_off})
    paragraphs = [
        f"Values: CPU busy and memory used, % of the node, over each window ({', '.join(windows)}; max1h: the "
        "highest 5-minute average of the last hour), as crane-scheduler would read them from the Node's "
        "annotations; '-': no value yet (a window needs that much history).",
        f"The agents are polled every {legend.interval:g}s, but an annotation is rewritten only on crane's sync "
        f"period: {every}. In between a column holds still." + (f" Next writes: {nxt}." if nxt else ""),
        "SCORE: crane's load score, 0-100: the free share of each window, weighted by the policy (a window with no "
        "value yet adds 0, so the score climbs as the longer windows appear), minus 10 x the hot value. "
        + (f"filtered: over a policy limit ({limits}): the scheduler skips the node." if limits else ""),
        "OVERSUB: the batch capacity (oversubscription) each agent computes for Volcano, cpu and memory"
        + (f"; off: {'; '.join(off)}." if off else "."),
    ]
    out: list[str] = []
    for text in paragraphs:
        out += textwrap.wrap(text, width)
    return out
