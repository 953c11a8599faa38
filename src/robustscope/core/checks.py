"""Input checks at robustscope's boundaries, in the manner of scikit-learn's ``check_*``.

Every public entry point validates its arguments once, with these helpers, and every error
names the argument, the row and the feature at fault. Internals trust what passed.

One label convention: the search works on class *indices* ``0..K-1``. A model that knows its
classes (``classes_``) is given labels as those class values, which :func:`check_labels` maps
to indices; a model that does not is given indices.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from robustscope.core.errors import InputError


def plain(value: object) -> object:
    """A numpy scalar as the Python value it holds (for readable messages and lookups)."""
    return value.item() if hasattr(value, "item") else value


def check_array(X: object, name: str = "X", min_rows: int = 1) -> np.ndarray:
    """``X`` as a float64 array of shape ``(n, d)`` or ``(n, C, H, W)``, every entry finite.

    Raises :class:`InputError` naming the first row and feature that is NaN or infinite.
    """
    X = X.detach().cpu().numpy() if torch.is_tensor(X) else np.asarray(X)
    if X.ndim < 2 or X.shape[0] < min_rows:
        raise InputError(f"{name} must have shape (n, d) or (n, C, H, W) with n >= {min_rows}, "
                         f"got {X.shape}")
    if not (np.issubdtype(X.dtype, np.number) or X.dtype == bool):
        raise InputError(f"{name} must be numeric, got dtype {X.dtype}")
    X = X.astype(np.float64, copy=False)
    check_finite(X, name)
    return X


def check_finite(X: np.ndarray, name: str = "X", names: Sequence[str] | None = None) -> None:
    """Raise :class:`InputError` naming the first row and feature of ``X`` ``(n, ...)`` that
    is NaN or infinite (the feature by its name in ``names`` where given, else its index)."""
    flat = np.asarray(X).reshape(len(X), -1)
    bad = ~np.isfinite(flat)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        feature = col if names is None else f"'{names[col]}'"
        raise InputError(f"{name}: row {row}, feature {feature} is {flat[row, col]}; "
                         "NaN and inf are not valid inputs")


def found_labels(y: np.ndarray, limit: int = 8) -> list[object]:
    """The distinct labels of ``y``, sorted (by their text where they do not compare), at
    most ``limit`` of them."""
    values = list(dict.fromkeys(plain(v) for v in np.asarray(y).tolist()))
    try:
        values.sort()
    except TypeError:  # mixed types
        values.sort(key=str)
    return values[:limit]


def _said(values: Sequence[object], total: int) -> str:
    text = ", ".join(str(v) for v in values)
    return text + (f", … ({total} in all)" if total > len(values) else "")


def _mapping(values: Sequence[object], classes: Sequence[object]) -> str:
    """How to map ``values`` (the labels found) to ``classes``: the order scikit-learn's
    LabelEncoder gives (sorted), as an example to check against how the model was fitted."""
    pairs = ", ".join(f"{v}={c}" for v, c in zip(values, classes, strict=False))
    return ("write each label as the class the model was fitted with; numbered in sorted "
            f"order, as scikit-learn's LabelEncoder does, that is {pairs} (check it against "
            "how the model was trained)")


def check_labels(y: object, n: int, n_classes: int, classes: Sequence | np.ndarray | None = None,
                 name: str = "y") -> np.ndarray:
    """Labels ``y`` ``(n,)`` as int64 class indices ``0..n_classes-1``.

    With ``classes`` (the model's class values, index order), each label must be one of them
    and is mapped to its index; without, labels must already be integer indices (integral
    floats are accepted). Errors name the row and the offending label.
    """
    y = y.detach().cpu().numpy() if torch.is_tensor(y) else np.asarray(y)
    if y.shape != (n,):
        raise InputError(f"{name} must have shape ({n},) to match the inputs, got {y.shape}")
    if classes is not None:
        lookup = {plain(c): i for i, c in enumerate(classes)}
        out = np.empty(n, dtype=np.int64)
        for row, value in enumerate(y):
            key = plain(value)
            if key not in lookup:
                known = [plain(c) for c in classes]
                found = found_labels(y, limit=max(8, len(known)))
                total = len(set(map(plain, y.tolist())))
                hint = ""
                if total <= len(known) and any(isinstance(v, str) for v in found) \
                        and not any(isinstance(c, str) for c in known):
                    hint = "; " + _mapping(found, known)
                raise InputError(f"{name}: row {row} has label {key!r}, which is not one of the "
                                 f"model's classes {known} (the labels found: "
                                 f"{_said(found, total)}){hint}")
            out[row] = lookup[key]
        return out
    if not np.issubdtype(y.dtype, np.integer):
        if np.issubdtype(y.dtype, np.floating) and np.all(np.isfinite(y)) \
                and np.all(np.mod(y, 1) == 0):
            y = y.astype(np.int64)
        else:
            found = found_labels(y, limit=max(8, n_classes))
            total = len(set(map(plain, y.tolist())))
            hint = ""
            if total <= n_classes:
                hint = "; " + _mapping(found, range(n_classes))
            raise InputError(f"{name}: labels must be class indices 0..{n_classes - 1} (the model "
                             f"stores no class names); the labels found: {_said(found, total)}"
                             f"{hint}")
    bad = (y < 0) | (y >= n_classes)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputError(f"{name}: row {row} has label {y[row]}, outside the model's classes "
                         f"0..{n_classes - 1}")
    return y.astype(np.int64)


def check_seed(seed: object, name: str = "seed") -> int:
    """``seed`` as a non-negative int (``None`` is refused: results must be reproducible)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise InputError(f"{name} must be a non-negative integer (the same seed gives the "
                         f"same numbers), got {seed!r}")
    if seed < 0:
        raise InputError(f"{name} must be a non-negative integer, got {seed}")
    return int(seed)


def check_device(device: str | torch.device, name: str = "device") -> torch.device:
    """``device`` as a ``torch.device`` that this machine has; :class:`InputError` naming
    ``name`` for a device string torch does not know (``nosuch``) or a device that is not
    available here (``cuda`` without a GPU or without torch's CUDA build, ``cuda:3`` on a
    machine with fewer GPUs, ``mps`` off Apple silicon)."""
    if isinstance(device, torch.device):
        dev = device
    else:
        try:
            dev = torch.device(str(device))
        except (RuntimeError, ValueError) as exc:
            raise InputError(f"{name}: unknown device {device!r} (use cpu, cuda or cuda:N, "
                             "mps)") from exc
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            why = ("this torch is built without CUDA" if torch.version.cuda is None
                   else "no CUDA GPU is visible")
            raise InputError(f"{name} {device}: not available ({why}); use cpu")
        if dev.index is not None and dev.index >= count:
            raise InputError(f"{name} {device}: not available (this machine has {count} CUDA "
                             f"device(s), cuda:0 to cuda:{count - 1})")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise InputError(f"{name} {device}: not available on this machine; use cpu")
    elif dev.type not in ("cpu", "meta"):
        raise InputError(f"{name} {device}: robustscope runs on cpu, cuda or mps devices")
    return dev


def make_generator(seed: int, device: str | torch.device = "cpu") -> torch.Generator:
    """The one way robustscope seeds torch randomness: a generator on ``device``."""
    return torch.Generator(device=torch.device(device)).manual_seed(check_seed(seed))


def check_positive(value: object, name: str, integer: bool = False,
                   allow_none: bool = False) -> float | int | None:
    """``value`` as a finite number > 0 (an int when ``integer``), or ``None`` if allowed."""
    if value is None and allow_none:
        return None
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if ok and integer:
        ok = float(value) == int(value)
    if not ok or not np.isfinite(float(value)) or value <= 0:
        kind = "a positive integer" if integer else "a finite number > 0"
        raise InputError(f"{name} must be {kind}, got {value!r}")
    return int(value) if integer else float(value)


def check_columns(X: object, names: Sequence[str] | None, name: str = "X") -> object:
    """``X`` with its columns in the order of ``names`` (the model's feature names), when
    ``X`` is a DataFrame and the model has names; ``X`` unchanged otherwise.

    Columns are matched by name: a column the model needs that ``X`` lacks, or one ``X`` has
    that the model does not know, is an :class:`InputError` naming it.
    """
    columns = getattr(X, "columns", None)
    if names is None or columns is None or torch.is_tensor(X):
        return X
    return X.iloc[:, column_order([str(c) for c in columns], names, name)]


def column_order(have: Sequence[str], names: Sequence[str], name: str = "X") -> list[int]:
    """Positions in ``have`` (the data's column names) of ``names`` (the model's), in the
    model's order: ``X[:, column_order(...)]`` has the model's columns.

    Raises :class:`InputError` naming a repeated column of the data, a column the model
    needs that the data lacks, or a column of the data that the model does not know."""
    have = [str(c) for c in have]
    names = [str(n) for n in names]
    if len(set(have)) != len(have):
        dup = sorted({c for c in have if have.count(c) > 1})
        raise InputError(f"{name}: duplicate column(s) {', '.join(dup)}")
    missing = [n for n in names if n not in have]
    extra = [c for c in have if c not in set(names)]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing column(s) {', '.join(missing)}")
        if extra:
            parts.append(f"unknown column(s) {', '.join(extra)}")
        raise InputError(f"{name}: {'; '.join(parts)} (the model was fitted on the columns "
                         f"{', '.join(names)})")
    position = {c: i for i, c in enumerate(have)}
    return [position[n] for n in names]
