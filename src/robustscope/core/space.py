"""The neighbourhood's domain: which inputs are valid, and in which units distances count.

A :class:`FeatureSpace` holds, for each of the ``d`` features of a flattened input, a lower
and an upper bound, a scale, a type and a mutable flag. Perturbation sizes are measured on
``(x' - x) / scale``: a Linf radius of 0.05 in a range-scaled space means "5% of each
feature's range".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import yaml

from robustscope.core.checks import check_finite
from robustscope.core.errors import FeatureSpaceError, InputError
from robustscope.core.relations import Relations, project_relations

FEATURE_TYPES = ("real", "integer", "binary", "categorical")
_DEFAULT = {"lower": -np.inf, "upper": np.inf, "scale": None, "type": "real", "mutable": True}
#: Values this far outside a bound (relative to the scale) still count as inside.
BOUND_TOLERANCE = 1e-9


@dataclass
class FeatureSpace:
    """Per-feature bounds, scales, types and mutability of a flattened input.

    Attributes (all of length ``d`` = number of features)
    ----------
    lower, upper : float64 arrays; ``-inf`` / ``inf`` for unbounded.
    scale : float64 array, > 0; perturbations are measured in units of ``scale``.
    types : array of str in ``FEATURE_TYPES``.
    mutable : bool array; immutable features are never changed.
    names : feature names.
    groups : one-hot groups, each an int array of feature indices (categorical features).
    shape : the unflattened input shape (e.g. ``(3, 32, 32)`` for images).
    relations : optional :class:`Relations` between features (``A x <= b``, ``C x == d``
        in raw units, a predicate ``valid(X)``); see :meth:`constrain`.
    """

    lower: np.ndarray
    upper: np.ndarray
    scale: np.ndarray
    types: np.ndarray
    mutable: np.ndarray
    names: list[str]
    groups: list[np.ndarray] = field(default_factory=list)
    shape: tuple[int, ...] | None = None
    relations: Relations | None = None

    def __post_init__(self) -> None:
        d = len(self.lower)
        self.lower = np.asarray(self.lower, dtype=np.float64).reshape(-1)
        self.upper = np.asarray(self.upper, dtype=np.float64).reshape(-1)
        self.scale = np.asarray(self.scale, dtype=np.float64).reshape(-1)
        self.types = np.asarray(self.types, dtype=object).reshape(-1)
        self.mutable = np.asarray(self.mutable, dtype=bool).reshape(-1)
        self.names = [str(n) for n in self.names]
        self.shape = (d,) if self.shape is None else tuple(int(s) for s in self.shape)
        for attr in ("upper", "scale", "types", "mutable", "names"):
            if len(getattr(self, attr)) != d:
                raise FeatureSpaceError(f"feature space: '{attr}' has {len(getattr(self, attr))} "
                                        f"entries but 'lower' has {d}")
        if int(np.prod(self.shape)) != d:
            raise FeatureSpaceError(f"feature space: shape {self.shape} does not hold {d} features")
        for j in range(d):
            name = self.names[j]
            if np.isnan(self.lower[j]) or np.isnan(self.upper[j]):
                raise FeatureSpaceError(f"feature '{name}': bounds must not be NaN")
            if self.lower[j] > self.upper[j]:
                raise FeatureSpaceError(
                    f"feature '{name}': lower bound {self.lower[j]} > upper bound {self.upper[j]}"
                )
            if not (np.isfinite(self.scale[j]) and self.scale[j] > 0):
                raise FeatureSpaceError(f"feature '{name}': scale must be finite and > 0, "
                                        f"got {self.scale[j]}")
            if self.types[j] not in FEATURE_TYPES:
                raise FeatureSpaceError(f"feature '{name}': unknown type '{self.types[j]}'; "
                                        f"expected one of {', '.join(FEATURE_TYPES)}")
        self.groups = [np.asarray(g, dtype=np.int64) for g in self.groups]
        grouped = np.concatenate(self.groups) if self.groups else np.zeros(0, dtype=np.int64)
        categorical = np.flatnonzero(self.types == "categorical")
        if set(grouped.tolist()) != set(categorical.tolist()):
            raise FeatureSpaceError("feature space: every categorical feature must belong to "
                                    "exactly one one-hot group, and groups hold only those")
        if self.relations is not None and self.relations.n_features != d:
            raise FeatureSpaceError(f"feature space: relations have {self.relations.n_features} "
                                    f"columns but the space has {d} features")

    # -- construction -----------------------------------------------------------------------
    @property
    def n_features(self) -> int:
        return len(self.lower)

    @classmethod
    def box(cls, shape: Sequence[int] | int, lower: float = 0.0,
            upper: float = 1.0) -> FeatureSpace:
        """Every feature in ``[lower, upper]`` with scale 1 (the image default: the box [0, 1])."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        d = int(np.prod(shape))
        return cls(np.full(d, lower), np.full(d, upper), np.ones(d), np.full(d, "real", object),
                   np.ones(d, bool), [str(i) for i in range(d)], shape=shape)

    @classmethod
    def from_arrays(
        cls,
        lower: Sequence[float] | np.ndarray,
        upper: Sequence[float] | np.ndarray,
        scale: Sequence[float] | np.ndarray | None = None,
        types: Sequence[str] | None = None,
        mutable: Sequence[bool] | None = None,
        names: Sequence[str] | None = None,
        groups: Sequence[Sequence[int]] | None = None,
        shape: Sequence[int] | None = None,
    ) -> FeatureSpace:
        """From explicit arrays; a missing scale is ``upper - lower`` where finite, else 1."""
        lower = np.asarray(lower, dtype=np.float64).reshape(-1)
        upper = np.asarray(upper, dtype=np.float64).reshape(-1)
        d = len(lower)
        return cls(
            lower, upper,
            default_scale(lower, upper) if scale is None else scale,
            np.full(d, "real", object) if types is None else types,
            np.ones(d, bool) if mutable is None else mutable,
            [str(i) for i in range(d)] if names is None else list(names),
            [] if groups is None else list(groups),
            None if shape is None else tuple(shape),
        )

    @classmethod
    def from_data(
        cls,
        X: np.ndarray,
        names: Sequence[str] | None = None,
        types: dict[str, str] | None = None,
        immutable: Sequence[str] = (),
    ) -> FeatureSpace:
        """Bounds from the data, **per column** (min and max of each feature over the rows).

        ``X`` has shape ``(n, d)``; ``types`` maps feature names to a type; ``immutable``
        names features that must not change. Scale = range (1 for a constant column).
        """
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[0] == 0:
            raise InputError(f"from_data: X must be a non-empty 2-D array, got shape {X.shape}")
        if X.shape[0] == 1:
            raise InputError("feature ranges are taken from the data when no feature space is "
                             "given, and one row gives every feature a range of 0 (nothing "
                             "could be perturbed); give a feature space (--features, "
                             "features: in a spec, space= in Python) or at least 2 rows")
        if not np.isfinite(X).all():
            row, col = np.argwhere(~np.isfinite(X))[0]
            raise InputError(f"from_data: X has a non-finite value at row {row}, column {col}")
        names = [str(i) for i in range(X.shape[1])] if names is None else [str(n) for n in names]
        lower, upper = X.min(axis=0), X.max(axis=0)
        type_arr = np.full(X.shape[1], "real", object)
        for key, value in (types or {}).items():
            type_arr[_feature_index(names, key)] = value
        mutable = np.ones(X.shape[1], bool)
        for key in immutable:
            mutable[_feature_index(names, key)] = False
        return cls(lower, upper, default_scale(lower, upper), type_arr, mutable, names,
                   _groups_from_types(type_arr, None))

    @classmethod
    def from_yaml(cls, path: str | Path, n_features: int, names: Sequence[str] | None = None,
                  shape: Sequence[int] | None = None) -> FeatureSpace:
        """From a YAML file with a ``default`` entry and optional per-feature overrides.

        Overrides name a feature by ``name`` (a column name) or ``index``. Categorical
        features take a ``group`` key naming their one-hot group. An empty file is refused:
        it would leave every feature unbounded with scale 1, which is rarely meant.
        """
        path = Path(path)
        try:
            spec = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise FeatureSpaceError(f"feature file {path}: cannot read it ({exc})") from exc
        if not spec:
            raise FeatureSpaceError(f"feature file {path}: is empty; give a 'default' entry "
                                    "(bounds, scale) and/or 'features', or leave the file out "
                                    "to take the ranges from the data")
        return cls.from_dict(spec or {}, n_features, names, shape, source=str(path))

    @classmethod
    def from_dict(cls, spec: dict, n_features: int, names: Sequence[str] | None = None,
                  shape: Sequence[int] | None = None, source: str = "feature spec") -> FeatureSpace:
        """From the parsed form of the YAML file (see :meth:`from_yaml`)."""
        if not isinstance(spec, dict):
            raise FeatureSpaceError(f"{source}: expected a mapping with 'default' and 'features'")
        unknown = set(spec) - {"default", "features", "constraints"}
        if unknown:
            raise FeatureSpaceError(f"{source}: unknown key(s) {sorted(unknown)}")
        names = [str(i) for i in range(n_features)] if names is None else [str(n) for n in names]
        default = {**_DEFAULT, **_check_entry(spec.get("default") or {}, source, "default")}
        entries = [dict(default) for _ in range(n_features)]
        group_of: list[str | None] = [None] * n_features
        for k, override in enumerate(spec.get("features") or []):
            where = f"features[{k}]"
            if not isinstance(override, dict):
                raise FeatureSpaceError(f"{source}: {where} must be a mapping")
            override = dict(override)
            if "name" in override:
                key = override.pop("name")
                override.pop("index", None)
            elif "index" in override:
                key = override.pop("index")
            else:
                raise FeatureSpaceError(f"{source}: {where} needs 'name' or 'index'")
            j = _feature_index(names, key, f"{source}: {where}")
            group_of[j] = override.pop("group", None)
            entries[j].update(_check_entry(override, source, where))
        lower = np.array([float(e["lower"]) for e in entries])
        upper = np.array([float(e["upper"]) for e in entries])
        scale = default_scale(lower, upper)
        for j, e in enumerate(entries):
            if e["scale"] is not None:
                scale[j] = float(e["scale"])
        types = np.array([e["type"] for e in entries], dtype=object)
        mutable = np.array([bool(e["mutable"]) for e in entries])
        space = cls(lower, upper, scale, types, mutable, names,
                    _groups_from_types(types, group_of), None if shape is None else tuple(shape))
        constraints = spec.get("constraints") or []
        if isinstance(constraints, str) or not isinstance(constraints, list):
            raise FeatureSpaceError(f"{source}: 'constraints' must be a list of relations such "
                                    "as 'debt <= 0.6 * income'")
        if constraints:
            try:
                space = space.constrain(constraints)
            except FeatureSpaceError as exc:
                raise FeatureSpaceError(f"{source}: {exc}") from None
        return space

    def constrain(self, constraints: Sequence[str] = (),
                  inequalities: tuple[np.ndarray, np.ndarray] | None = None,
                  equalities: tuple[np.ndarray, np.ndarray] | None = None,
                  valid: Callable[[np.ndarray], np.ndarray] | None = None,
                  tolerance: float | None = None) -> FeatureSpace:
        """A copy of this space with relations between features added (raw units).

        ``constraints``: text such as ``"debt <= 0.6 * income"`` or ``"a + b + c == total"``
        over the feature names; ``inequalities``: ``(A (m, d), b (m,))`` for ``A x <= b``;
        ``equalities``: ``(C (q, d), d (q,))`` for ``C x == d``; ``valid``: a predicate
        ``valid(X (n, d)) -> (n,) bool`` for relations that are not linear (checked on every
        candidate, not enforced by projections). Existing relations are kept.
        """
        new = Relations.build(self.names, constraints, inequalities, equalities, valid,
                              **({} if tolerance is None else {"tolerance": tolerance}))
        old = self.relations
        if old is not None:
            if new.valid is not None and old.valid is not None:
                first, second = old.valid, new.valid
                new.valid = lambda X: np.asarray(first(X), bool) & np.asarray(second(X), bool)
            new = Relations(np.vstack([old.A, new.A]), np.concatenate([old.b, new.b]),
                            np.vstack([old.C, new.C]), np.concatenate([old.d, new.d]),
                            old.labels_ub + new.labels_ub, old.labels_eq + new.labels_eq,
                            new.valid or old.valid,
                            new.tolerance if tolerance is not None else old.tolerance)
        return FeatureSpace(self.lower, self.upper, self.scale, self.types, self.mutable,
                            self.names, self.groups, self.shape, new)

    def unconstrained(self) -> FeatureSpace:
        """A copy of this space without relations between features."""
        return FeatureSpace(self.lower, self.upper, self.scale, self.types, self.mutable,
                            self.names, self.groups, self.shape, None)

    @property
    def has_relations(self) -> bool:
        """True when some relation (linear row or predicate) constrains the features."""
        return self.relations is not None and len(self.relations) > 0

    def relations_hold(self, X: np.ndarray) -> np.ndarray:
        """``(n,)`` bool: every relation holds at ``X`` ``(n, *shape)`` (all True without)."""
        X = np.asarray(X, dtype=np.float64).reshape(len(X), self.n_features)
        if not self.has_relations:
            return np.ones(len(X), dtype=bool)
        return self.relations.holds(X)

    # -- validation -------------------------------------------------------------------------
    def check_data(self, X: np.ndarray, what: str = "data") -> None:
        """Raise :class:`InputError` naming the row and feature of the first invalid value.

        Checks shape, finiteness, bounds and types (integral, binary, one-hot) of ``X``
        with shape ``(n, *shape)``.
        """
        X = np.asarray(X)
        if X.ndim < 1 or int(np.prod(X.shape[1:])) != self.n_features:
            raise InputError(f"{what}: shape {X.shape} does not match the feature space "
                             f"({self.n_features} features per input)")
        flat = X.reshape(X.shape[0], -1).astype(np.float64)
        check_finite(flat, what, self.names)
        tol = BOUND_TOLERANCE * self.scale
        for test, side, bound in ((flat < self.lower - tol, "below lower", self.lower),
                                  (flat > self.upper + tol, "above upper", self.upper)):
            if test.any():
                row, col = np.argwhere(test)[0]
                raise InputError(f"{what}: row {row}, feature '{self.names[col]}' = "
                                 f"{flat[row, col]:.6g} is {side} bound {bound[col]:.6g}; "
                                 "the feature space contradicts the data")
        for kind, invalid in (("integer", lambda v: v != np.round(v)),
                              ("binary", lambda v: (v != 0) & (v != 1))):
            cols = np.flatnonzero(self.types == kind)
            if len(cols):
                bad = invalid(flat[:, cols])
                if bad.any():
                    row, c = np.argwhere(bad)[0]
                    raise InputError(f"{what}: row {row}, feature '{self.names[cols[c]]}' = "
                                     f"{flat[row, cols[c]]:.6g} is not a valid {kind} value")
        for g in self.groups:
            block = flat[:, g]
            bad = ~(((block == 0) | (block == 1)).all(axis=1) & (block.sum(axis=1) == 1))
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                raise InputError(f"{what}: row {row}, one-hot group "
                                 f"{[self.names[j] for j in g]} is not one-hot")

    @property
    def has_discrete(self) -> bool:
        """True when some mutable feature is not real-valued (projection rounds)."""
        return bool((self.mutable & (self.types != "real")).any())

    # -- tensors ----------------------------------------------------------------------------
    def tensors(self, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float64):
        """``(lower, upper, scale, mutable)`` as tensors of shape ``(d,)``."""
        as_t = lambda a: torch.as_tensor(a, dtype=dtype, device=device)  # noqa: E731
        return (as_t(self.lower), as_t(self.upper), as_t(self.scale),
                torch.as_tensor(self.mutable, device=device))

    def delta_bounds(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Box of allowed scaled perturbations ``u = (x' - x) / scale``, each ``(n, d)``.

        Immutable features get ``[0, 0]``. Bounds may be infinite.
        """
        lower, upper, scale, mutable = self.tensors(x.device, x.dtype)
        flat = x.reshape(x.shape[0], -1)
        lo = ((lower - flat) / scale).clamp(max=0.0)
        hi = ((upper - flat) / scale).clamp(min=0.0)
        lo = torch.where(mutable, lo, torch.zeros_like(lo))
        hi = torch.where(mutable, hi, torch.zeros_like(hi))
        return lo, hi

    def scaled_delta(self, x_adv: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``(x_adv - x) / scale``, flattened to ``(n, d)``."""
        scale = torch.as_tensor(self.scale, dtype=x.dtype, device=x.device)
        return (x_adv - x).reshape(x.shape[0], -1) / scale

    def apply_delta(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """``x + u * scale`` in the input's shape; ``u`` has shape ``(n, d)``."""
        scale = torch.as_tensor(self.scale, dtype=x.dtype, device=x.device)
        return x + (u * scale).reshape(x.shape)

    def project(self, x_adv: torch.Tensor, x: torch.Tensor,
                within: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """Make candidates valid: in bounds, integers integral, binaries 0/1, one-hot groups
        one-hot, immutable features equal to ``x``. Shapes ``(n, *shape)``; returns a new tensor.

        ``within``: per-row bounds ``(lower, upper)``, each ``(n, d)`` in raw units, that
        tighten the feature box (for example a candidate's Linf ball around ``x``, which then
        holds the projection onto the relations too); each must contain its row of ``x``.
        """
        lower, upper, _, mutable = self.tensors(x.device, x.dtype)
        if within is not None:
            lower, upper = torch.maximum(lower, within[0]), torch.minimum(upper, within[1])
        flat = x_adv.reshape(x_adv.shape[0], -1).clone()
        orig = x.reshape(x.shape[0], -1)
        integral = torch.as_tensor(np.isin(self.types, ("integer", "binary")), device=x.device)
        if integral.any():
            rounded = torch.round(flat)
            lo_int, hi_int = torch.ceil(lower), torch.floor(upper)
            rounded = torch.minimum(torch.maximum(rounded, lo_int), hi_int)
            flat = torch.where(integral, rounded, flat)
        flat = torch.minimum(torch.maximum(flat, lower), upper)
        for g in self.groups:
            gi = torch.as_tensor(g, device=x.device)
            winner = flat[:, gi].argmax(dim=1)
            flat[:, gi] = torch.nn.functional.one_hot(winner, len(g)).to(flat.dtype)
        flat = torch.where(mutable, flat, orig)
        if self.relations is not None and not self.relations.is_linear_empty:
            flat = self._project_relations(flat, orig, lower, upper)
        return flat.reshape(x_adv.shape)

    def _project_relations(self, flat: torch.Tensor, orig: torch.Tensor, lower: torch.Tensor,
                           upper: torch.Tensor) -> torch.Tensor:
        """Real mutable features moved into ``box ∩ relations`` (discrete ones keep their
        rounded values); rows that stay infeasible drop their discrete moves and are
        projected again from the clean input's discrete values."""
        scale = torch.as_tensor(self.scale, dtype=flat.dtype, device=flat.device)
        free = torch.as_tensor(self.mutable & (self.types == "real"), device=flat.device)
        flat, ok = project_relations(self.relations, flat, orig, lower, upper, scale, free)
        if (~ok).any() and (~free).any():
            retry = torch.where(free, flat[~ok], orig[~ok])
            rows = lambda b: b[~ok] if b.ndim == 2 else b  # noqa: E731 (per-row bounds)
            flat[~ok] = project_relations(self.relations, retry, orig[~ok], rows(lower),
                                          rows(upper), scale, free)[0]
        return flat


def default_scale(lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """``upper - lower`` where both are finite and differ, else 1."""
    span = np.asarray(upper, dtype=np.float64) - np.asarray(lower, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(span) & (span > 0)
    return np.where(ok, span, 1.0)


def _feature_index(names: list[str], key: str | int, where: str = "feature space") -> int:
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        if not 0 <= key < len(names):
            raise FeatureSpaceError(f"{where}: feature index {key} out of range 0..{len(names)-1}")
        return int(key)
    if str(key) in names:
        return names.index(str(key))
    raise FeatureSpaceError(f"{where}: no feature named '{key}' in the data "
                            f"(columns: {', '.join(names[:10])}{'...' if len(names) > 10 else ''})")


def _check_entry(entry: dict, source: str, where: str) -> dict:
    if not isinstance(entry, dict):
        raise FeatureSpaceError(f"{source}: {where} must be a mapping")
    unknown = set(entry) - set(_DEFAULT)
    if unknown:
        raise FeatureSpaceError(f"{source}: {where} has unknown key(s) {sorted(unknown)}; "
                                f"allowed: {sorted(_DEFAULT)}")
    for key in ("lower", "upper", "scale"):
        if key in entry and entry[key] is not None:
            try:
                float(entry[key])
            except (TypeError, ValueError):
                raise FeatureSpaceError(f"{source}: {where}.{key} must be a number, "
                                        f"got {entry[key]!r}") from None
    if "type" in entry and entry["type"] not in FEATURE_TYPES:
        raise FeatureSpaceError(f"{source}: {where}.type '{entry['type']}' is not one of "
                                f"{', '.join(FEATURE_TYPES)}")
    return entry


def _groups_from_types(types: np.ndarray, group_of: list[str | None] | None) -> list[np.ndarray]:
    cat = np.flatnonzero(types == "categorical")
    if len(cat) == 0:
        return []
    if group_of is None or any(group_of[j] is None for j in cat):
        missing = [int(j) for j in cat if group_of is None or group_of[j] is None]
        raise FeatureSpaceError(f"categorical features {missing} need a 'group' naming their "
                                "one-hot group")
    groups: dict[str, list[int]] = {}
    for j in cat:
        groups.setdefault(str(group_of[j]), []).append(int(j))
    return [np.array(v) for v in groups.values()]
