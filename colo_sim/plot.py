"""`colo-sim --plot FILE.png`: the Pareto picture (violation rate against oracle fraction, per policy and
resource) and one node's online usage, oracle and colo capacity over time. Needs matplotlib (the optional
extra `sim` of the distribution colo-k8s), loaded only here and never by the agent."""

from __future__ import annotations

import datetime
import shlex
import sys
from pathlib import Path

from colo_sim.replay import RESOURCES, Result


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


def plot(result: Result, path: str, title: str = "") -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotError(f"--plot needs matplotlib, which this Python lacks: {install_hint()}") from exc
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5), gridspec_kw={"height_ratios": [1.1, 1]})
    for ax, resource in zip(axes[0], RESOURCES, strict=True):
        for name, figures in result.policies.items():
            f = figures[resource]
            ax.scatter(f["oracle_fraction"], f["violation_rate"], s=60 if name.startswith("colo") else 35,
                       marker="*" if name == "colo" else "o", zorder=3)  # fmt: skip
            ax.annotate(name, (f["oracle_fraction"], f["violation_rate"]), textcoords="offset points",
                        xytext=(5, 4), fontsize=8)  # fmt: skip
        ax.set_xlabel("oracle fraction (higher: lends more of what was safe)")
        ax.set_ylabel("violation rate (lower: safer)")
        ax.set_title(f"{resource}: policies against the peak oracle")
        ax.set_xlim(-0.02, 1.05)
        ax.set_ylim(bottom=-0.005)
        ax.grid(alpha=0.3)
    ex = result.example
    if ex is not None:
        times = [datetime.datetime.fromtimestamp(t, datetime.UTC) for t in ex.times]
        for ax, resource in zip(axes[1], RESOURCES, strict=True):
            scale = 1.0 if resource == "cpu" else float(1 << 30)
            unit = "cores" if resource == "cpu" else "GiB"
            ax.plot(times, [v / scale for v in ex.usage[resource]], lw=0.6, label="online usage")
            ax.plot(times, [v / scale for v in ex.oracle[resource]], lw=0.6, label="oracle L*")
            ax.plot(times, [v / scale for v in ex.colo[resource]], lw=0.6, label="colo L")
            ax.axhline(ex.allocatable[resource] / scale, color="grey", lw=0.8, ls="--", label="allocatable")
            ax.set_title(f"node {ex.name}: {resource}")
            ax.set_ylabel(unit)
            ax.legend(fontsize=8, loc="upper right")
            ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise PlotError(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        plt.close(fig)
