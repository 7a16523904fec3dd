"""colo-sim --plot as a reader sees it: no label overlaps another label or a marker, every label inside its
panel (measured by matplotlib's own renderer), colo's marker drawn on top of the others, and the path
written said on stderr."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from colo_sim.policies import POLICY_NAMES
from colo_sim.replay import RESOURCES, Result

pytest.importorskip("matplotlib")

from matplotlib.collections import PathCollection
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from colo_sim.plot import draw, plot


def result(points: dict[str, tuple[float, float]]) -> Result:
    """Every policy at the same (oracle fraction, violation rate) on both resources."""
    policies = {
        name: {r: {"lent": 1.0, "oracle_fraction": x, "violation_rate": y, "violation_p99": 0.0} for r in RESOURCES}
        for name, (x, y) in points.items()
    }
    return Result(nodes=1, pods=1, steps=10, horizon_s=3600.0, step_s=300.0, skipped_rows={}, policies=policies)


#: the crowded cases: policies that nearly coincide (the shared trace's memory panel: volcano, koordinator and
#: colo within 0.06 at 0; here all of them within 0.01), and colo exactly on koordinator
CROWDED = {
    "nearly-coinciding": {name: (0.60 + 0.0015 * i, 0.0) for i, name in enumerate(POLICY_NAMES)},
    "colo-on-koordinator": {
        **{name: (0.2 + 0.1 * i, 0.02 * i) for i, name in enumerate(POLICY_NAMES)},
        "colo": (0.5, 0.01),
        "koordinator": (0.5, 0.01),
        "volcano": (0.505, 0.0102),
    },
}


@pytest.mark.parametrize("case", sorted(CROWDED))
def test_no_label_overlaps_a_label_or_a_marker_and_colo_is_on_top(case: str) -> None:
    import matplotlib.pyplot as plt

    fig, panels = draw(result(CROWDED[case]))
    try:
        fig.canvas.draw()  # as savefig renders it: the annotations' text positions are set while drawing
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        assert len(panels) == len(RESOURCES)
        for labels in panels:
            ax = labels[0].axes
            assert ax is not None
            assert sorted(label.get_text() for label in labels) == sorted(POLICY_NAMES)
            boxes = {label.get_text(): Text.get_window_extent(label, renderer) for label in labels}  # the text alone
            for (a, box_a), (b, box_b) in itertools.combinations(boxes.items(), 2):
                assert not box_a.overlaps(box_b), f"{a} and {b} overlap: {box_a} {box_b}"
            frame = ax.get_window_extent(renderer)
            for name, box in boxes.items():
                assert frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1), f"{name} leaves its panel"
            markers = [c for c in ax.collections if isinstance(c, PathCollection)]
            assert len(markers) == len(POLICY_NAMES)
            for coll in markers:  # a marker's box: its centre on screen, half its size (s is in points squared)
                ((cx, cy),) = coll.get_offset_transform().transform(coll.get_offsets())
                half = math.sqrt(coll.get_sizes()[0]) / 2 * fig.dpi / 72
                mark = Bbox.from_extents(cx - half, cy - half, cx + half, cy + half)
                for name, box in boxes.items():
                    assert not box.overlaps(mark), f"the label {name} covers the marker of {coll.get_label()}"
            top = max(markers, key=lambda c: c.get_zorder())
            assert top.get_label() == "colo" and sum(c.get_zorder() == top.get_zorder() for c in markers) == 1
    finally:
        plt.close(fig)


def test_the_path_written_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "p.png"
    written = plot(result(CROWDED["nearly-coinciding"]), str(png))
    assert written == str(png) and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert capsys.readouterr().err == f"colo-sim: plot written to {png}\n"
