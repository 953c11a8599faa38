"""``robustscope compare RUN_A RUN_B``: scores side by side and accuracy curves overlaid."""

from __future__ import annotations

import math
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from robustscope.cli.common import quiet_logging, reporting_errors


def _delta_style(delta: float) -> str:
    if not isinstance(delta, float) or math.isnan(delta) or delta == 0:
        return ""
    return "green" if delta > 0 else "red"


def print_comparison(cmp, console: Console) -> None:
    """Rich tables: metrics of A and B per shared threat, then accuracy on the grids."""
    from robustscope.report.html import METRIC_LABELS, fmt, pct
    from robustscope.scores.comparison import METRICS

    console.print(f"A: [bold]{cmp.a.name}[/] ({cmp.a.source})", highlight=False)
    console.print(f"B: [bold]{cmp.b.name}[/] ({cmp.b.source})", highlight=False)
    for t in cmp.shared:
        ma, mb = cmp.metrics[t]
        table = Table(title=f"{t}: scores")
        for col in ("metric", "A", "B", "B − A"):
            table.add_column(col, justify="right")
        for k in METRICS:
            show = pct if k in ("clean_accuracy", "censored_share") else fmt
            delta = None if k == "inputs" else mb[k] - ma[k]
            style = "" if k in ("censored_share", "mean_queries") else _delta_style(delta)
            table.add_row(METRIC_LABELS[k], show(ma[k]), show(mb[k]),
                          f"[{style}]{show(delta)}[/]" if style else show(delta))
        console.print(table)
        curve = Table(title=f"{t}: accuracy")
        for col in ("ε", "A", "B", "B − A"):
            curve.add_column(col, justify="right")
        for eps, pa, pb in cmp.accuracy_rows(t):
            curve.add_row(fmt(eps, 3), pct(pa), pct(pb), pct(pb - pa))
        console.print(curve)
    for label, only in (("A", cmp.only_a), ("B", cmp.only_b)):
        if only:
            console.print(f"only in {label} (not compared): {', '.join(only)}")


def _inputs_of(run_a: str, run_b: str, store: Path | None) -> dict[str, Path | None]:
    """The files ``compare`` reads: the store, and each run folder's manifest and tables."""
    inputs: dict[str, Path | None] = {"--store": store}
    for which, ref in (("RUN_A", run_a), ("RUN_B", run_b)):
        folder = Path(ref)
        if folder.is_dir():
            for path in (folder / "run.json", *sorted(folder.glob("radii_*.csv"))):
                inputs[f"{which} {path.name}"] = path
    return inputs


def register(app: typer.Typer) -> None:
    """Add the ``compare`` command to ``app``."""

    @app.command("compare")
    def compare_command(
        run_a: str = typer.Argument(..., help="Run folder (from robustscope run) or store run id."),
        run_b: str = typer.Argument(..., help="Run folder or store run id."),
        store: Path | None = typer.Option(None, help="Results store for run ids."),
        out: Path | None = typer.Option(None, help="Write the HTML comparison here."),
        n_bootstrap: int = typer.Option(1000, help="Bootstrap resamples of the R_ν interval, "
                                        "for a run that stored none (a stored one is shown)."),
        seed: int = typer.Option(0, help="Seed of that bootstrap."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No tables; only the report "
                                   "path (with --out)."),
    ) -> None:
        """Compare two runs: scores side by side, accuracy curves overlaid."""
        from robustscope.core.fileio import check_outputs
        from robustscope.report.html import render_compare
        from robustscope.runs.compare import load_run
        from robustscope.scores.comparison import compare_runs

        quiet_logging(quiet)
        with reporting_errors():
            check_outputs([("--out", out, (".html",))], _inputs_of(run_a, run_b, store))
            cmp = compare_runs(load_run(run_a, store), load_run(run_b, store),
                               n_bootstrap=n_bootstrap, seed=seed)
            path = render_compare(cmp, out) if out is not None else None
            console = Console()
            if not quiet:
                print_comparison(cmp, console)
            if path is not None:
                console.print(str(path), highlight=False, soft_wrap=True)
