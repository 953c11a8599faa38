"""Accuracy grids in the MultiRobustBench format, and their JSON files.

One model's grid (percent, 0..100)::

    {"NoAttack": 82.41, "StAdvAttack": {"0.005": 72.02, "0.01": 59.74, ...}, ...}

Strength keys are ``str(float(round(eps, 5)))``. A file holds either one such grid (the model
is named after the file's stem) or several models::

    {"<model>": {"accuracies": {<grid>}, "details": {"Attacks Used": {"AutoL2Attack": 0.5}, ...}}}
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from robustscope.core.errors import InputError
from robustscope.core.fileio import atomic_write
from robustscope.threats.grids import CLEAN, canonical_eps, eps_key


def _accuracy_value(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where}: accuracy must be a number (percent), got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0.0 or value > 100.0:
        raise InputError(f"{where}: accuracy {value!r} is outside [0, 100] (percent)")
    return value


@dataclass
class AccuracyGrid:
    """Accuracy of one model, in percent (0..100): clean, and per attack per strength.

    ``attacks[attack][eps]`` is the accuracy under ``attack`` at strength ``eps`` (a float
    rounded to 5 decimals, see :func:`robustscope.threats.grids.canonical_eps`). Attack names
    are the benchmark's (``"AutoLinfAttack"``), kept as given.
    """

    clean: float
    attacks: dict[str, dict[float, float]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, doc: Mapping, source: str = "accuracies") -> AccuracyGrid:
        """Parse and validate the benchmark format; ``source`` names the data in errors."""
        if not isinstance(doc, Mapping):
            raise InputError(f"{source}: expected an object of accuracies, got "
                             f"{type(doc).__name__}")
        if CLEAN not in doc:
            raise InputError(f"{source}: no '{CLEAN}' (clean accuracy) entry")
        clean = _accuracy_value(doc[CLEAN], f"{source}: {CLEAN}")
        attacks: dict[str, dict[float, float]] = {}
        for attack, curve in doc.items():
            if attack == CLEAN:
                continue
            if not isinstance(curve, Mapping):
                raise InputError(f"{source}: attack '{attack}' must map strengths to "
                                 f"accuracies, got {type(curve).__name__}")
            points: dict[float, float] = {}
            for key, value in curve.items():
                where = f"{source}: {attack} at strength {key!r}"
                try:
                    eps = canonical_eps(key)
                except InputError as err:
                    raise InputError(f"{where}: strength key is not a number >= 0") from err
                if eps in points:
                    raise InputError(f"{where}: strength given twice (after rounding to 5 "
                                     "decimals)")
                points[eps] = _accuracy_value(value, where)
            attacks[str(attack)] = dict(sorted(points.items()))
        return cls(clean=clean, attacks=attacks)

    def to_dict(self) -> dict:
        """The benchmark format: ``NoAttack`` first, strengths increasing, keys ``eps_key``."""
        doc: dict = {CLEAN: self.clean}
        for attack, curve in self.attacks.items():
            doc[attack] = {eps_key(eps): acc for eps, acc in sorted(curve.items())}
        return doc

    def get(self, attack: str, eps: float) -> float | None:
        """Accuracy at one point, ``None`` where the grid has no value."""
        if attack == CLEAN:
            return self.clean
        return self.attacks.get(attack, {}).get(canonical_eps(eps))

    def strengths(self, attack: str) -> list[float]:
        """The strengths held for ``attack``, increasing (empty when the attack is absent)."""
        return sorted(self.attacks.get(attack, {}))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, AccuracyGrid) and self.clean == other.clean
                and self.attacks == other.attacks)


@dataclass
class ModelAccuracies:
    """One model's accuracy grid with its descriptive ``details`` (title, architecture,
    ``Attacks Used`` = training strength per attack, ...)."""

    name: str
    grid: AccuracyGrid
    details: dict = field(default_factory=dict)

    @property
    def trained_on(self) -> dict[str, float] | None:
        """``details["Attacks Used"]`` (attack -> training strength), or ``None`` if absent."""
        used = self.details.get("Attacks Used")
        if used is None:
            return None
        if not isinstance(used, Mapping):
            raise InputError(f"model '{self.name}': details 'Attacks Used' must map attacks "
                             f"to training strengths, got {type(used).__name__}")
        return {str(attack): check_training_strength(
                    eps, f"model '{self.name}': 'Attacks Used' strength of '{attack}'")
                for attack, eps in used.items()}


def check_training_strength(eps: object, name: str) -> float:
    """``eps``, the strength a model was adversarially trained at, as a float >= 0 (``inf``:
    trained at every strength); anything else, NaN included, is an :class:`InputError`
    naming ``name``. The one check of a training strength, for accuracy files and
    :func:`robustscope.scores.multiattack.point_table`'s ``trained_on``."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise InputError(f"{name} must be a number >= 0 (not NaN), got {eps!r}")
    return float(eps)


#: The key of a single grid's descriptive fields (model, dataset, input_shape, inputs): no
#: attack, read into :attr:`ModelAccuracies.details`.
DETAILS = "details"


def as_read(accuracy: float, n: int) -> float:
    """A percentage ``100 * k / n`` rounded to the precision it has: the fewest decimals that
    still tell every count ``k`` of ``n`` apart (``57.99999999999999`` of 50 inputs: 58)."""
    if not math.isfinite(accuracy) or n < 1:
        return accuracy
    decimals = max(0, math.ceil(math.log10(n / 100)))
    return round(100 * round(accuracy * n / 100) / n, decimals)


def rounded_document(doc: Mapping, n: int) -> dict:
    """An accuracy-file grid (``{"NoAttack": .., attack: {strength: ..}}``) with every
    accuracy :func:`as_read` for ``n`` inputs."""
    return {k: ({e: as_read(float(a), n) for e, a in v.items()} if isinstance(v, Mapping)
                else as_read(float(v), n)) for k, v in doc.items()}


def parse_accuracy_document(doc: object, default_name: str,
                            source: str = "accuracies") -> list[ModelAccuracies]:
    """Models in a parsed JSON document: a single grid (named ``default_name``) or the
    multi-model format. ``source`` names the document in errors."""
    if not isinstance(doc, Mapping) or not doc:
        raise InputError(f"{source}: expected a non-empty JSON object (one model's accuracies "
                         "with 'NoAttack', or {model: {'accuracies': ...}})")
    if CLEAN in doc:
        # one model's grid; image-grid adds its "details" (model, dataset, input shape)
        details = doc.get(DETAILS) or {}
        if not isinstance(details, Mapping):
            raise InputError(f"{source}: '{DETAILS}' must be an object")
        grid = AccuracyGrid.from_dict({k: v for k, v in doc.items() if k != DETAILS}, source)
        return [ModelAccuracies(str(details.get("model") or default_name), grid,
                                dict(details))]
    models = []
    for name, entry in doc.items():
        if not isinstance(entry, Mapping) or "accuracies" not in entry:
            raise InputError(f"{source}: entry '{name}' has no 'accuracies' (and the file has "
                             f"no top-level '{CLEAN}'); expected one model's accuracies or "
                             "{model: {'accuracies': {...}, 'details': {...}}}")
        details = entry.get("details") or {}
        if not isinstance(details, Mapping):
            raise InputError(f"{source}: model '{name}': 'details' must be an object")
        grid = AccuracyGrid.from_dict(entry["accuracies"], f"{source}: model '{name}'")
        model = ModelAccuracies(str(name), grid, dict(details))
        _ = model.trained_on  # validates 'Attacks Used' now, while the file is known
        models.append(model)
    return models


def read_accuracy_file(path: str | Path) -> list[ModelAccuracies]:
    """Models in a benchmark accuracy JSON file (single model: named by its details'
    ``model``, else after the file stem)."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"accuracies file {path}: is a folder, not a file")
    if not path.is_file():
        raise InputError(f"accuracies file {path}: not found")
    try:
        doc = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"accuracies file {path}: not valid JSON ({err})") from err
    return parse_accuracy_document(doc, path.stem, source=str(path))


def accuracy_document(models: Iterable[ModelAccuracies], single: bool = False) -> dict:
    """The JSON document of ``models``: multi-model format, or (``single=True``, exactly one
    model) the bare grid."""
    models = list(models)
    if single:
        if len(models) != 1:
            raise InputError(f"single-model format needs exactly one model, got {len(models)}")
        return models[0].grid.to_dict()
    names = [m.name for m in models]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise InputError(f"model names must be unique; repeated: {', '.join(sorted(dup))}")
    return {m.name: {"accuracies": m.grid.to_dict(), "details": m.details} for m in models}


def write_accuracy_file(path: str | Path, models: Iterable[ModelAccuracies],
                        single: bool = False) -> None:
    """Write ``models`` as benchmark JSON (see :func:`accuracy_document`)."""
    doc = accuracy_document(models, single=single)
    text = json.dumps(doc, indent=1)
    atomic_write(path, lambda tmp: tmp.write_text(text))
