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
from enum import Enum
from pathlib import Path

import typer
from rich.console import Console

from robustscope.cli.common import OneLineErrorsGroup, computing, fail, reporting_errors
from robustscope.solvers.registry import CERTIFY_CHOICES, SEARCH_SOLVERS
from robustscope.threats.registry import threat_names

app = typer.Typer(
    name="robustscope",
    help="Radius of robustness for any classifier, with verified counterexamples. "
         "Exit codes: 0 done, 1 runtime failure (the model raised, a full disk, a bug), "
         "2 bad input or option, 130 interrupted.",
    cls=OneLineErrorsGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err_console = Console(stderr=True)
#: Modules under robustscope.cli that add their own commands with ``register(app)``.
COMMAND_MODULES: tuple[str, ...] = ("leaderboard", "scores", "image_grid", "run", "compare")


#: Choices of ``radius --threat``: the registry's Lp threats (the radius search's norms).
ThreatName = Enum("ThreatName", {name: name for name in threat_names("lp")}, type=str)


SolverName = Enum("SolverName", {name: name for name in SEARCH_SOLVERS}, type=str)
CertifyName = Enum("CertifyName", {name: name for name in CERTIFY_CHOICES}, type=str)


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug messages; "
                                      "show the traceback of a runtime failure.")) -> None:
    """robustscope: how far is each input from a decision change?"""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")


@app.command("radius")
def radius_command(
    model: Path = typer.Option(..., help="Model file: .json/.ubj (XGBoost), .txt (LightGBM), "
                               ".skops, .pt (TorchScript), .onnx; .pkl/.joblib need "
                               "--trust-pickle."),
    data: Path = typer.Option(..., help="CSV with a label column, or NPZ with arrays X and y."),
    out: Path = typer.Option(..., help="Radius table: .csv, .parquet or .json."),
    threat: ThreatName = typer.Option(ThreatName.linf, help="Norm of the scaled perturbation."),
    label_column: str = typer.Option("label", help="Label column of a CSV."),
    features: Path | None = typer.Option(None, help="Feature-space YAML (bounds, scales, "
                                         "types, mutability)."),
    solver: SolverName = typer.Option(SolverName.auto, help="auto uses the exact solver "
                                      "where the model allows it."),
    max_radius: float | None = typer.Option(None, help="Largest strength tried."),
    budget: int | None = typer.Option(None, help="Model passes allowed per input."),
    rtol: float = typer.Option(0.01, help="Relative bracket width at which bisection stops."),
    seed: int = typer.Option(0, help="Random seed."),
    adversarial_out: Path | None = typer.Option(None, help="NPZ of counterexamples (X_adv)."),
    trust_pickle: bool = typer.Option(False, help="Allow pickle/joblib model files (can run "
                                      "arbitrary code)."),
    device: str = typer.Option("cpu", help="Torch device, e.g. cpu or cuda:0."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or summary."),
    certify: CertifyName = typer.Option(CertifyName.auto, help="Certified lower bounds of "
                                        "torch networks by bound propagation: auto (CROWN "
                                        "when cheaper than the attack), none, ibp, crown or "
                                        "alpha-crown."),
) -> None:
    """Radius of robustness of every input, one row per input."""
    from robustscope.core.space import FeatureSpace
    from robustscope.models.loaders import load_model
    from robustscope.runs.data import load_data
    from robustscope.search.engine import radius

    with reporting_errors():
        for path, what in ((out, "--out"), (adversarial_out, "--adversarial-out")):
            if path is not None and not path.parent.is_dir():
                fail(f"{what}: folder {path.parent} does not exist")
        if out.suffix.lower() not in (".csv", ".parquet", ".json"):
            fail(f"--out {out}: unknown extension '{out.suffix}'; use .csv, .parquet or .json")
        dataset = load_data(data, label_column)
        space = None
        if features is not None:
            space = FeatureSpace.from_yaml(features, int(dataset.X[0].size),
                                           dataset.feature_names, dataset.X.shape[1:])
        clf = load_model(model, trust_pickle=trust_pickle, device=device, example=dataset.X[:2])
        with computing(), _progress(len(dataset.X), quiet) as advance:
            result = radius(clf, dataset.X, dataset.y, threat=threat.value, space=space,
                            solver=solver.value, max_radius=max_radius, budget=budget,
                            rtol=rtol, seed=seed, device=device, progress=advance,
                            certify=certify.value)
        result.save(out)
        if adversarial_out is not None:
            result.save_adversarial(adversarial_out)
        if not quiet:
            print_summary(result, f"{model.name} · {threat.value} · solver {solver.value}")
            Console().print(f"wrote {out}" + (f" and {adversarial_out}" if adversarial_out
                                              else ""))


def _progress(total: int, quiet: bool):
    """Context manager yielding a callback that advances a progress bar (on stderr)."""
    import contextlib

    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    if quiet or not sys.stderr.isatty():
        return contextlib.nullcontext(lambda k: None)

    @contextlib.contextmanager
    def bar():
        columns = (TextColumn("radius"), BarColumn(),
                   TextColumn("{task.completed}/{task.total}"), TimeRemainingColumn())
        with Progress(*columns, console=err_console, transient=True) as prog:
            task = prog.add_task("radius", total=total)
            yield lambda k: prog.advance(task, k)

    return bar()


def print_summary(result, title: str) -> None:
    """A one-table summary of a :class:`RadiusResult` on stdout."""
    from rich.table import Table

    s = result.summary()
    table = Table(title=title)
    for col in ("inputs", "clean acc.", "exact", "attacked", "censored", "misclassified",
                "median radius", "min radius", "mean queries"):
        table.add_column(col, justify="right")
    table.add_row(str(s["n"]), f"{s['clean_accuracy']:.3f}", str(s["exact"]),
                  str(s["attacked"]), str(s["censored"]), str(s["misclassified"]),
                  f"{s['median_radius']:.4g}", f"{s['min_radius']:.4g}",
                  f"{s['mean_queries']:.0f}")
    Console(width=max(Console().width, 120)).print(table)


@app.command("demo")
def demo_command(
    out_dir: Path = typer.Option(Path("robustscope-demo"), help="Folder for the outputs."),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Train two models on scikit-learn's breast-cancer data and report their radii."""
    from robustscope.runs.demo import run_demo

    with reporting_errors():
        if out_dir.exists() and not out_dir.is_dir():
            fail(f"--out-dir {out_dir}: is a file, not a folder")
        with computing():  # the demo trains its own models: any model error is a failure
            run_demo(out_dir, quiet=quiet)


for _name in COMMAND_MODULES:
    importlib.import_module(f"robustscope.cli.{_name}").register(app)


if __name__ == "__main__":  # python -m robustscope.cli.app, as the console script does
    app()
