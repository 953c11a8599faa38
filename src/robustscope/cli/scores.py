"""``robustscope scores radii.csv``: difficulty-aware robustness scores of a radius CSV.

The table is read with the standard library's ``csv`` module and the scores are computed
with numpy: the command imports neither pandas nor pyarrow, so that it starts quickly.
"""

from __future__ import annotations

import csv
import json
import math
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from robustscope.cli.common import reporting_errors
from robustscope.core.errors import InputError

if TYPE_CHECKING:  # imported by the command itself: --help needs no numpy
    import numpy as np

    from robustscope.scores.intrinsic import IntrinsicScores, SubsetComparison

REQUIRED_COLUMNS = ("radius", "loss", "status")

#: Choices of ``--censored``.
Censored = Enum("Censored", {"exclude": "exclude", "bound": "bound"}, type=str)


def read_radius_csv(path: str | Path) -> dict[str, np.ndarray]:
    """Read a radius CSV (as written by ``RadiusResult.to_csv``) and check the columns that the
    scores need: ``radius`` (``inf`` for censored inputs), ``loss`` and ``status``.

    Returns those three columns as arrays (``float64``, ``float64``, ``str``), one entry per
    row in file order; other columns are ignored, blank lines skipped. Raises
    :class:`InputError` naming the file, and the row (0 = the first row after the header) and
    column of a cell that is empty or not a number."""
    import numpy as np

    path = Path(path)
    if not path.is_file():
        raise InputError(f"radius file {path}: no such file")
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            lines = [row for row in csv.reader(fh) if row]
    except (csv.Error, UnicodeDecodeError) as exc:
        raise InputError(f"radius file {path}: cannot read it as CSV ({exc})") from exc
    if not lines:
        raise InputError(f"radius file {path}: cannot read it as CSV (the file is empty)")
    header, rows = lines[0], lines[1:]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InputError(f"radius file {path}: missing column(s) {', '.join(missing)} "
                         f"(found: {', '.join(header)})")
    for i, row in enumerate(rows):
        if len(row) > len(header):
            raise InputError(f"radius file {path}: cannot read it as CSV (row {i} has "
                             f"{len(row)} fields, the header {len(header)})")
    table: dict[str, np.ndarray] = {}
    for col in ("radius", "loss"):
        k = header.index(col)
        values = np.empty(len(rows), dtype=np.float64)
        for i, row in enumerate(rows):
            cell = row[k] if k < len(row) else ""
            try:
                values[i] = float(cell)
            except ValueError:
                values[i] = math.nan
            if math.isnan(values[i]):  # empty cells, NaN and text that is not a number
                raise InputError(f"radius file {path}: row {i}, column '{col}' = {cell!r} is "
                                 "not a number")
        table[col] = values
    k = header.index("status")
    table["status"] = np.array([row[k].strip() if k < len(row) else "" for row in rows],
                               dtype=str)
    return table


def _fmt(x: float) -> str:
    return "nan" if not math.isfinite(x) else f"{x:.4g}"


def _json_number(x):
    """JSON has no NaN / inf: write them as null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def scores_document(s: IntrinsicScores, sub: SubsetComparison) -> dict:
    """One flat JSON-ready dict: scores, ``<score>_low/_high``, counts, ``rel_var_*`` and the
    easy / hard scores under ``easy`` and ``hard``."""
    doc = s.to_dict()
    doc.update(sub.to_dict())
    return _clean(doc)


def _clean(obj):
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    return _json_number(obj)


def register(app: typer.Typer) -> None:
    """Add the ``scores`` command to ``app``."""

    @app.command("scores")
    def scores(
        path: Path = typer.Argument(..., help="Radius CSV (columns radius, loss, status, ...)."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        n_bootstrap: int = typer.Option(1000, "--n-bootstrap", min=0,
                                        help="Bootstrap resamples."),
        old_bootstrap: int | None = typer.Option(None, "--bootstrap", min=0, hidden=True,
                                                 help="Deprecated spelling of --n-bootstrap."),
        confidence: float = typer.Option(0.95, help="Level of the bootstrap intervals."),
        seed: int = typer.Option(0, help="Seed of the bootstrap."),
        censored: Censored = typer.Option(
            Censored.exclude, help="Censored inputs: 'exclude' them, or 'bound' (radius := "
            "--censor-at, scores become lower bounds)."),
        censor_at: float = typer.Option(None, help="Largest strength tried (with 'bound')."),
    ) -> None:
        """R_m, R_w, R_nu with bootstrap intervals, the line r ~ g(loss), and the easy/hard
        relative variations (Giraudon et al. 2021)."""
        from robustscope.scores.intrinsic import intrinsic_scores, subset_independence

        with reporting_errors():
            if old_bootstrap is not None:
                typer.echo("note: --bootstrap is deprecated; use --n-bootstrap", err=True)
                n_bootstrap = old_bootstrap
            table = read_radius_csv(path)
            columns = (table["radius"], table["loss"], table["status"])
            kw = dict(censored=censored.value, censor_at=censor_at, n_bootstrap=n_bootstrap,
                      confidence=confidence, seed=seed)
            s = intrinsic_scores(*columns, **kw)
            if len(table["radius"]) < 2:
                raise InputError(f"radius file {path}: the easy/hard split needs >= 2 rows")
            sub = subset_independence(*columns, **kw)
            if as_json:
                typer.echo(json.dumps(scores_document(s, sub)))
            else:
                _print_table(path, s, sub)


def _print_table(path: Path, s: IntrinsicScores, sub: SubsetComparison) -> None:
    from rich.console import Console
    from rich.table import Table

    pct = f"{100 * s.confidence:g}%"
    table = Table(title=f"Robustness scores of {path.name}")
    for col in ("score", "value", f"{pct} interval", "easy", "hard", "rel. variation"):
        table.add_column(col, justify="right" if col != "score" else "left")
    labels = {"R_m": "R_m (mean radius)", "R_w": "R_w (worst, all)",
              "R_w_correct": "R_w (worst, well-classified)", "R_nu": "R_nu",
              "slope": "slope of r ~ g(loss)", "intercept": "intercept", "r2": "R^2"}
    for name, label in labels.items():
        low, high = s.intervals.get(name, (math.nan, math.nan))
        rv = sub.rel_var.get(name)
        rv_text = ""
        if rv is not None:
            rv_low, rv_high = sub.rel_var_intervals.get(name, (math.nan, math.nan))
            rv_text = f"{_fmt(rv)} [{_fmt(rv_low)}, {_fmt(rv_high)}]"
        table.add_row(label, _fmt(getattr(s, name)), f"[{_fmt(low)}, {_fmt(high)}]",
                      _fmt(getattr(sub.easy, name)), _fmt(getattr(sub.hard, name)), rv_text)
    console = Console()
    console.print(table)
    notes = [f"{s.n} inputs: {s.n_misclassified} misclassified, {s.n_censored} censored "
             f"({'excluded' if s.censored == 'exclude' else 'radius := censor-at'}), "
             f"{s.n_nonpositive_g} well-classified with g(loss) <= 0 and {s.n_infinite_g} with "
             f"g(loss) = inf (left out of R_nu); line fitted on {s.n_line} inputs."]
    if s.lower_bounds:
        notes.append("Censored inputs were given the censoring radius: R_m, R_w and R_nu are "
                     "lower bounds.")
    for note in notes:
        console.print(note)
