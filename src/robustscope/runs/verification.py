"""Verification instances as the competitions list them: ``onnx,vnnlib,timeout`` per row.

:func:`read_instances` reads the list (paths relative to the list's folder, as the
competitions' ``instances.csv`` are); :func:`run_instances` answers every row with
:func:`robustscope.search.verdict.verify_property`, loading each network once (as a white
box where its ONNX graph converts) and computing each robustness center's radius bracket
once, for every ``eps`` it is asked at; :func:`result_text` is the competition's result
file (the word, then a ``sat``'s counterexample).
"""

from __future__ import annotations

import csv
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robustscope.core.errors import InputError
from robustscope.core.vnnlib import RobustnessForm, counterexample_text, read_property
from robustscope.models.base import Classifier
from robustscope.models.loaders import load_model
from robustscope.search.verdict import SAT, Bracket, Verdict, robustness_bracket, verify_property


@dataclass
class Instance:
    """One row of an instance list: the network, the property, the time limit (seconds)."""

    onnx: Path
    vnnlib: Path
    timeout: float


@dataclass
class Answer:
    """An instance and its verdict."""

    instance: Instance
    verdict: Verdict


def read_instances(path: str | Path) -> list[Instance]:
    """The rows of an ``onnx,vnnlib,timeout`` CSV (no header; a header row naming the
    columns is skipped); relative paths are read from the CSV's folder."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"--instances {path}: cannot be read ({exc.strerror or exc})") from None
    rows = []
    for n, row in enumerate(csv.reader(text.splitlines()), start=1):
        if not row or not "".join(row).strip():
            continue
        if len(row) != 3:
            raise InputError(f"--instances {path}: row {n} has {len(row)} fields; "
                             "expected onnx,vnnlib,timeout")
        onnx, spec, limit = (f.strip() for f in row)
        if n == 1 and limit.lower() == "timeout":
            continue
        try:
            seconds = float(limit)
        except ValueError:
            raise InputError(f"--instances {path}: row {n}: timeout '{limit}' is not a "
                             "number") from None
        if not seconds > 0:
            raise InputError(f"--instances {path}: row {n}: timeout must be positive")
        files = [Path(f) if Path(f).is_absolute() else path.parent / f for f in (onnx, spec)]
        for what, f in zip(("onnx", "vnnlib"), files, strict=True):
            if not f.is_file():
                raise InputError(f"--instances {path}: row {n}: {what} file {f} does not "
                                 "exist")
        rows.append(Instance(files[0], files[1], seconds))
    if not rows:
        raise InputError(f"--instances {path}: no instances")
    return rows


def confirmation(model: Classifier) -> Callable[[np.ndarray], np.ndarray] | None:
    """How a counterexample is confirmed: by ONNX Runtime on the file itself (an ONNX
    model, white box or not), else by the model (``None``)."""
    graph = getattr(model, "onnx_graph", None)
    if graph is None:
        return None
    shape = tuple(s if s > 0 else 1 for s in graph.shape) if graph.shape else None

    def run(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float32)
        return graph.run(x.reshape(len(x), *shape) if shape else x)
    return run


def answer(model: Classifier, spec: str | Path, timeout: float, certify: str = "crown",
           brackets: dict | None = None, seed: int = 0) -> Verdict:
    """The verdict on the property in ``spec``; ``brackets`` caches the radius brackets of
    robustness centers (keyed by the center, label and clip range) across calls."""
    prop = read_property(spec)
    cache = brackets if brackets is not None else {}

    def bracket(form: RobustnessForm) -> Bracket:
        # centers read back from boxes of different eps differ by a rounding: keyed to 1e-9
        # (the verdict widens the certificate by the distance between the two centers)
        key = (hashlib.sha1(np.round(form.center, 9).tobytes()).hexdigest(), form.label,
               form.clip_lower, form.clip_upper)
        if key not in cache:
            cache[key] = robustness_bracket(model, form, timeout / 2, certify, seed)
        return cache[key]

    return verify_property(model, prop, timeout, confirm=confirmation(model),
                           bracket=bracket if certify != "off" else _no_bracket, seed=seed)


def _no_bracket(form: RobustnessForm) -> Bracket:
    return Bracket(0.0, float("inf"), None, 0.0)


def run_instances(instances: list[Instance], certify: str = "crown", seed: int = 0,
                  done: Callable[[Answer], None] | None = None,
                  brackets: dict[Path, dict] | None = None) -> list[Answer]:
    """Every instance's verdict, in order; ``done`` is called after each. ``brackets``,
    where given, receives per network the radius brackets computed (by center key)."""
    models: dict[Path, Classifier] = {}
    brackets = {} if brackets is None else brackets
    out = []
    for inst in instances:
        t0 = time.perf_counter()
        if inst.onnx not in models:
            models[inst.onnx] = load_model(inst.onnx)
            brackets[inst.onnx] = {}
        left = max(inst.timeout - (time.perf_counter() - t0), 0.01)
        verdict = answer(models[inst.onnx], inst.vnnlib, left, certify, brackets[inst.onnx],
                         seed)
        verdict.seconds = time.perf_counter() - t0
        out.append(Answer(inst, verdict))
        if done is not None:
            done(out[-1])
    return out


def result_text(verdict: Verdict) -> str:
    """The competition's result file: the word on the first line; for ``sat`` the
    counterexample after it."""
    text = verdict.result + "\n"
    if verdict.result == SAT:
        text += counterexample_text(verdict.x, verdict.y)
    return text
