"""`colo-sim --plot FILE.png`: the Pareto picture (violation rate against oracle fraction, per policy and
resource) and one node's online usage, oracle and colo capacity over time. Needs matplotlib (the optional
extra `sim` of the distribution colo-k8s), loaded only here and never by the agent.

Policies often land close together (volcano and koordinator; colo-annotation and colo), so every label is placed
where its box, as the renderer measures it, overlaps no other label and no marker; colo is drawn last, on top;
legends sit outside the data; the path written is said on stderr."""

from __future__ import annotations

import datetime
import math
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from colo_sim.replay import RESOURCES, Result

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.backend_bases import RendererBase
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation

#: each policy's colour and marker, the same on both panels (a name not here gets grey dots)
STYLE: dict[str, tuple[str, str]] = {
    "colo": ("#1f77b4", "*"),
    "colo-annotation": ("#ff7f0e", "h"),
    "oracle": ("#2ca02c", "D"),
    "koordinator": ("#d62728", "o"),
    "volcano": ("#9467bd", "s"),
    "nsigma": ("#8c564b", "^"),
    "percentile": ("#e377c2", "v"),
    "max": ("#7f7f7f", "P"),
}
#: marker sizes (scatter's `s`, points squared): colo's star larger than the rest, and on top
COLO_SIZE, OTHER_SIZE = 220.0, 50.0
LABEL_FONT = 8.0
#: where a label may go: 8 directions at growing distances (points) from its marker; a leader line from LEADER_PT
DIRECTIONS = ((1, 0), (1, 1), (0, 1), (-1, 1), (-1, 0), (-1, -1), (0, -1), (1, -1))
RADII_PT = (4.0, 10.0, 18.0, 28.0, 40.0, 54.0, 70.0)
LEADER_PT = 18.0
GAP_PX = 2.0  # the least space between two boxes


class PlotError(Exception):
    """The plot cannot be drawn (matplotlib missing, or the file cannot be written)."""


def install_hint() -> str:
    """The command that adds matplotlib to the very Python running colo-sim: the checkout's `sim` extra when run
    from a clone (the index's `colo` is an unrelated project, and Colo is not published there), else matplotlib."""
    python = shlex.quote(sys.executable)
    root = Path(__file__).resolve().parents[1]
    if (root / "pyproject.toml").is_file():
        return f"{python} -m pip install -e {shlex.quote(f'{root}[sim]')}"
    return f"{python} -m pip install 'matplotlib>=3.7'"


@dataclass(frozen=True, slots=True)
class Point:
    """A labelled marker: data coordinates and its radius in points (from scatter's size)."""

    name: str
    x: float
    y: float
    radius_pt: float


@dataclass(frozen=True, slots=True)
class Box:
    """An axis-aligned box in display pixels."""

    x0: float
    y0: float
    x1: float
    y1: float

    def overlap(self, other: Box, gap: float = 0.0) -> float:
        """The area shared with `other` grown by `gap` on each side (0: apart)."""
        w = min(self.x1, other.x1 + gap) - max(self.x0, other.x0 - gap)
        h = min(self.y1, other.y1 + gap) - max(self.y0, other.y0 - gap)
        return w * h if w > 0 and h > 0 else 0.0

    def distance(self, x: float, y: float) -> float:
        """From the point (x, y) to the nearest point of the box (0 inside)."""
        return math.hypot(max(self.x0 - x, 0.0, x - self.x1), max(self.y0 - y, 0.0, y - self.y1))

    def outside(self, frame: Box) -> float:
        """How much of this box lies outside `frame` (its area minus the part inside)."""
        return (self.x1 - self.x0) * (self.y1 - self.y0) - self.overlap(frame)


def _alignment(dx: int, dy: int) -> tuple[str, str]:
    horizontal = "left" if dx > 0 else "right" if dx < 0 else "center"
    return horizontal, "bottom" if dy > 0 else "top" if dy < 0 else "center"


def _text_box(cx: float, cy: float, w: float, h: float, dx: int, dy: int) -> Box:
    """The box of a w x h text whose anchor is (cx, cy), aligned away from its point along (dx, dy)."""
    x0 = cx if dx > 0 else cx - w if dx < 0 else cx - w / 2
    y0 = cy if dy > 0 else cy - h if dy < 0 else cy - h / 2
    return Box(x0, y0, x0 + w, y0 + h)


def place_labels(ax: Axes, points: Sequence[Point], renderer: RendererBase) -> list[Annotation]:
    """Label every point, in order (the first gets the best spots), at the nearest of DIRECTIONS x RADII_PT where
    its text's box, measured by `renderer`, stays inside the axes and overlaps no label placed before it and no
    marker; where no spot is free, the one that overlaps least. Beyond LEADER_PT a thin line leads to the point.
    Call once the layout is final: the boxes are in display pixels."""
    px = ax.figure.dpi / 72.0
    bb = ax.get_window_extent(renderer)
    frame = Box(bb.x0 + 1, bb.y0 + 1, bb.x1 - 1, bb.y1 - 1)
    centres = [tuple(ax.transData.transform((p.x, p.y))) for p in points]
    markers = [
        Box(cx - p.radius_pt * px, cy - p.radius_pt * px, cx + p.radius_pt * px, cy + p.radius_pt * px)
        for p, (cx, cy) in zip(points, centres, strict=True)
    ]
    placed: list[Box] = []
    labels: list[Annotation] = []
    for point, (cx, cy) in zip(points, centres, strict=True):
        probe = ax.text(0, 0, point.name, fontsize=LABEL_FONT)
        size = probe.get_window_extent(renderer)
        probe.remove()
        best: tuple[float, float, int, int, Box] | None = None
        for radius in RADII_PT:
            for dx, dy in DIRECTIONS:
                norm = math.hypot(dx, dy)
                ox, oy = dx / norm * (radius + point.radius_pt), dy / norm * (radius + point.radius_pt)
                box = _text_box(cx + ox * px, cy + oy * px, size.width, size.height, dx, dy)
                cost = box.outside(frame) + sum(box.overlap(o, GAP_PX) for o in (*placed, *markers))
                if best is None or cost < best[0]:
                    best = (cost, radius, dx, dy, box)
            if best is not None and best[0] == 0.0:
                break
        assert best is not None
        _, radius, dx, dy, box = best
        norm = math.hypot(dx, dy)
        offset = (dx / norm * (radius + point.radius_pt), dy / norm * (radius + point.radius_pt))
        ha, va = _alignment(dx, dy)
        # a leader line when the label is far from its marker, or nearer to another one than to its own
        nearest = min(range(len(centres)), key=lambda i: box.distance(*centres[i]))
        led = radius >= LEADER_PT or box.distance(cx, cy) > box.distance(*centres[nearest])
        leader = {"arrowstyle": "-", "lw": 0.6, "color": "0.35", "shrinkA": 1, "shrinkB": point.radius_pt * 0.8}
        label = ax.annotate(
            point.name,
            (point.x, point.y),
            xytext=offset,
            textcoords="offset points",
            ha=ha,
            va=va,
            fontsize=LABEL_FONT,
            zorder=6,
            annotation_clip=False,
            arrowprops=leader if led else None,
        )
        label.set_in_layout(False)
        placed.append(box)
        labels.append(label)
    return labels


def _order(names: Sequence[str]) -> list[str]:
    """colo first for its label (the best spot), drawn last for its marker (on top)."""
    return sorted(names, key=lambda n: (n != "colo", n != "colo-annotation"))


def draw_pareto(ax: Axes, result: Result, resource: str) -> list[Point]:
    """One resource's policies as markers (colo on top); the points to label, colo first."""
    top = max([0.01, *(f[resource]["violation_rate"] for f in result.policies.values())])
    points: list[Point] = []
    for name in reversed(_order(list(result.policies))):  # drawn colo last
        f = result.policies[name][resource]
        colour, marker = STYLE.get(name, ("0.5", "o"))
        size = COLO_SIZE if name == "colo" else OTHER_SIZE
        ax.scatter(
            f["oracle_fraction"],
            f["violation_rate"],
            s=size,
            c=colour,
            marker=marker,
            edgecolors="black" if name == "colo" else "none",
            linewidths=0.6,
            zorder=5 if name == "colo" else 3,
            label=name,
        )
        points.insert(0, Point(name, f["oracle_fraction"], f["violation_rate"], math.sqrt(size) / 2))
    ax.set_xlabel("oracle fraction (higher: lends more of what was safe)")
    ax.set_ylabel("violation rate (lower: safer)")
    ax.set_title(f"{resource}: policies against the peak oracle (\u2605 colo)")
    ax.set_xlim(-0.04, 1.1)
    ax.set_ylim(-0.12 * top, 1.15 * top)  # room for labels below the points at 0
    ax.grid(alpha=0.3)
    return points


def plot(result: Result, path: str, title: str = "") -> str:
    """Draw and write the picture; returns the absolute path written, which it also says on stderr."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotError(f"--plot needs matplotlib, which this Python lacks: {install_hint()}") from exc
    fig, _ = draw(result, title)
    try:
        fig.savefig(path, dpi="figure")
    except OSError as exc:
        raise PlotError(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        plt.close(fig)
    written = os.path.abspath(path)
    print(f"colo-sim: plot written to {written}", file=sys.stderr)
    return written


def draw(result: Result, title: str = "") -> tuple[Figure, list[list[Annotation]]]:
    """The figure (the caller closes it) and each Pareto panel's labels, placed on the final layout."""
    import matplotlib.pyplot as plt

    ex = result.example
    rows = 1 if ex is None else 2
    fig = plt.figure(figsize=(13, 4.6 * rows), dpi=110, layout="constrained")
    axes = fig.subplots(rows, 2, squeeze=False, gridspec_kw={"height_ratios": [1.15, 1][:rows]})
    scatter = [(ax, draw_pareto(ax, result, resource)) for ax, resource in zip(axes[0], RESOURCES, strict=True)]
    if ex is not None:
        times = [datetime.datetime.fromtimestamp(t, datetime.UTC) for t in ex.times]
        for ax, resource in zip(axes[1], RESOURCES, strict=True):
            scale = 1.0 if resource == "cpu" else float(1 << 30)
            ax.plot(times, [v / scale for v in ex.usage[resource]], lw=0.6, label="online usage")
            ax.plot(times, [v / scale for v in ex.oracle[resource]], lw=0.6, label="oracle L*")
            ax.plot(times, [v / scale for v in ex.colo[resource]], lw=0.6, label="colo L")
            ax.axhline(ex.allocatable[resource] / scale, color="grey", lw=0.8, ls="--", label="allocatable")
            ax.set_title(f"node {ex.name}: {resource}")
            ax.set_ylabel("cores" if resource == "cpu" else "GiB")
            ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        handles, names = axes[1][0].get_legend_handles_labels()  # one legend for both, below the data
        fig.legend(handles, names, loc="outside lower center", ncol=len(names), fontsize=9, frameon=False)
    if title:
        fig.suptitle(title)
    fig.draw_without_rendering()  # the layout, final before the labels are measured
    fig.set_layout_engine("none")  # and kept: the labels must not move the axes they were measured in
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    return fig, [place_labels(ax, points, renderer) for ax, points in scatter]
