"""Figures of multi-attack robustness (MultiRobustBench style), drawn with matplotlib Agg.

Each ``*_figure`` function takes results and returns a :class:`matplotlib.figure.Figure`
(built without pyplot, so no global state and no display: it renders with Agg);
:func:`write_multiattack_figures` writes all of them as PNG files.

* :func:`accuracy_curves_figure` - accuracy (percent) against strength, one panel per attack,
  one line per model, with the reference acc* as a dashed black line;
* :func:`sorted_points_figure` - every point of 𝒫 (clean and each attack/strength), sorted
  by acc* from easiest to hardest, accuracy of each model against the acc* curve;
* :func:`single_cr_figure` - single-attack competitiveness ratios (avg and worst) as bars;
* :func:`seen_unseen_figure` - CR_in / CR_out (avg and worst) bars per model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from robustscope.core.errors import InputError
from robustscope.core.fileio import atomic_write
from robustscope.scores.accuracy_grid import AccuracyGrid
from robustscope.scores.multiattack import CRReport, resolve_attacks, resolve_reference


def _check_reports(reports: Sequence[CRReport]) -> list[CRReport]:
    reports = list(reports)
    if not reports:
        raise InputError("reports: give at least one CRReport")
    return reports


def accuracy_curves_figure(grids: Mapping[str, AccuracyGrid],
                           reference: AccuracyGrid | str | Path | None = None,
                           attacks: Sequence[str] | None = None,
                           ncols: int = 3) -> Figure:
    """Accuracy (percent) against strength, one panel per attack: each model of ``grids``
    (name -> grid) as a line, the reference acc* dashed black. The strength-0 point of each
    line is the clean accuracy. Attacks a model lacks are left out of its line."""
    if not grids:
        raise InputError("grids: give at least one model's accuracy grid")
    ref = resolve_reference(reference)
    chosen = resolve_attacks(attacks)
    nrows = math.ceil(len(chosen) / ncols)
    fig = Figure(figsize=(4.0 * ncols, 3.2 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax, attack in zip(axes.flat, chosen, strict=False):
        if attack in ref.attacks:
            eps = [0.0, *sorted(ref.attacks[attack])]
            ax.plot(eps, [ref.clean, *(ref.attacks[attack][e] for e in eps[1:])], "k--",
                    lw=1.5, label="acc*")
        for name, grid in grids.items():
            curve = grid.attacks.get(attack)
            if not curve:
                continue
            eps = [0.0, *sorted(curve)]
            ax.plot(eps, [grid.clean, *(curve[e] for e in eps[1:])], marker=".", lw=1,
                    label=name)
        ax.set_title(attack, fontsize=10)
        ax.set_xlabel("strength ε")
        ax.set_ylabel("accuracy (%)")
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(chosen):]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4),
               fontsize=8)
    fig.suptitle("Accuracy against attack strength")
    return fig


def sorted_points_figure(reports: Sequence[CRReport]) -> Figure:
    """Every point of 𝒫 sorted by acc* (easiest first): acc* as a black line and each
    model's accuracy at the same points. Uses the reports' point tables (same attacks and
    reference for all)."""
    reports = _check_reports(reports)
    fig = Figure(figsize=(9, 4.5), layout="constrained")
    ax = fig.subplots()
    first = reports[0].table
    keys = [(a, e) for a, e in zip(first.attack, first.eps, strict=True)]
    star = dict(zip(keys, first.acc_star, strict=True))
    for r in reports[1:]:
        for a, e, s in zip(r.table.attack, r.table.eps, r.table.acc_star, strict=True):
            star.setdefault((a, e), s)
    order = sorted(star, key=lambda k: -star[k])
    pos = {k: i for i, k in enumerate(order)}
    ax.plot(range(len(order)), [star[k] for k in order], "k-", lw=2, label="acc*")
    for r in reports:
        t = r.table
        x = [pos[(a, e)] for a, e in zip(t.attack, t.eps, strict=True)]
        idx = np.argsort(x)
        ax.plot(np.asarray(x)[idx], t.acc[idx], ".", ms=4, label=r.model)
    ax.set_xlabel(f"point (clean or attack@strength), sorted by acc*  [{len(order)} points]")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncols=2)
    ax.set_title("Accuracy at every point, against the reference acc*")
    return fig


def _bars(ax: Axes, groups: list[str], series: dict[str, list[float]],
          ylabel: str) -> None:
    n = len(series)
    width = 0.8 / max(n, 1)
    x = np.arange(len(groups))
    for i, (name, values) in enumerate(series.items()):
        vals = [np.nan if v is None else v for v in values]
        ax.bar(x + (i - (n - 1) / 2) * width, vals, width, label=name)
    ax.set_xticks(x, groups, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.axhline(100, color="k", lw=0.8, ls=":")
    ax.grid(axis="y", alpha=0.3)


def single_cr_figure(reports: Sequence[CRReport]) -> Figure:
    """Single-attack CR per attack (groups) and model (bars): average on top, worst below.
    The dotted line at 100 is parity with the reference."""
    reports = _check_reports(reports)
    attacks = list(reports[0].single)
    fig = Figure(figsize=(max(8, 1.1 * len(attacks) + 3), 7), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    _bars(top, attacks, {r.model: [r.single.get(a, {}).get("avg") for a in attacks]
                         for r in reports}, "single CR avg (%)")
    _bars(bottom, attacks, {r.model: [r.single.get(a, {}).get("worst") for a in attacks]
                            for r in reports}, "single CR worst (%)")
    handles, labels = top.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4),
               fontsize=8)
    fig.suptitle("Single-attack competitiveness ratio")
    return fig


def seen_unseen_figure(reports: Sequence[CRReport]) -> Figure:
    """CR_in and CR_out per model (avg on the left, worst on the right). Needs reports
    computed with the models' training attacks."""
    reports = [r for r in _check_reports(reports) if r.pct_seen is not None]
    if not reports:
        raise InputError("reports: none has seen/unseen metrics; compute them with "
                         "trained_on (the 'Attacks Used' details)")
    names = [r.model for r in reports]
    fig = Figure(figsize=(max(8, 0.9 * len(names) + 4), 4.5), layout="constrained")
    left, right = fig.subplots(1, 2)
    _bars(left, names, {"CR_in": [r.cr_in_avg for r in reports],
                        "CR_out": [r.cr_out_avg for r in reports]}, "CR avg (%)")
    _bars(right, names, {"CR_in": [r.cr_in_worst for r in reports],
                         "CR_out": [r.cr_out_worst for r in reports]}, "CR worst (%)")
    left.set_title("seen (in) vs unseen (out): average")
    right.set_title("seen (in) vs unseen (out): worst")
    left.legend(fontsize=8)
    return fig


def save_figure(fig: Figure, path: str | Path, dpi: int = 120) -> Path:
    """Write ``fig`` as PNG to ``path``; returns the path."""
    path = Path(path)
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format="png"))
    return path


#: The files :func:`write_multiattack_figures` may write into its folder.
FIGURE_FILES = ("accuracy_curves.png", "points_by_acc_star.png", "single_cr.png",
                "cr_in_out.png")


def write_multiattack_figures(reports: Sequence[CRReport], grids: Mapping[str, AccuracyGrid],
                              out_dir: str | Path,
                              reference: AccuracyGrid | str | Path | None = None,
                              attacks: Sequence[str] | None = None) -> list[Path]:
    """Write the four figures as PNGs in ``out_dir`` (created if needed); the seen/unseen
    figure only when the reports have those metrics. Returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [
        save_figure(accuracy_curves_figure(grids, reference, attacks),
                    out / "accuracy_curves.png"),
        save_figure(sorted_points_figure(reports), out / "points_by_acc_star.png"),
        save_figure(single_cr_figure(reports), out / "single_cr.png"),
    ]
    if any(r.pct_seen is not None for r in reports):
        paths.append(save_figure(seen_unseen_figure(reports), out / "cr_in_out.png"))
    return paths


__all__ = [
    "accuracy_curves_figure",
    "save_figure",
    "seen_unseen_figure",
    "single_cr_figure",
    "sorted_points_figure",
    "write_multiattack_figures",
]
