"""``robustscope leaderboard``: rank models by MultiRobustBench competitiveness ratios."""

from __future__ import annotations

import json
import math
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from robustscope.cli.common import reporting_errors
from robustscope.core.errors import RobustscopeError

if TYPE_CHECKING:  # imported by the command itself: numpy is not needed to show --help
    from rich.table import Table

    from robustscope.scores.accuracy_grid import ModelAccuracies
    from robustscope.scores.multiattack import CRReport


#: Choices of ``--sort``.
SortBy = Enum("SortBy", {"avg": "avg", "worst": "worst"}, type=str)


def _split_attacks(attacks: list[str] | None) -> list[str] | None:
    if not attacks:
        return None
    return [a.strip() for item in attacks for a in item.split(",") if a.strip()]


def collect_models(db: str | Path | None, accuracies: list[Path] | None
                   ) -> list[ModelAccuracies]:
    """Models from a results store (latest grid of each; a SQLite file or a database URL)
    and from accuracy files; model names must be unique across all sources."""
    from robustscope.scores.accuracy_grid import read_accuracy_file

    models: list[ModelAccuracies] = []
    if db is not None:
        from robustscope.runs.store import is_store_url, open_store

        if not is_store_url(str(db)) and not Path(db).is_file():
            raise RobustscopeError(f"--store {db}: no such file")
        with open_store(str(db)) as store:
            models.extend(store.model_accuracies())
    for path in accuracies or []:
        models.extend(read_accuracy_file(path))
    if not models:
        raise RobustscopeError("no models: give --store with stored accuracy grids and/or "
                               "--accuracies FILE.json")
    names = [m.name for m in models]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise RobustscopeError(f"model names appear more than once: {', '.join(dup)}")
    return models


def rank(models: list[ModelAccuracies], reference: str | None = None,
         attacks: list[str] | None = None, allow_missing: bool = False,
         sort: str = "avg") -> list[CRReport]:
    """Competitiveness report of every model, best first by CR_ind-avg (``sort="avg"``) or
    CR_ind-worst (``"worst"``), ties broken by the other. ``reference``: ``None`` /
    ``"published"``, ``"best"`` (best of the given models per point) or a file."""
    from robustscope.scores.multiattack import (
        best_reference,
        competitiveness,
        resolve_attacks,
        resolve_reference,
    )

    if sort not in ("avg", "worst"):
        raise RobustscopeError(f"--sort: expected 'avg' or 'worst', got {sort!r}")
    ref = (best_reference(m.grid for m in models) if reference == "best"
           else resolve_reference(reference))
    check_datasets(models, reference)
    chosen = resolve_attacks(attacks)
    reports = [competitiveness(m.grid, ref, chosen, m.trained_on,
                               missing="skip" if allow_missing else "error", model=m.name)
               for m in models]
    key = ((lambda r: (r.cr_ind_avg, r.cr_ind_worst)) if sort == "avg"
           else (lambda r: (r.cr_ind_worst, r.cr_ind_avg)))
    return sorted(reports, key=key, reverse=True)


def check_datasets(models: list[ModelAccuracies], reference: str | None) -> None:
    """Refuse models whose images are not the reference's (their ``details``' input shape
    differs: a digits model against CIFAR-10's acc*), warn when only the dataset names
    differ. With ``reference="best"`` the models are each other's reference."""
    import warnings

    from robustscope.core.errors import InputError, RobustscopeWarning
    from robustscope.scores.accuracy_grid import read_accuracy_file
    from robustscope.scores.multiattack import PUBLISHED_DATASET, dataset_mismatch

    if reference is None or reference == "published":
        ref, ref_name = PUBLISHED_DATASET, "the published MultiRobustBench table"
    elif reference == "best":
        known = [m for m in models if m.details.get("dataset") or m.details.get("input_shape")]
        if not known:
            return
        ref, ref_name = known[0].details, f"best of the models, with '{known[0].name}'"
    else:
        ref, ref_name = read_accuracy_file(reference)[0].details, f"--reference {reference}"
    for m in models:
        found = dataset_mismatch(m.name, m.details, ref, ref_name)
        if found is not None and found[0] == "error":
            raise InputError(found[1])
        if found is not None:
            warnings.warn(found[1], RobustscopeWarning, stacklevel=2)


def _fmt(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.2f}"


def render_table(reports: list[CRReport], single: bool = False) -> Table:
    """A rich table: rank, model, clean, CR_ind-avg/worst, worst point, and seen/unseen
    metrics where known; per-attack single-CR averages with ``single=True``."""
    from rich.table import Table

    table = Table(title="MultiRobustBench competitiveness (percent of acc*)")
    for col in ("#", "model", "clean", "CR_ind-avg", "CR_ind-worst", "worst point"):
        table.add_column(col, justify="left" if col in ("model", "worst point") else "right")
    seen = any(r.pct_seen is not None for r in reports)
    if seen:
        for col in ("CR_in-avg", "CR_out-avg", "% seen", "SC"):
            table.add_column(col, justify="right")
    excluded = any(r.table.excluded for r in reports)
    if excluded:
        table.add_column("excluded", justify="right")
    attacks = list(reports[0].single) if single and reports else []
    for a in attacks:
        table.add_column(f"{a} avg", justify="right")
    for i, r in enumerate(reports, 1):
        row = [str(i), r.model + (" *" if r.table.missing else ""), _fmt(r.clean),
               _fmt(r.cr_ind_avg), _fmt(r.cr_ind_worst), r.worst_point]
        if seen:
            row += [_fmt(r.cr_in_avg), _fmt(r.cr_out_avg), _fmt(r.pct_seen), _fmt(r.sc)]
        if excluded:
            row.append(str(len(r.table.excluded)))
        row += [_fmt(r.single[a]["avg"]) for a in attacks]
        table.add_row(*row)
    notes = []
    if any(r.table.missing for r in reports):
        notes.append("* scored on the points it has (some attack/strength points missing)")
    if excluded:
        notes.append("excluded: points where acc* = 0 (no reference model resists there); "
                     "they have no ratio and enter no metric")
    if notes:
        table.caption = "\n".join(notes)
    return table


def register(app: typer.Typer) -> None:
    """Add the ``leaderboard`` command to ``app``."""

    @app.command("leaderboard")
    def leaderboard(
        db: str = typer.Option(None, "--store", help="Results store to read the latest "
                               "accuracy grid of each model from: a SQLite file or a URL "
                               "postgresql://user:password@host:port/database."),
        old_db: str = typer.Option(None, "--db", hidden=True,
                                   help="Deprecated spelling of --store."),
        accuracies: list[Path] = typer.Option(None, "--accuracies", help="Benchmark accuracy "
                                              "JSON: one model (named by its details, else "
                                              "after the file) or "
                                              "{model: {accuracies, details}}. Repeatable."),
        reference: str = typer.Option("published", "--reference", help="acc*: 'published' "
                                      "(MultiRobustBench CIFAR-10 table), 'best' (best of "
                                      "the ranked models per point) or a JSON file."),
        attacks: list[str] = typer.Option(None, "--attacks", help="Attacks to score "
                                          "(comma-separated or repeated; short or benchmark "
                                          "names), or a group: 'ranked', 'unforeseen' (the "
                                          "other attack types and the corruptions), "
                                          "'corruptions'. Default: the 9 ranked attacks."),
        allow_missing: bool = typer.Option(False, "--allow-missing", help="Score models on "
                                           "the points they have instead of failing."),
        sort: SortBy = typer.Option(SortBy.avg, "--sort", help="Rank by CR_ind-avg ('avg') "
                                    "or CR_ind-worst ('worst')."),
        single: bool = typer.Option(False, "--single", help="Add single-CR columns."),
        as_json: bool = typer.Option(False, "--json", help="Print a JSON list instead of a "
                                     "table."),
        figures: Path = typer.Option(None, "--figures", help="Also write the multi-attack "
                                     "figures (PNG) into this folder."),
    ) -> None:
        """Rank models by CR_ind-avg and CR_ind-worst (MultiRobustBench, Dai et al. 2023)."""
        with reporting_errors():
            if old_db is not None:
                typer.echo("note: --db is deprecated; use --store", err=True)
                db = db if db is not None else old_db
            if figures is not None:
                from robustscope.core.fileio import check_output_folder
                from robustscope.report.multiattack_figures import FIGURE_FILES
                from robustscope.runs.locations import is_store_url

                sources = {f"--accuracies {p.name}": p for p in accuracies or []}
                if db is not None and not is_store_url(db):
                    sources["--store"] = Path(db)
                check_output_folder("--figures", figures, sources, FIGURE_FILES)
            models = collect_models(db, accuracies)
            chosen = _split_attacks(attacks)
            reports = rank(models, reference, chosen, allow_missing, sort.value)
            if figures is not None:
                from robustscope.report.multiattack_figures import write_multiattack_figures
                from robustscope.scores.multiattack import best_reference, resolve_reference

                ref = (best_reference(m.grid for m in models) if reference == "best"
                       else resolve_reference(reference))
                written = write_multiattack_figures(reports, {m.name: m.grid for m in models},
                                                    figures, ref, chosen)
            if as_json:
                typer.echo(json.dumps([r.to_dict() for r in reports], indent=1))
            else:
                from rich.console import Console

                Console().print(render_table(reports, single=single))
            if figures is not None:
                typer.echo(f"figures: {', '.join(str(p) for p in written)}", err=as_json)
