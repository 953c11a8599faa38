"""``robustscope run SPEC.yaml``: run an evaluation spec, write the run folder and report."""

from __future__ import annotations

import signal
from enum import Enum
from pathlib import Path

import typer
from rich.console import Console

from robustscope.cli.common import ExitCode, computing, fail, quiet_logging, reporting_errors

err_console = Console(stderr=True)

#: Choices of ``--backend`` (runs.backends.BACKENDS, not imported: --help stays fast).
Backend = Enum("Backend", {"local": "local", "ray": "ray"}, type=str)


def print_run_summary(outcome, console: Console) -> None:
    """Per-threat headline numbers of a finished run, fitted to ``console``'s width (the
    least important columns are left out first)."""
    from robustscope.report.html import fmt, pct
    from robustscope.report.terminal import Col, fitted_table

    columns = (Col("threat", "left"), Col("solver", "left", 2), Col("inputs", priority=3),
               Col("clean acc."), Col("median r"), Col("worst r", priority=1), Col("R_ν"),
               Col("R_ν interval", priority=4), Col("censored", priority=1),
               Col("queries/input", priority=2), Col("not conv.", priority=1),
               Col("shard time (s)", priority=5, note="shard time: the threat's shards' "
                   "durations, summed over workers"))
    rows = []
    for sec in outcome.evaluation.sections:
        s = sec.summary()
        rows.append([sec.name, sec.result.solver, str(s["n"]), pct(s["clean_accuracy"]),
                     fmt(s["median_radius"]), fmt(s["worst_radius"]), fmt(s["R_nu"]),
                     f"[{fmt(s['R_nu_low'])}, {fmt(s['R_nu_high'])}]",
                     pct(s["censored_share"]), fmt(s["mean_queries"], 5),
                     str(s["not_converged"]),
                     fmt(sec.seconds, 3)])
    console.print(fitted_table(outcome.evaluation.title, columns, rows, console))
    print_relation_summary(outcome, console)


def print_relation_summary(outcome, console: Console) -> None:
    """Per threat, what the feature space's relations change (only when compared), fitted
    to ``console``'s width."""
    from robustscope.report.html import fmt, pct
    from robustscope.report.terminal import Col, fitted_table

    found = [(sec.name, sec.summary().get("relations")) for sec in outcome.evaluation.sections]
    found = [(name, e) for name, e in found if e is not None]
    if not found:
        return
    columns = (Col("threat", "left"), Col("inputs", priority=2),
               Col("unconstrained counterexamples", priority=1), Col("break a relation"),
               Col("no valid counterexample", priority=1), Col("median radius growth"),
               Col("mean growth", priority=2))
    rows = [[name, str(e["n"]), str(e["unconstrained_found"]),
             f"{e['unconstrained_invalid']} ({pct(e['unconstrained_invalid_share'])})",
             str(e["lost"]), f"x{fmt(e['median_growth'], 4)}", f"x{fmt(e['mean_growth'], 4)}"]
            for name, e in found]
    console.print(fitted_table("relations between features: unconstrained search vs "
                               "constrained", columns, rows, console))


def warn_failed_rows(outcome) -> None:
    """One line on stderr per threat on whose inputs the model raised: how many, and where
    their messages are (shown with ``--quiet`` too)."""
    run_json = outcome.out_dir / "run.json"
    for name, info in outcome.manifest["threats"].items():
        failed = info.get("failed") or []
        if failed:
            err_console.print(
                f"warning: the model raised on {len(failed)} input(s) under threat {name}; "
                f"they have status 'failed' in {outcome.out_dir / info['radii']} and are left "
                f"out of the scores; messages in {run_json} (threats.{name}.failed)",
                highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add the ``run`` command to ``app``."""

    @app.command("run")
    def run_command(
        spec: Path = typer.Argument(..., help="Evaluation spec (YAML): model, data, features, "
                                    "threats, solver, scores, outputs."),
        out_dir: Path | None = typer.Option(None, "--out-dir", help="Override outputs.dir."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars or summary; "
                                   "only the report path."),
        backend: Backend | None = typer.Option(None, "--backend", help="Where shards run: "
                                               "'local' (process pool) or 'ray'; default: "
                                               "the spec's execution.backend."),
        workers: int | None = typer.Option(None, "--workers", min=1, help="Worker processes "
                                           "(default: all cores, or the Ray cluster's CPUs)."),
        address: str | None = typer.Option(None, "--address", help="Ray cluster address "
                                           "(ray backend; default: a local cluster)."),
        resume: Path | None = typer.Option(None, "--resume", help="Continue the incomplete run "
                                           "in this folder (only missing or failed shards "
                                           "run). Without it, an incomplete run in the output "
                                           "folder is continued too, when its model, data and "
                                           "spec are unchanged."),
        restart: bool = typer.Option(False, "--restart", help="Start a new run even if the "
                                     "output folder holds an incomplete one (its shards are "
                                     "deleted)."),
    ) -> None:
        """Run an evaluation spec: radii per threat, scores, run folder, store, HTML report.

        The inputs are split into shards (execution.shard_size inputs x one threat) that run
        on local worker processes or a Ray cluster; each finished shard is written at once,
        so a run that stops (killed, a full disk, a failing worker) continues where it
        stopped when started again - unless its model, data, feature file or spec changed
        since (then it is refused with what changed; --restart starts afresh). One run at a
        time uses a folder. A run that stops part-way exits with code 1 and says how
        to resume it (Ctrl-C: code 130, SIGTERM: code 143, with the same line); inputs on
        which the model raises get status `failed` and the run goes on."""
        from robustscope.runs.runner import RunIncomplete, run_spec_file
        from robustscope.runs.stopping import RunInterrupted, Terminated, terminate_raises

        quiet_logging(quiet)
        try:
            with reporting_errors(), terminate_raises():
                if resume is not None and out_dir is not None and \
                        Path(resume).resolve() != Path(out_dir).resolve():
                    fail("give --resume DIR or --out-dir DIR, not two different folders")
                if resume is not None and restart:
                    fail("give --resume or --restart, not both")
                # a model error here comes from loading the spec's model (bad input); one raised
                # while evaluating marks its inputs `failed` instead of stopping the run
                try:
                    with computing(RunIncomplete):
                        outcome = run_spec_file(spec, quiet=quiet, out_dir=resume or out_dir,
                                                resume=True if resume is not None else
                                                False if restart else None,
                                                backend=backend and backend.value, workers=workers,
                                                address=address)
                except RunInterrupted as exc:
                    fail(exc, ExitCode.INTERRUPTED if exc.signum == signal.SIGINT
                         else ExitCode.TERMINATED)
                console = Console()
                warn_failed_rows(outcome)
                if not quiet:
                    print_run_summary(outcome, console)
                    for key, note in outcome.manifest.get("notes", {}).items():
                        err_console.print(f"note ({key}): {note}", highlight=False)
                console.print(str(outcome.report), highlight=False, soft_wrap=True)
        except Terminated:  # before or after the run itself: nothing to resume
            fail("terminated by SIGTERM", ExitCode.TERMINATED)
