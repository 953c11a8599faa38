"""Relations between features: linear constraints ``A x <= b``, ``C x == d`` and a predicate.

A neighbourhood on tabular data must not contain impossible inputs (a loan larger than its
total, more late payments than payments). :class:`Relations` holds such constraints over the
**raw feature units** the user writes them in (never the scaled coordinates):

* linear inequalities ``A x <= b`` ``(m, d)``, ``(m,)`` and equalities ``C x == d``
  ``(q, d)``, ``(q,)``, each row labelled with the text of the constraint it came from;
* an optional predicate ``valid(X) -> (n,) bool`` for what is not linear.

Constraints written as text (``"debt <= 0.6 * income"``, ``"a + b + c == total"``,
``"0 <= late <= payments"``) are parsed with :mod:`ast` and a whitelist of nodes; no
``eval``. Names that are not Python identifiers are written in back-quotes
(```late payments` <= payments``).

A row holds when its residual is at most :data:`RELATION_TOLERANCE` times
``1 + |A_i| . |x| + |b_i|`` (relative to the size of the terms; equalities on both sides).

:func:`project_relations` moves candidates into ``box ∩ relations`` (see its docstring for
what is exact).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from robustscope.core.errors import FeatureSpaceError, InputError

#: Relative tolerance of a relation's residual (see the module docstring).
RELATION_TOLERANCE = 1e-9
#: Dykstra iterations of :func:`project_relations` at most, and its stopping tolerance.
DYKSTRA_ITERATIONS = 100
DYKSTRA_TOLERANCE = 1e-10
#: Dykstra stops early once every bound and inequality holds within this (scaled units).
FEASIBLE_SLACK = 1e-9

_COMPARE = {ast.LtE: "<=", ast.GtE: ">=", ast.Eq: "=="}
_QUOTED = re.compile(r"`([^`]+)`")


@dataclass
class Relations:
    """Linear relations over the ``d`` features (raw units) and an optional predicate.

    Attributes
    ----------
    A : ``(m, d)`` float64, ``b`` ``(m,)``: inequalities ``A x <= b``.
    C : ``(q, d)`` float64, ``d`` ``(q,)``: equalities ``C x == d``.
    labels_ub, labels_eq : the constraint text each row came from (``m`` and ``q`` entries).
    valid : optional ``valid(X (n, d) raw units) -> (n,) bool`` for non-linear relations.
    tolerance : relative tolerance of a row's residual.
    """

    A: np.ndarray
    b: np.ndarray
    C: np.ndarray
    d: np.ndarray
    labels_ub: list[str] = field(default_factory=list)
    labels_eq: list[str] = field(default_factory=list)
    valid: Callable[[np.ndarray], np.ndarray] | None = None
    tolerance: float = RELATION_TOLERANCE

    def __post_init__(self) -> None:
        self.A = np.atleast_2d(np.asarray(self.A, dtype=np.float64))
        self.C = np.atleast_2d(np.asarray(self.C, dtype=np.float64))
        self.b = np.asarray(self.b, dtype=np.float64).reshape(-1)
        self.d = np.asarray(self.d, dtype=np.float64).reshape(-1)
        for mat, rhs, name in ((self.A, self.b, "inequalities (A, b)"),
                               (self.C, self.d, "equalities (C, d)")):
            if mat.shape[0] != len(rhs):
                raise InputError(f"{name}: {mat.shape[0]} rows but {len(rhs)} right-hand sides")
            if not (np.isfinite(mat).all() and np.isfinite(rhs).all()):
                raise InputError(f"{name}: coefficients must be finite")
        if self.A.shape[1] != self.C.shape[1]:
            raise InputError(f"relations: A has {self.A.shape[1]} columns, C has "
                             f"{self.C.shape[1]}")
        self.labels_ub = list(self.labels_ub) or [f"A[{i}] x <= b[{i}]"
                                                  for i in range(len(self.b))]
        self.labels_eq = list(self.labels_eq) or [f"C[{i}] x == d[{i}]"
                                                  for i in range(len(self.d))]
        if not (self.tolerance >= 0):
            raise InputError(f"relations: tolerance must be >= 0, got {self.tolerance}")

    # -- construction -----------------------------------------------------------------------
    @classmethod
    def empty(cls, n_features: int) -> Relations:
        """No relation over ``n_features`` features."""
        return cls(np.zeros((0, n_features)), np.zeros(0), np.zeros((0, n_features)),
                   np.zeros(0))

    @classmethod
    def build(cls, names: Sequence[str], constraints: Sequence[str] = (),
              inequalities: tuple[np.ndarray, np.ndarray] | None = None,
              equalities: tuple[np.ndarray, np.ndarray] | None = None,
              valid: Callable[[np.ndarray], np.ndarray] | None = None,
              tolerance: float = RELATION_TOLERANCE) -> Relations:
        """From text constraints over ``names``, arrays ``(A, b)`` for ``A x <= b`` and
        ``(C, d)`` for ``C x == d`` (raw units), and a predicate; all optional."""
        n = len(names)
        if isinstance(constraints, str):
            constraints = [constraints]
        rows_ub: list[tuple[np.ndarray, float, str]] = []
        rows_eq: list[tuple[np.ndarray, float, str]] = []
        for text in constraints:
            for kind, coef, rhs in parse_constraint(text, names):
                (rows_eq if kind == "==" else rows_ub).append((coef, rhs, str(text)))
        for pair, rows, what in ((inequalities, rows_ub, "inequalities"),
                                 (equalities, rows_eq, "equalities")):
            if pair is None:
                continue
            try:
                mat, rhs = pair
            except (TypeError, ValueError):
                raise InputError(f"{what}: expected a pair (matrix, vector)") from None
            mat = np.atleast_2d(np.asarray(mat, dtype=np.float64))
            rhs = np.asarray(rhs, dtype=np.float64).reshape(-1)
            if mat.shape[1] != n or mat.shape[0] != len(rhs):
                raise InputError(f"{what}: matrix {mat.shape} and vector {rhs.shape} do not fit "
                                 f"{n} features")
            sign = "<=" if what == "inequalities" else "=="
            for i in range(len(rhs)):
                rows.append((mat[i], float(rhs[i]), describe_row(mat[i], sign, rhs[i], names)))
        if valid is not None and not callable(valid):
            raise InputError("valid: expected a function valid(X) -> bool array")

        def stack(rows):
            if not rows:
                return np.zeros((0, n)), np.zeros(0), []
            return (np.stack([r[0] for r in rows]), np.array([r[1] for r in rows]),
                    [r[2] for r in rows])

        A, b, lab_ub = stack(rows_ub)
        C, d, lab_eq = stack(rows_eq)
        return cls(A, b, C, d, lab_ub, lab_eq, valid, tolerance)

    # -- shape ------------------------------------------------------------------------------
    @property
    def n_features(self) -> int:
        return self.A.shape[1]

    @property
    def is_linear_empty(self) -> bool:
        """True when there is no linear row (a predicate may still be there)."""
        return len(self.b) == 0 and len(self.d) == 0

    def __len__(self) -> int:
        return len(self.b) + len(self.d) + (self.valid is not None)

    # -- checks -----------------------------------------------------------------------------
    def residuals(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Scaled violations ``(n, m)`` and ``(n, q)`` of the rows at ``X`` ``(n, d)``: the
        residual divided by its tolerance; a row holds where the value is ``<= 1``."""
        X = np.asarray(X, dtype=np.float64).reshape(len(X), self.n_features)
        out = []
        for mat, rhs, eq in ((self.A, self.b, False), (self.C, self.d, True)):
            r = X @ mat.T - rhs
            if eq:
                r = np.abs(r)
            size = 1.0 + np.abs(X) @ np.abs(mat).T + np.abs(rhs)
            with np.errstate(divide="ignore", invalid="ignore"):
                out.append(np.where(r <= 0, 0.0, r / (self.tolerance * size)))
        return out[0], out[1]

    def linear_ok(self, X: np.ndarray) -> np.ndarray:
        """``(n,)`` bool: every linear row holds at ``X`` ``(n, d)``."""
        ub, eq = self.residuals(X)
        return (ub <= 1).all(axis=1) & (eq <= 1).all(axis=1)

    def predicate_ok(self, X: np.ndarray) -> np.ndarray:
        """``(n,)`` bool: the user predicate holds (all True without one)."""
        X = np.asarray(X, dtype=np.float64).reshape(len(X), self.n_features)
        if self.valid is None:
            return np.ones(len(X), dtype=bool)
        out = np.asarray(self.valid(X)).reshape(-1)
        if out.shape != (len(X),):
            raise InputError(f"valid(X): returned {out.shape[0]} values for {len(X)} rows")
        return out.astype(bool)

    def holds(self, X: np.ndarray) -> np.ndarray:
        """``(n,)`` bool: every relation (linear rows and predicate) holds at ``X``."""
        ok = self.linear_ok(X)
        if self.valid is not None and len(X):
            ok &= self.predicate_ok(X)
        return ok

    def broken(self, X: np.ndarray) -> list[tuple[str, np.ndarray]]:
        """``[(constraint, rows)]``: each broken constraint (text) with the row indices of
        ``X`` that break it; the predicate is named ``valid(X)``."""
        ub, eq = self.residuals(X)
        found: dict[str, set[int]] = {}
        for viol, labels in ((ub, self.labels_ub), (eq, self.labels_eq)):
            for k, label in enumerate(labels):
                rows = np.flatnonzero(viol[:, k] > 1)
                if len(rows):
                    found.setdefault(label, set()).update(rows.tolist())
        if self.valid is not None and len(X):
            rows = np.flatnonzero(~self.predicate_ok(X))
            if len(rows):
                found["valid(X)"] = set(rows.tolist())
        return [(k, np.array(sorted(v), dtype=np.int64)) for k, v in found.items()]

    def check_data(self, X: np.ndarray, what: str = "data") -> None:
        """Raise :class:`InputError` naming the rows of ``X`` and the constraint they break."""
        broken = self.broken(X)
        if not broken:
            return
        parts = []
        for label, rows in broken:
            shown = ", ".join(str(r) for r in rows[:10]) + (", ..." if len(rows) > 10 else "")
            parts.append(f"'{label}' is broken by {len(rows)} row(s): {shown}")
        raise InputError(f"{what}: inputs break the feature space's constraints: "
                         + "; ".join(parts) + " (fix the data or the constraints, or pass "
                         "invalid='status' to give such rows the status 'invalid')")


# -- parsing ------------------------------------------------------------------------------------
def parse_constraint(text: str, names: Sequence[str]) -> list[tuple[str, np.ndarray, float]]:
    """Rows ``(kind, coef (d,), rhs)`` of one constraint over features ``names``.

    ``kind`` is ``"<="`` (``coef . x <= rhs``) or ``"=="``. A chain ``a <= b <= c`` gives one
    row per comparison. Raises :class:`FeatureSpaceError` naming the constraint and the
    unknown feature or the construct that is not linear.
    """
    if not isinstance(text, str) or not text.strip():
        raise FeatureSpaceError(f"constraint {text!r}: expected a non-empty string")
    names = [str(n) for n in names]
    index = {n: j for j, n in enumerate(names)}
    quoted: dict[str, str] = {}

    def quote(m: re.Match) -> str:
        key = f"__q{len(quoted)}__"
        quoted[key] = m.group(1)
        return key

    source = _QUOTED.sub(quote, text.strip())
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        raise FeatureSpaceError(f"constraint '{text}': not a valid expression ({exc.msg})"
                                ) from None
    body = tree.body
    if not isinstance(body, ast.Compare):
        raise FeatureSpaceError(f"constraint '{text}': expected a comparison with <=, >= or ==")

    def linear(node: ast.AST) -> tuple[np.ndarray, float]:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
                and not isinstance(node.value, bool):
            return np.zeros(len(names)), float(node.value)
        if isinstance(node, ast.Name):
            name = quoted.get(node.id, node.id)
            if name not in index:
                raise FeatureSpaceError(f"constraint '{text}': unknown feature '{name}'")
            v = np.zeros(len(names))
            v[index[name]] = 1.0
            return v, 0.0
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v, c = linear(node.operand)
            return (-v, -c) if isinstance(node.op, ast.USub) else (v, c)
        if isinstance(node, ast.BinOp):
            lv, lc = linear(node.left)
            rv, rc = linear(node.right)
            if isinstance(node.op, ast.Add):
                return lv + rv, lc + rc
            if isinstance(node.op, ast.Sub):
                return lv - rv, lc - rc
            if isinstance(node.op, ast.Mult):
                if not lv.any():
                    return lc * rv, lc * rc
                if not rv.any():
                    return rc * lv, rc * lc
                raise FeatureSpaceError(f"constraint '{text}': a product of two features is "
                                        "not linear; use the predicate valid(X)")
            if isinstance(node.op, ast.Div):
                if rv.any():
                    raise FeatureSpaceError(f"constraint '{text}': division by a feature is "
                                            "not linear; multiply it out or use valid(X)")
                if rc == 0:
                    raise FeatureSpaceError(f"constraint '{text}': division by zero")
                return lv / rc, lc / rc
        raise FeatureSpaceError(f"constraint '{text}': '{ast.unparse(node)}' is not allowed "
                                "(only numbers, feature names, + - * / and one comparison "
                                "chain of <=, >=, ==)")

    terms = [linear(body.left)] + [linear(c) for c in body.comparators]
    rows = []
    for op, (lv, lc), (rv, rc) in zip(body.ops, terms[:-1], terms[1:], strict=True):
        kind = _COMPARE.get(type(op))
        if kind is None:
            raise FeatureSpaceError(f"constraint '{text}': use <=, >= or == (strict "
                                    "comparisons are not supported)")
        coef, rhs = (lv - rv, rc - lc) if kind != ">=" else (rv - lv, lc - rc)
        if not coef.any():
            raise FeatureSpaceError(f"constraint '{text}': names no feature")
        rows.append(("==" if kind == "==" else "<=", coef, float(rhs)))
    return rows


def describe_row(coef: np.ndarray, sign: str, rhs: float, names: Sequence[str]) -> str:
    """A readable text of one row, e.g. ``"debt - 0.6*income <= 0"``."""
    parts = []
    for j in np.flatnonzero(coef):
        c = float(coef[j])
        term = names[j] if abs(c) == 1 else f"{abs(c):g}*{names[j]}"
        parts.append(("- " if c < 0 else "+ ") + term)
    text = " ".join(parts)
    text = text[2:] if text.startswith("+ ") else "-" + text[2:]
    return f"{text} {sign} {float(rhs):g}"


# -- projection ---------------------------------------------------------------------------------
def project_relations(relations: Relations, cand: torch.Tensor, anchor: torch.Tensor,
                      lower: torch.Tensor, upper: torch.Tensor, scale: torch.Tensor,
                      free: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Move candidates into ``box ∩ {A x <= b, C x == d}``, changing only ``free`` features.

    ``cand``, ``anchor``: ``(n, d)`` raw units; ``lower``, ``upper``: ``(d,)`` or ``(n, d)``;
    ``scale``: ``(d,)``;
    ``free``: ``(d,)`` bool (the other features keep the candidate's values).

    Rows already feasible are returned unchanged. Others get Dykstra's alternating
    projection (Euclidean in scaled units ``x / scale``) onto the box, each half-space and
    the affine set of the equalities, up to :data:`DYKSTRA_ITERATIONS` rounds, ending on the
    affine set, and stopping early once the point is feasible within
    :data:`FEASIBLE_SLACK` (so the result is a nearby feasible point, the Euclidean
    projection only where Dykstra converged first). Where the candidate's fixed features
    equal the anchor's and the anchor is
    feasible (the clean input), the result is then pulled back along the segment towards
    the anchor just far enough to satisfy every row and bound: feasible up to rounding,
    whatever Dykstra's residual. Returns ``(projected (n, d), feasible (n,) bool)``;
    where ``feasible`` is False the caller must not use the row (the verifier rejects it).
    """
    dt, dev = cand.dtype, cand.device
    out = cand.clone()
    ok = torch.as_tensor(relations.linear_ok(cand.detach().cpu().numpy()), device=dev)
    todo = torch.nonzero(~ok).reshape(-1)
    if len(todo) == 0 or relations.is_linear_empty:
        return out, ok
    fi = torch.nonzero(free).reshape(-1)
    if len(fi) == 0:
        return out, ok
    A = torch.as_tensor(relations.A, dtype=dt, device=dev)
    b = torch.as_tensor(relations.b, dtype=dt, device=dev)
    C = torch.as_tensor(relations.C, dtype=dt, device=dev)
    d = torch.as_tensor(relations.d, dtype=dt, device=dev)
    s = scale[fi]
    p = cand[todo]
    fixed_part = p.clone()
    fixed_part[:, fi] = 0
    # constraints on w = x_free / scale: G w <= h, E w == e, lo <= w <= hi
    G, E = A[:, fi] * s, C[:, fi] * s
    h = b - fixed_part @ A.T  # (k, m)
    e = d - fixed_part @ C.T  # (k, q)
    lo = lower.expand_as(cand)[todo][:, fi] / s
    hi = upper.expand_as(cand)[todo][:, fi] / s
    w = p[:, fi] / s
    E_pinv = torch.linalg.pinv(E) if len(d) else None  # (f, q)
    g_norm2 = (G * G).sum(dim=1).clamp_min(1e-300)  # (m,)
    sets = 1 + G.shape[0] + (1 if len(d) else 0)
    corr = [torch.zeros_like(w) for _ in range(sets)]
    for _ in range(DYKSTRA_ITERATIONS):
        prev = w
        for k in range(sets):
            z = w + corr[k]
            if k == 0:
                new = torch.minimum(torch.maximum(z, lo), hi)
            elif k <= G.shape[0]:
                g = G[k - 1]
                over = (z @ g - h[:, k - 1]).clamp_min(0)
                new = z - (over / g_norm2[k - 1])[:, None] * g
            else:
                new = z - (z @ E.T - e) @ E_pinv.T
            corr[k] = z - new
            w = new
        if (w - prev).abs().max() <= DYKSTRA_TOLERANCE:
            break
        # a feasible point is all an attack or a verification needs (the pull-back below
        # makes it exact); the rows' projection is then approximate, not the nearest point
        slack = torch.maximum((lo - w).clamp_min(0).amax(dim=1), (w - hi).clamp_min(0).amax(dim=1))
        if G.shape[0]:
            slack = torch.maximum(slack, (w @ G.T - h).clamp_min(0).amax(dim=1))
        if (slack <= FEASIBLE_SLACK).all():
            break
    proj = p.clone()
    proj[:, fi] = w * s
    # pull back towards a feasible anchor with the same fixed features (exact feasibility)
    a = anchor[todo]
    same = (p[:, ~free] == a[:, ~free]).all(dim=1) if (~free).any() else \
        torch.ones(len(todo), dtype=torch.bool, device=dev)
    anchor_ok = torch.as_tensor(relations.linear_ok(a.detach().cpu().numpy()), device=dev)
    pull = same & anchor_ok
    if pull.any():
        wa = a[pull][:, fi] / s
        step = w[pull] - wa
        t = torch.ones(int(pull.sum()), dtype=dt, device=dev)
        with np.errstate(divide="ignore", invalid="ignore"):
            room_hi = torch.where(step > 0, (hi[pull] - wa).clamp_min(0) / step, torch.inf)
            room_lo = torch.where(step < 0, (lo[pull] - wa).clamp_max(0) / step, torch.inf)
            t = torch.minimum(t, torch.minimum(room_hi, room_lo).min(dim=1).values)
            if G.shape[0]:
                slack = (h[pull] - wa @ G.T).clamp_min(0)
                rate = step @ G.T
                room = torch.where(rate > 0, slack / rate, torch.inf)
                t = torch.minimum(t, room.min(dim=1).values)
        t = t.clamp(0, 1)
        back = a[pull].clone()
        back[:, fi] = (wa + t[:, None] * step) * s
        proj[pull] = back
    out[todo] = proj
    feasible = torch.as_tensor(relations.linear_ok(out.detach().cpu().numpy()), device=dev)
    return out, feasible
