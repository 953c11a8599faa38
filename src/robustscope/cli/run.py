"""``robustscope run SPEC.yaml``: run an evaluation spec, write the run folder and report."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from robustscope.cli.common import computing, fail, quiet_logging, reporting_errors

err_console = Console(stderr=True)


def print_run_summary(outcome, console: Console) -> None:
    """Per-threat headline numbers of a finished run."""
    from robustscope.report.html import fmt, pct

    table = Table(title=outcome.evaluation.title)
    for col in ("threat", "solver", "inputs", "clean acc.", "median r", "worst r", "R_ν",
                "R_ν interval", "censored", "queries/input", "seconds"):
        table.add_column(col, justify="right")
    for sec in outcome.evaluation.sections:
        s = sec.summary()
        table.add_row(sec.name, sec.result.solver, str(s["n"]), pct(s["clean_accuracy"]),
                      fmt(s["median_radius"]), fmt(s["worst_radius"]), fmt(s["R_nu"]),
                      f"[{fmt(s['R_nu_low'])}, {fmt(s['R_nu_high'])}]",
                      pct(s["censored_share"]), fmt(s["mean_queries"], 5), fmt(sec.seconds, 3))
    console.print(table)
    print_relation_summary(outcome, console)


def print_relation_summary(outcome, console: Console) -> None:
    """Per threat, what the feature space's relations change (only when compared)."""
    from robustscope.report.html import fmt, pct

    rows = [(sec.name, sec.summary().get("relations")) for sec in outcome.evaluation.sections]
    rows = [(name, e) for name, e in rows if e is not None]
    if not rows:
        return
    table = Table(title="relations between features: unconstrained search vs constrained")
    for col in ("threat", "inputs", "unconstrained counterexamples", "break a relation",
                "no valid counterexample", "median radius growth", "mean growth"):
        table.add_column(col, justify="right")
    for name, e in rows:
        table.add_row(name, str(e["n"]), str(e["unconstrained_found"]),
                      f"{e['unconstrained_invalid']} ({pct(e['unconstrained_invalid_share'])})",
                      str(e["lost"]), f"x{fmt(e['median_growth'], 4)}",
                      f"x{fmt(e['mean_growth'], 4)}")
    console.print(table)


def register(app: typer.Typer) -> None:
    """Add the ``run`` command to ``app``."""

    @app.command("run")
    def run_command(
        spec: Path = typer.Argument(..., help="Evaluation spec (YAML): model, data, features, "
                                    "threats, solver, scores, outputs."),
        out_dir: Path | None = typer.Option(None, "--out-dir", help="Override outputs.dir."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars or summary; "
                                   "only the report path."),
        backend: str | None = typer.Option(None, "--backend", help="Where shards run: 'local' "
                                           "(process pool, the default) or 'ray'."),
        workers: int | None = typer.Option(None, "--workers", min=1, help="Worker processes "
                                           "(default: all cores, or the Ray cluster's CPUs)."),
        address: str | None = typer.Option(None, "--address", help="Ray cluster address "
                                           "(ray backend; default: a local cluster)."),
        resume: Path | None = typer.Option(None, "--resume", help="Continue the incomplete run "
                                           "in this folder (only missing or failed shards "
                                           "run). Without it, an incomplete run in the output "
                                           "folder is continued too."),
    ) -> None:
        """Run an evaluation spec: radii per threat, scores, run folder, store, HTML report.

        The inputs are split into shards (execution.shard_size inputs x one threat) that run
        on local worker processes or a Ray cluster; each finished shard is written at once,
        so a run that stops (killed, a full disk, a failing worker) continues where it
        stopped when started again. A run that stops part-way exits with code 1 and says how
        to resume it; inputs on which the model raises get status `failed` and the run goes
        on."""
        from robustscope.runs.runner import RunIncomplete, run_spec_file

        quiet_logging(quiet)
        with reporting_errors():
            if resume is not None and out_dir is not None and \
                    Path(resume).resolve() != Path(out_dir).resolve():
                fail("give --resume DIR or --out-dir DIR, not two different folders")
            # a model error here comes from loading the spec's model (bad input); one raised
            # while evaluating marks its inputs `failed` instead of stopping the run
            with computing(RunIncomplete):
                outcome = run_spec_file(spec, quiet=quiet, out_dir=resume or out_dir,
                                        resume=True if resume is not None else None,
                                        backend=backend, workers=workers, address=address)
            console = Console(width=max(Console().width, 130))
            if not quiet:
                print_run_summary(outcome, console)
                for key, note in outcome.manifest.get("notes", {}).items():
                    err_console.print(f"note ({key}): {note}", highlight=False)
            console.print(str(outcome.report), highlight=False, soft_wrap=True)
