"""``robustscope verify``: VNN-LIB properties of ONNX networks, answered ``sat`` /
``unsat`` / ``unknown`` / ``timeout`` as the verification competitions ask."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from robustscope.cli.common import computing, reporting_errors

#: How the radius bracket of a robustness property's center is certified (``milp``: the
#: network MILP, ``radius(solver="exact")``); ``off``: no bracket (every property goes
#: through the attack and the bounds at its own box).
BRACKET_CHOICES = ("crown", "alpha-crown", "bab", "milp", "none", "off")


def register(app: typer.Typer) -> None:
    """Add the ``verify`` command to ``app``."""

    @app.command("verify")
    def verify_command(
        model: Path | None = typer.Option(None, help="ONNX network (or any model file "
                                          "robustscope reads)."),
        spec: Path | None = typer.Option(None, help="VNN-LIB property (.vnnlib)."),
        timeout: float = typer.Option(120.0, help="Seconds for the property."),
        out: Path | None = typer.Option(None, help="Result file: the word sat / unsat / "
                                        "unknown / timeout, then a sat's counterexample "
                                        "((X_0 v) ... (Y_0 v) ...)."),
        instances: Path | None = typer.Option(None, help="CSV of onnx,vnnlib,timeout rows "
                                              "(paths relative to it): answer them all."),
        out_dir: Path | None = typer.Option(None, help="With --instances: one result file "
                                            "per row and summary.csv."),
        bracket: str = typer.Option("crown", help="Certificate of a robustness property's "
                                    "radius bracket: " + ", ".join(BRACKET_CHOICES) + "."),
        seed: int = typer.Option(0, help="Seed of the attacks."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the result word(s)."),
    ) -> None:
        """Answer a VNN-LIB property (or a list of instances): sat with a counterexample the
        model confirms, unsat when certified, else unknown / timeout."""
        from robustscope.core.errors import InputError
        from robustscope.core.fileio import atomic_write, check_output_folder, check_outputs

        with reporting_errors():
            if bracket not in BRACKET_CHOICES:
                raise InputError(f"--bracket '{bracket}': expected one of "
                                 f"{', '.join(BRACKET_CHOICES)}")
            if not timeout > 0:
                raise InputError(f"--timeout {timeout}: must be positive")
            if instances is not None:
                if model is not None or spec is not None or out is not None:
                    raise InputError("--instances runs a list; give --model / --spec / --out "
                                     "only for one property")
                if out_dir is not None:
                    check_output_folder("--out-dir", out_dir, {"--instances": instances})
                _run_list(instances, out_dir, bracket, seed, quiet)
                return
            if model is None or spec is None:
                raise InputError("give --model and --spec (or --instances)")
            check_outputs([("--out", out, None)], {"--model": model, "--spec": spec})
            from robustscope.core.vnnlib import read_property
            from robustscope.models.loaders import load_model
            from robustscope.runs.verification import answer, result_text

            prop = read_property(spec)
            center = (prop.lower + prop.upper) / 2
            from robustscope.models.shapes import ShapeError

            with computing():  # the box's center probes a model that needs an example
                try:
                    clf = load_model(model, example=center[None])
                except ShapeError as exc:
                    raise InputError(f"--spec {spec}: declares {prop.n_inputs} inputs X_i; "
                                     f"the model takes {exc.takes.text()} "
                                     f"({exc.takes.source})") from None
                verdict = answer(clf, spec, timeout, bracket, seed=seed)
            text = result_text(verdict)
            if out is not None:
                atomic_write(out, lambda p: p.write_text(text))
            console = Console()
            console.print(verdict.result, highlight=False)
            if not quiet:
                how = f" by {verdict.method}" if verdict.method else ""
                console.print(f"{model.name} · {spec.name}: {verdict.result}{how} in "
                              f"{verdict.seconds:.2f} s, {verdict.queries} model passes",
                              highlight=False)
                note = getattr(clf, "load_note", None)
                for line in ([note] if note else []) + verdict.notes:
                    console.print(f"note: {line}", highlight=False)


def _run_list(path: Path, out_dir: Path | None, bracket: str, seed: int, quiet: bool) -> None:
    """Every instance of the list, a line each as it finishes, then the summary table."""
    import pandas as pd

    from robustscope.core.fileio import atomic_write
    from robustscope.report.terminal import Col, fitted_table
    from robustscope.runs.verification import read_instances, result_text, run_instances

    rows = read_instances(path)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    console = Console()
    records = []

    def done(ans) -> None:
        v, inst = ans.verdict, ans.instance
        n = len(records)
        records.append({"onnx": inst.onnx.name, "vnnlib": inst.vnnlib.name,
                        "timeout": inst.timeout, "result": v.result, "method": v.method,
                        "seconds": round(v.seconds, 3), "queries": v.queries})
        if out_dir is not None:
            name = f"{n:04d}_{inst.onnx.stem}_{inst.vnnlib.stem}.txt"
            atomic_write(out_dir / name, lambda p: p.write_text(result_text(v)))
        if not quiet:
            console.print(f"{n + 1}/{len(rows)} {inst.onnx.name} {inst.vnnlib.name}: "
                          f"{v.result}" + (f" ({v.method})" if v.method else "")
                          + f" {v.seconds:.2f} s, {v.queries} passes", highlight=False)
        else:
            console.print(v.result, highlight=False)

    with computing():
        run_instances(rows, bracket, seed, done)
    table = pd.DataFrame(records)
    if out_dir is not None:
        atomic_write(out_dir / "summary.csv", lambda p: table.to_csv(p, index=False))
    if quiet:
        return
    counts = table["result"].value_counts()
    solved = int(counts.get("sat", 0) + counts.get("unsat", 0))
    columns = (Col("instances"), Col("solved"), Col("sat"), Col("unsat"), Col("unknown"),
               Col("timeout"), Col("mean s"), Col("max s"),
               Col("passes", priority=1, note="passes: model rows (forward + backward) of "
                   "all instances, radius brackets included"))
    row = [str(len(table)), str(solved), *(str(int(counts.get(k, 0))) for k in
                                            ("sat", "unsat", "unknown", "timeout")),
           f"{table['seconds'].mean():.2f}", f"{table['seconds'].max():.2f}",
           str(int(table["queries"].sum()))]
    console.print(fitted_table(f"{path.name}", columns, [row], console))
