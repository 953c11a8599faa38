"""Command-line interface: ``robustscope <command>``.

Every command validates its input before computing anything, writes its output files only
once everything succeeded (atomically, so nothing is ever half-written), and reports a problem
as one line naming the argument, feature or row, with the exit codes of
:mod:`robustscope.cli.common` (2 bad input, 1 runtime failure, 130 interrupted).
"""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path

import typer
from rich.console import Console

from robustscope.cli.common import (
    OneLineErrorsGroup,
    computing,
    print_version,
    reporting_errors,
)
from robustscope.cli.search_options import CHOICES, search_values, with_search_options

app = typer.Typer(
    name="robustscope",
    help="Radius of robustness for any classifier, with verified counterexamples. "
         "Exit codes: 0 done, 1 runtime failure (the model raised, a full disk, a bug), "
         "2 bad input or option, 130 interrupted (Ctrl-C), 143 stopped by SIGTERM.",
    cls=OneLineErrorsGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err_console = Console(stderr=True)
#: Modules under robustscope.cli that add their own commands with ``register(app)``.
COMMAND_MODULES: tuple[str, ...] = ("leaderboard", "scores", "image_grid", "run", "compare",
                                    "verify")




#: Extensions of ``radius --out``: the formats of :meth:`RadiusResult.save`.
RESULT_SUFFIXES = (".csv", ".parquet", ".json")

#: Choices of ``radius --threat`` (the registry's Lp threats), ``--solver`` and ``--certify``:
#: built from the search options' declaration (robustscope.search.options).
ThreatName = CHOICES["threat"]
SolverName = CHOICES["solver"]
CertifyName = CHOICES["certify"]


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug messages; "
                                      "show the traceback of a runtime failure."),
         version: bool = typer.Option(False, "--version", callback=print_version,
                                      is_eager=True, help="Print the version and exit.")
         ) -> None:
    """robustscope: how far is each input from a decision change?"""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")


@app.command("radius")
@with_search_options
def radius_command(
    model: Path = typer.Option(..., help="Model file: .json/.ubj (XGBoost), .txt (LightGBM), "
                               ".skops, .pt (TorchScript), .pt2 (torch.export), "
                               ".onnx; .pkl/.joblib need --trust-pickle."),
    data: Path = typer.Option(..., help="CSV or Parquet with a label column, or NPZ with "
                             "arrays X and y."),
    out: Path = typer.Option(..., help="Radius table: .csv, .parquet or .json."),
    label_column: str = typer.Option("label", help="Label column of a CSV."),
    features: Path | None = typer.Option(None, help="Feature-space YAML (bounds, scales, "
                                         "types, mutability, constraints)."),
    adversarial_out: Path | None = typer.Option(None, help="NPZ of counterexamples (X_adv)."),
    trust_pickle: bool = typer.Option(False, "--trust-pickle",
                                      help="Allow pickle/joblib model files (can run "
                                      "arbitrary code)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or summary."),
    **search: object,
) -> None:
    """Radius of robustness of every input, one row per input."""
    from robustscope.core.checks import check_device
    from robustscope.core.fileio import atomic_write_all, check_outputs
    from robustscope.core.space import FeatureSpace
    from robustscope.runs.columns import load_model_for, match_columns
    from robustscope.runs.data import load_data
    from robustscope.search.engine import radius

    with reporting_errors():
        options = search_values(search)  # the search options (robustscope.search.options)
        threat, solver, device = options["threat"], options["solver"], options["device"]
        check_device(device, "--device")
        check_outputs([("--out", out, RESULT_SUFFIXES), ("--adversarial-out", adversarial_out,
                                                         (".npz",))],
                      {"--model": model, "--data": data, "--features": features})
        dataset = load_data(data, label_column)
        clf = load_model_for(model, dataset, f"--data {data}", trust_pickle=trust_pickle,
                             device=device)
        dataset, order_note = match_columns(dataset, clf, f"--data {data}")
        space = None
        if features is not None:
            space = FeatureSpace.from_yaml(features, int(dataset.X[0].size),
                                           dataset.feature_names, dataset.X.shape[1:])
        with computing(), _progress(len(dataset.X), quiet) as advance:
            result = radius(clf, dataset.X, dataset.y, space=space, progress=advance,
                            **options)
        if order_note is not None:
            result.meta["columns"] = order_note
        writes = [(out, result.save)]
        if adversarial_out is not None:
            writes.append((adversarial_out, result.save_adversarial))
        atomic_write_all(writes)  # both files or neither
        if not quiet:
            print_summary(result, f"{model.name} · {threat} · solver {solver}")
            if order_note is not None:
                Console().print(f"note: {order_note}", highlight=False)
            if result.meta.get("certify_note"):
                Console().print(f"note: {result.meta['certify_note']}", highlight=False)
            _print_relation_effect(result)
            Console().print(f"wrote {out}" + (f" and {adversarial_out}" if adversarial_out
                                              else ""))


def _print_relation_effect(result) -> None:
    """What the constraints changed (after ``--compare-unconstrained``)."""
    from robustscope.scores.relation_effect import relation_effect

    e = relation_effect(result)
    if e is None:
        return
    Console().print(f"constraints: {e['unconstrained_invalid']} of {e['unconstrained_found']} "
                    "unconstrained counterexamples break one; "
                    f"{e['lost']} inputs have no valid counterexample; median radius growth "
                    f"x{e['median_growth']:.4g} (mean x{e['mean_growth']:.4g})", highlight=False)


def _progress(total: int, quiet: bool):
    """Context manager yielding a callback that advances a progress bar (on stderr)."""
    import contextlib

    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    if quiet or not sys.stderr.isatty():
        return contextlib.nullcontext(lambda k: None)

    @contextlib.contextmanager
    def bar():
        columns = (TextColumn("radius"), BarColumn(),
                   TextColumn("{task.completed}/{task.total} inputs"), TimeRemainingColumn())
        with Progress(*columns, console=err_console, transient=True) as prog:
            task = prog.add_task("radius", total=total)
            yield lambda k: prog.advance(task, k)

    return bar()


def print_summary(result, title: str) -> None:
    """A one-table summary of a :class:`RadiusResult` on stdout, fitted to the terminal."""
    from robustscope.report.terminal import Col, fitted_table

    s = result.summary()
    columns = (Col("inputs"), Col("clean acc."), Col("exact"), Col("attacked"),
               Col("censored"), Col("misclassified", priority=1),
               Col("satisfied", priority=1), Col("median radius"),
               Col("min radius", priority=2), Col("mean queries", priority=3),
               Col("not converged", priority=1))
    row = [str(s["n"]), f"{s['clean_accuracy']:.3f}", str(s["exact"]), str(s["attacked"]),
           str(s["censored"]), str(s["misclassified"]), str(s["satisfied"]),
           f"{s['median_radius']:.4g}", f"{s['min_radius']:.4g}", f"{s['mean_queries']:.0f}",
           str(s["not_converged"])]
    console = Console()
    notes = "; ".join(result.notes) or None
    console.print(fitted_table(title, columns, [row], console, caption=notes))
    if s["not_converged"]:
        console.print(not_converged_note(s["not_converged"]))


def not_converged_note(count: int) -> str:
    """The line that tells a user what to do about radii still falling at the ceiling."""
    return (f"{count} radius/radii still falling when the search stopped at its ceiling: "
            "they may be too large. Raise --budget (the ceiling of passes per input) and "
            "run again; see docs/budget.md, 'Stop on evidence'.")


@app.command("demo")
def demo_command(
    out_dir: Path = typer.Option(Path("robustscope-demo"), help="Folder for the outputs."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars or tables; "
                               "only the report path."),
) -> None:
    """Train two models on scikit-learn's breast-cancer data and report their radii."""
    from robustscope.core.fileio import check_output_folder
    from robustscope.runs.demo import run_demo

    with reporting_errors():
        check_output_folder("--out-dir", out_dir)
        with computing():  # the demo trains its own models: any model error is a failure
            run_demo(out_dir, quiet=quiet)


for _name in COMMAND_MODULES:
    importlib.import_module(f"robustscope.cli.{_name}").register(app)


if __name__ == "__main__":  # python -m robustscope.cli.app, as the console script does
    app()
