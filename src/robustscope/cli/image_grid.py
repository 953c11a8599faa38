"""``robustscope image-grid``: 20-point robust-accuracy curves of an image classifier under the
MultiRobustBench threat models, and its accuracy under the common corruptions (CIFAR-10-C),
written as the benchmark's accuracy JSON."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

import typer

from robustscope.cli.common import computing, reporting_errors
from robustscope.core.errors import InputError
from robustscope.threats.registry import THREATS, implemented_threat, threat_names

#: Default ``--threats``: the benchmark's ranked attacks that need no feature network.
DEFAULT_THREATS = ",".join(e.name for e in THREATS
                           if e.ranked and e.implemented and not e.needs_features)


#: ``--threats`` words that name groups: every threat and corruption, or the corruptions.
ALL, CORRUPTIONS_WORD, CORRUPTION_PREFIX = "all", "corruptions", "corruption:"


def expand_threats(threats: str, have_features: bool,
                   notes: list[str] | None) -> tuple[list[str], list[str]]:
    """``--threats`` as (threat names, corruption names).

    Words: a threat's name (any spelling of the registry); ``corruptions`` (the 19 of
    CIFAR-10-C); ``corruption:NAME`` or a corruption's
    own name where no threat has it (``gaussian_noise``; ``snow``, ``fog``, ``brightness``
    and ``contrast`` name the threats); ``all`` (every threat, then every corruption; LPIPS
    only with a feature network, else skipped with a note)."""
    from robustscope.threats.corruptions import CORRUPTIONS, check_corruption
    from robustscope.threats.registry import find_threat

    words = [t.strip() for t in threats.split(",") if t.strip()]
    if not words:
        raise InputError("--threats: give at least one threat")
    names: list[str] = []
    corruptions: list[str] = []
    for word in words:
        low = word.lower()
        if low == ALL:
            for entry in THREATS:
                if entry.needs_features and not have_features:
                    if notes is not None:
                        notes.append(f"skipped {entry.name}: it needs --feature-network")
                    continue
                names.append(entry.name)
            corruptions += list(CORRUPTIONS)
        elif low == CORRUPTIONS_WORD:
            corruptions += list(CORRUPTIONS)
        elif low.startswith(CORRUPTION_PREFIX) or (find_threat(word) is None
                                                   and _is_corruption(word)):
            try:
                corruptions.append(check_corruption(word.split(":", 1)[-1]))
            except InputError as err:
                raise InputError(f"--threats: {err}") from None
        else:
            try:
                names.append(implemented_threat(word).name)
            except InputError as err:
                raise InputError(f"--threats: {err}; or 'all', 'corruptions', "
                                 f"'corruption:NAME'") from None
    return list(dict.fromkeys(names)), list(dict.fromkeys(corruptions))


def _is_corruption(word: str) -> bool:
    from robustscope.threats.corruptions import check_corruption

    try:
        check_corruption(word)
    except InputError:
        return False
    return True


#: Choices of ``--method``.
GridMethod = Enum("GridMethod", {"bisection": "bisection", "full": "full"}, type=str)


def run_image_grid(model: Path, data: Path, out: Path, threats: str = DEFAULT_THREATS,
                   features: Path | None = None, method: str = "bisection", steps: int = 20,
                   restarts: int = 1, seed: int = 0, device: str = "cpu",
                   levels_out: Path | None = None, trust_pickle: bool = False,
                   notes: list[str] | None = None, dataset: str | None = None,
                   batch_size: str = "256") -> dict:
    """Evaluate, write ``out`` (accuracy JSON) and optionally ``levels_out`` (CSV, one row per
    input and threat); return the accuracy dict.

    A threat that needs more colour channels than the images have (the colour and JPEG
    threats on grayscale images) is skipped when it came from the default ``threats``, with
    a line appended to ``notes``; named in ``threats``, it is an error that names it.

    Accuracies are written to the precision they have (a count of ``n`` inputs, see
    :func:`robustscope.scores.accuracy_grid.as_read`), with the grid's ``details``: the
    model (the model file's stem), ``dataset`` (default: the data file's stem), the images'
    ``input_shape`` and the number of ``inputs``; ``leaderboard`` names the model and checks
    the reference's dataset from them.

    Problems with the inputs raise :class:`~robustscope.core.errors.RobustscopeError`; a
    model error while the threats are evaluated raises
    :class:`~robustscope.cli.common.ComputationFailed` (exit code 1 on the command line)."""
    import numpy as np
    import torch

    from robustscope.core.checks import check_device
    from robustscope.core.fileio import atomic_write_all, check_outputs
    from robustscope.models.loaders import load_torchscript
    from robustscope.runs.columns import load_model_for, match_columns
    from robustscope.runs.data import load_data
    from robustscope.search.grid import evaluate_threats

    check_device(device, "--device")
    batch = batch_size.strip().lower()
    if batch != "auto":
        try:
            batch = int(batch)
        except ValueError:
            raise InputError(f"--batch-size: expected an integer >= 1 or 'auto', got "
                             f"{batch_size!r}") from None
        if batch < 1:
            raise InputError(f"--batch-size: expected an integer >= 1 or 'auto', got "
                             f"{batch_size!r}")
    check_outputs([("--out", out, (".json",)), ("--levels-out", levels_out, (".csv",))],
                  {"--model": model, "--data": data, "--features": features})
    names, corruptions = expand_threats(threats, features is not None, notes)
    ds = load_data(data)
    clf = None
    if ds.X.ndim == 2:  # flat rows: images where the model's input shape says how
        clf = load_model_for(model, ds, f"--data {data}", trust_pickle=trust_pickle,
                             device=device)
        ds, _ = match_columns(ds, clf, f"--data {data}")
        if ds.X.ndim == 4 and notes is not None:
            notes.append(clf.shape_note)
    if ds.X.ndim != 4:
        raise InputError(f"--data {data}: images must be an NPZ array X of shape "
                         f"(n, C, H, W); got shape {ds.X.shape}")
    channels = int(ds.X.shape[1])
    lenient = threats == DEFAULT_THREATS or ALL in threats.lower().split(",")
    names = _fitting_threats(names, channels, lenient, notes)
    if corruptions and channels != 3:
        if not lenient:
            raise InputError(f"--threats: the corruptions need 3 colour channels (RGB); the "
                             f"images have {channels}")
        if notes is not None:
            notes.append(f"skipped the corruptions: they need 3 colour channels (RGB); the "
                         f"images have {channels}")
        corruptions = []
    if not names and not corruptions:
        raise InputError("--threats: nothing left to evaluate on these images")
    X = torch.as_tensor(np.asarray(ds.X, dtype=np.float32))  # a copy: ds.X may be read-only
    y = np.asarray(ds.y)
    if clf is None:
        clf = load_model_for(model, ds, f"--data {data}", trust_pickle=trust_pickle,
                             device=device)
    feats = None
    if features is not None:
        if not features.is_file():
            raise InputError(f"--feature-network {features}: no such file")
        try:
            feats = load_torchscript(features, device).eval()
        except (RuntimeError, ValueError) as exc:
            reason = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise InputError(f"--feature-network {features}: not a TorchScript file "
                             f"({reason})") from exc
    from robustscope.search.corruptions import corruption_accuracies

    results, acc = [], {}
    with computing():
        if names:
            results, acc = evaluate_threats(clf, X, y, threats=names, features=feats,
                                            method=method, steps=steps, restarts=restarts,
                                            seed=seed, device=device, batch_size=batch)
        if corruptions:
            corr = corruption_accuracies(clf, X, y, corruptions, seed=seed, device=device,
                                         batch_size=256 if batch == "auto" else batch)
            acc = {**corr.to_benchmark(), **acc}
    from robustscope.scores.accuracy_grid import DETAILS, rounded_document

    acc = rounded_document(acc, len(y))
    details = {"model": Path(model).stem, "dataset": dataset or Path(data).stem,
               "input_shape": [int(d) for d in ds.X.shape[1:]], "inputs": int(len(y))}
    texts = [(out, json.dumps({**acc, DETAILS: details}, indent=1))]
    if levels_out is not None:
        import pandas as pd

        frame = pd.concat([r.to_dataframe() for r in results], ignore_index=True)
        texts.append((levels_out, frame.to_csv(index=False)))
    # both files or neither
    atomic_write_all([(path, lambda tmp, text=text: tmp.write_text(text))
                      for path, text in texts])
    return acc


def _fitting_threats(names: list[str], channels: int, default: bool,
                     notes: list[str] | None) -> list[str]:
    """``names`` without the threats that need another number of colour channels than
    ``channels``: dropped with a note when ``default``, an :class:`InputError` otherwise."""
    entries = {name: implemented_threat(name) for name in names}
    misfit = [n for n, e in entries.items() if e.channels not in (None, channels)]
    if not misfit:
        return names
    need = ", ".join(f"{n} ({entries[n].channels} channels)" for n in misfit)
    if not default:
        raise InputError(f"--threats: {need} cannot run on images with {channels} "
                         f"channel(s); leave {'it' if len(misfit) == 1 else 'them'} out")
    if notes is not None:
        notes.append(f"skipped {', '.join(misfit)}: they need 3 colour channels (RGB); "
                     f"the images have {channels}")
    return [n for n in names if n not in misfit]


def register(app: typer.Typer) -> None:
    """Add the ``image-grid`` command to ``app``."""

    @app.command("image-grid")
    def image_grid(
        model: Path = typer.Option(..., help="Image classifier: TorchScript .pt (logits), "
                                   ".onnx, or any format `robustscope radius` reads."),
        data: Path = typer.Option(..., help="NPZ with X (n, C, H, W) in [0, 1] and y."),
        out: Path = typer.Option(..., help="Accuracy JSON (MultiRobustBench format)."),
        threats: str = typer.Option(DEFAULT_THREATS, help="Comma-separated threats (names or "
                                    "benchmark names): " + ", ".join(threat_names()) + "; "
                                    "'corruptions' (CIFAR-10-C, accuracy at severities "
                                    "1-5), 'corruption:NAME', or 'all' (every threat and "
                                    "corruption)."),
        features: Path = typer.Option(None, "--feature-network", help="TorchScript feature "
                                      "network for LPIPS (images -> feature map(s)); "
                                      "required for lpips."),
        old_features: Path = typer.Option(None, "--features", hidden=True,
                                          help="Deprecated spelling of --feature-network."),
        method: GridMethod = typer.Option(GridMethod.bisection, help="'bisection' (about "
                                          "log2(20) + 1 attack runs per input) or 'full' "
                                          "(every level)."),
        steps: int = typer.Option(20, min=1, help="PGD steps per attack run."),
        restarts: int = typer.Option(1, min=1, help="PGD restarts per attack run."),
        seed: int = typer.Option(0, help="Random seed."),
        device: str = typer.Option("cpu", help="Torch device, e.g. cpu or cuda:0."),
        levels_out: Path = typer.Option(None, help="CSV of per-input breaking levels."),
        trust_pickle: bool = typer.Option(False, "--trust-pickle",
                                          help="Allow pickle/joblib model files."),
        dataset: str = typer.Option(None, "--dataset", help="The images' dataset, recorded "
                                    "in the accuracy file (leaderboard compares it with "
                                    "the reference's); default: the --data file's name."),
        batch_size: str = typer.Option("256", "--batch-size", help="Images attacked "
                                       "together, or 'auto' (from free memory and the "
                                       "network's activations)."),
    ) -> None:
        """Robust accuracy at the 20 benchmark strengths of each threat (per-input bisection
        over the grid; every counterexample verified), and accuracy under the corruptions."""
        with reporting_errors():
            if old_features is not None:
                typer.echo("note: --features is deprecated here; use --feature-network",
                           err=True)
                features = features if features is not None else old_features
            notes: list[str] = []
            acc = run_image_grid(model, data, out, threats, features, method.value, steps,
                                 restarts, seed, device, levels_out, trust_pickle, notes,
                                 dataset, batch_size)
            for note in notes:
                typer.echo(f"note: {note}", err=True)
            typer.echo(f"clean accuracy {acc['NoAttack']:.2f}%; wrote {out}")
