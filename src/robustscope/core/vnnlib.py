"""VNN-LIB properties (the verification competitions' format): parsing and reading.

A property declares inputs ``X_0 .. X_{d-1}`` and outputs ``Y_0 .. Y_{k-1}``
(``declare-const``), bounds every input (``(assert (<= X_i c))``, ``(assert (>= X_i c))``)
and states the *unsafe* outputs: one or more ``assert``s of linear inequalities over ``Y``
and constants, joined by ``and`` / ``or`` (read into a disjunction of conjunctions). A
point of the box whose outputs meet the unsafe condition is a counterexample: the answer is
then ``sat``; ``unsat`` says there is none.

Read here: comments (``;``), ``declare-const``, input bounds per variable, and output
constraints ``(<= a b)``, ``(>= a b)``, ``(< a b)``, ``(> a b)`` where ``a`` and ``b`` are
linear expressions (numbers, ``Y_j``, ``(+ ...)``, ``(- ...)``, ``(* c e)``), under any
nesting of ``and`` / ``or``. Anything else (input constraints inside an ``or``, constraints
mixing ``X`` and ``Y``) is an :class:`~robustscope.core.errors.InputError` naming it.

:func:`robustness_form` recognises the local robustness properties (the box is an input
``± eps`` clipped to a range, the unsafe condition "some other class scores at least the
label's") that the radius of robustness answers at every ``eps`` at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robustscope.core.errors import InputError

_TOKEN = re.compile(r"\(|\)|[^\s()]+")
_VAR = re.compile(r"^([XY])_(\d+)$")


@dataclass
class Property:
    """An input box and unsafe output condition.

    ``lower`` / ``upper`` ``(d,)`` bound the inputs; ``disjuncts`` is a list of
    ``(C, b)``, ``C`` ``(m, k)``, ``b`` ``(m,)``: the outputs ``Y`` are unsafe where for
    some disjunct every row holds, ``C @ Y <= b`` (``strict[i]`` marks the rows written
    with ``<`` / ``>``)."""

    lower: np.ndarray
    upper: np.ndarray
    n_outputs: int
    disjuncts: list[tuple[np.ndarray, np.ndarray]]
    strict: list[np.ndarray]
    source: str = "property"

    @property
    def n_inputs(self) -> int:
        return len(self.lower)

    def unsafe(self, y: np.ndarray) -> np.ndarray:
        """``(n,)`` bool: which output rows ``y`` ``(n, k)`` meet the unsafe condition."""
        y = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
        out = np.zeros(len(y), dtype=bool)
        for (c, b), strict in zip(self.disjuncts, self.strict, strict=True):
            lhs = y @ c.T
            ok = np.where(strict, lhs < b, lhs <= b)
            out |= ok.all(axis=1)
        return out

    def contains(self, x: np.ndarray) -> np.ndarray:
        """``(n,)`` bool: which rows of ``x`` ``(n, d)`` lie in the input box."""
        x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
        return ((x >= self.lower) & (x <= self.upper)).all(axis=1)


def read_property(path: str | Path) -> Property:
    """The :class:`Property` of a ``.vnnlib`` file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"--spec {path}: cannot be read ({exc.strerror or exc})") from None
    return parse_property(text, str(path))


def parse_property(text: str, source: str = "property") -> Property:
    """The :class:`Property` of VNN-LIB text; ``source`` names it in errors."""
    lines = [line.split(";", 1)[0] for line in text.splitlines()]
    tokens = _TOKEN.findall("\n".join(lines))
    exprs = []
    pos = 0
    while pos < len(tokens):
        expr, pos = _read(tokens, pos, source)
        exprs.append(expr)
    n_x = n_y = 0
    lower: dict[int, float] = {}
    upper: dict[int, float] = {}
    outputs: list[list[list[tuple]]] = []  # one DNF per output assert
    for expr in exprs:
        if not isinstance(expr, list) or not expr:
            raise InputError(f"{source}: unexpected '{expr}' at the top level")
        head = expr[0]
        if head == "declare-const":
            if len(expr) != 3 or not _VAR.match(str(expr[1])):
                raise InputError(f"{source}: declare-const of '{_text(expr)}'; X_i and Y_j "
                                 "are read")
            kind, idx = _VAR.match(expr[1]).groups()
            if kind == "X":
                n_x = max(n_x, int(idx) + 1)
            else:
                n_y = max(n_y, int(idx) + 1)
        elif head == "assert":
            if len(expr) != 2:
                raise InputError(f"{source}: assert takes one statement: '{_text(expr)}'")
            body = expr[1]
            bound = _input_bound(body, source)
            if bound is not None:
                i, side, value = bound
                (lower if side == "lower" else upper)[i] = (
                    max(lower.get(i, -np.inf), value) if side == "lower"
                    else min(upper.get(i, np.inf), value))
            else:
                outputs.append(_dnf(body, source))
        elif head in ("set-logic", "set-info", "check-sat", "get-model", "exit"):
            continue
        else:
            raise InputError(f"{source}: '{head}' is not read (declare-const and assert are)")
    if n_x == 0 or n_y == 0:
        raise InputError(f"{source}: declares {n_x} inputs X_i and {n_y} outputs Y_j; both "
                         "are needed")
    for i in range(n_x):
        if i not in lower or i not in upper:
            side = "lower" if i not in lower else "upper"
            raise InputError(f"{source}: X_{i} has no {side} bound")
    lo = np.array([lower[i] for i in range(n_x)])
    hi = np.array([upper[i] for i in range(n_x)])
    bad = np.flatnonzero(lo > hi)
    if len(bad):
        raise InputError(f"{source}: X_{bad[0]} has lower bound {lo[bad[0]]} above its upper "
                         f"bound {hi[bad[0]]}")
    if not outputs:
        raise InputError(f"{source}: no output constraint (an assert over Y)")
    dnf: list[list[tuple]] = [[]]
    for term in outputs:  # asserts are joined by 'and'
        dnf = [a + b for a in dnf for b in term]
    disjuncts, stricts = [], []
    for conj in dnf:
        c = np.zeros((len(conj), n_y))
        b = np.zeros(len(conj))
        strict = np.zeros(len(conj), dtype=bool)
        for r, (coef, const, is_strict) in enumerate(conj):
            for j, v in coef.items():
                if j >= n_y:
                    raise InputError(f"{source}: Y_{j} is used but only {n_y} outputs are "
                                     "declared")
                c[r, j] = v
            b[r] = const
            strict[r] = is_strict
        disjuncts.append((c, b))
        stricts.append(strict)
    return Property(lo, hi, n_y, disjuncts, stricts, source)


def _read(tokens: list[str], pos: int, source: str):
    tok = tokens[pos]
    if tok == ")":
        raise InputError(f"{source}: unbalanced ')'")
    if tok != "(":
        return tok, pos + 1
    out = []
    pos += 1
    while True:
        if pos >= len(tokens):
            raise InputError(f"{source}: unbalanced '(' (the file ends inside an expression)")
        if tokens[pos] == ")":
            return out, pos + 1
        item, pos = _read(tokens, pos, source)
        out.append(item)


def _text(expr) -> str:
    return "(" + " ".join(_text(e) for e in expr) + ")" if isinstance(expr, list) else str(expr)


def _input_bound(body, source: str):
    """``(i, "lower" | "upper", value)`` of an input bound, or ``None`` for anything else."""
    if not (isinstance(body, list) and len(body) == 3 and body[0] in ("<=", ">=", "<", ">")):
        return None
    op, a, b = body
    names = [isinstance(v, str) and v.startswith("X_") for v in (a, b)]
    if not any(names):
        return None
    if all(names) or any(isinstance(v, list) for v in (a, b)):
        raise InputError(f"{source}: input constraint '{_text(body)}' is not a bound of one "
                         "variable")
    var, value = (a, b) if names[0] else (b, a)
    if isinstance(value, str) and value.startswith("Y_"):
        raise InputError(f"{source}: input {var} inside an output constraint "
                         f"'{_text(body)}' is not read (inputs take bounds only)")
    if not _VAR.match(var):
        raise InputError(f"{source}: '{var}' is not an input variable X_i")
    upper = (op in ("<=", "<")) == names[0]
    return int(var[2:]), "upper" if upper else "lower", _number(value, source)


def _number(tok, source: str) -> float:
    try:
        return float(tok)
    except (TypeError, ValueError):
        raise InputError(f"{source}: '{_text(tok)}' is not a number") from None


def _dnf(body, source: str) -> list[list[tuple]]:
    """A statement over ``Y`` as a list of conjunctions of rows ``(coef, const, strict)``
    meaning ``sum coef[j] Y_j <= const``."""
    if not isinstance(body, list) or not body:
        raise InputError(f"{source}: '{_text(body)}' is not a constraint")
    head = body[0]
    if head == "or":
        return [conj for part in body[1:] for conj in _dnf(part, source)]
    if head == "and":
        out: list[list[tuple]] = [[]]
        for part in body[1:]:
            out = [a + b for a in out for b in _dnf(part, source)]
        return out
    if head in ("<=", ">=", "<", ">") and len(body) == 3:
        ca, ka = _linear(body[1], source)
        cb, kb = _linear(body[2], source)
        if head in (">=", ">"):
            ca, ka, cb, kb = cb, kb, ca, ka
        coef = dict(ca)
        for j, v in cb.items():
            coef[j] = coef.get(j, 0.0) - v
        return [[(coef, kb - ka, head in ("<", ">"))]]
    raise InputError(f"{source}: '{_text(body)}' is not read (output constraints are "
                     "<=, >=, <, > of linear expressions over Y under and / or)")


def _linear(expr, source: str) -> tuple[dict[int, float], float]:
    """``(coefficients of Y, constant)`` of a linear expression."""
    if isinstance(expr, str):
        m = _VAR.match(expr)
        if m:
            if m.group(1) == "X":
                raise InputError(f"{source}: input {expr} inside an output constraint is not "
                                 "read (inputs take bounds only)")
            return {int(m.group(2)): 1.0}, 0.0
        return {}, _number(expr, source)
    head, args = expr[0], expr[1:]
    parts = [_linear(a, source) for a in args]
    if head == "+" or (head == "-" and len(parts) >= 1):
        coef: dict[int, float] = {}
        const = 0.0
        for n, (c, k) in enumerate(parts):
            sign = -1.0 if head == "-" and (n > 0 or len(parts) == 1) else 1.0
            for j, v in c.items():
                coef[j] = coef.get(j, 0.0) + sign * v
            const += sign * k
        return coef, const
    if head == "*" and len(parts) == 2:
        (c1, k1), (c2, k2) = parts
        if c1 and c2:
            raise InputError(f"{source}: '{_text(expr)}' is not linear")
        c, k, s = (c2, k2, k1) if not c1 else (c1, k1, k2)
        return {j: v * s for j, v in c.items()}, k * s
    raise InputError(f"{source}: '{_text(expr)}' is not a linear expression")


@dataclass
class RobustnessForm:
    """A local robustness property: inputs ``center`` ``(d,)`` ± ``eps`` (Linf) clipped to
    ``[clip_lower, clip_upper]``, unsafe where some other class scores at least ``label``'s.
    ``eps_inner`` / ``eps_outer`` bound the ball radii whose clipped balls lie inside / hold
    the property's box (equal up to rounding of the file's decimals): a counterexample
    within ``eps_inner`` lies in the box, a certificate beyond ``eps_outer`` covers it."""

    center: np.ndarray
    label: int
    eps_inner: float
    eps_outer: float
    clip_lower: float
    clip_upper: float


def robustness_form(prop: Property, rtol: float = 1e-6) -> RobustnessForm | None:
    """The :class:`RobustnessForm` of ``prop`` where it is one, else ``None``.

    The label ``t`` is recognised from disjuncts of one row each, ``Y_t - Y_j <= 0`` (ties
    count as unsafe: ``<=``), one for every other class ``j``. The center is the box's
    midpoint where a coordinate is not clipped; ``eps`` the largest half width; a coordinate
    at a clip bound (the box's smallest lower / largest upper) is centered ``eps`` inside
    the other end. The reading is checked: the clipped ball of the center must give the
    box within ``rtol * (1 + eps)``."""
    k = prop.n_outputs
    labels = set()
    others = set()
    for (c, b), strict in zip(prop.disjuncts, prop.strict, strict=True):
        if len(b) != 1 or b[0] != 0 or strict[0]:
            return None
        pos = np.flatnonzero(c[0] > 0)
        neg = np.flatnonzero(c[0] < 0)
        if len(pos) != 1 or len(neg) != 1 or c[0, pos[0]] != 1 or c[0, neg[0]] != -1:
            return None
        labels.add(int(pos[0]))
        others.add(int(neg[0]))
    if len(labels) != 1:
        return None
    label = labels.pop()
    if others != set(range(k)) - {label}:
        return None
    lo, hi = prop.lower, prop.upper
    half = (hi - lo) / 2
    eps = float(half.max())
    if eps <= 0:
        return None
    cmin, cmax = float(lo.min()), float(hi.max())
    tol = rtol * (1 + eps)
    free = half >= eps - tol
    at_lo = (~free) & (np.abs(lo - cmin) <= tol)
    at_hi = (~free) & (np.abs(hi - cmax) <= tol)
    center = (lo + hi) / 2
    center = np.where(at_lo & ~at_hi, hi - eps, center)
    center = np.where(at_hi & ~at_lo, lo + eps, center)
    if not (free | at_lo | at_hi).all():
        return None
    center = np.clip(center, cmin, cmax)
    rebuilt_lo = np.maximum(center - eps, cmin)
    rebuilt_hi = np.minimum(center + eps, cmax)
    if np.abs(rebuilt_lo - lo).max() > tol or np.abs(rebuilt_hi - hi).max() > tol:
        return None
    # radii whose clipped balls lie inside / cover the box, coordinate by coordinate
    inner = np.minimum(np.where(lo > cmin, center - lo, np.inf),
                       np.where(hi < cmax, hi - center, np.inf))
    outer = np.maximum(center - lo, hi - center)
    eps_inner = float(inner.min()) if np.isfinite(inner.min()) else eps
    return RobustnessForm(center, label, max(eps_inner, 0.0), float(outer.max()), cmin, cmax)


def counterexample_text(x: np.ndarray, y: np.ndarray) -> str:
    """The competition's counterexample: ``((X_0 v) ... (Y_0 v) ...)``, one per line, with
    every digit of the float64 values (``repr``)."""
    rows = [f"(X_{i} {float(v)!r})" for i, v in enumerate(np.asarray(x).reshape(-1))]
    rows += [f"(Y_{j} {float(v)!r})" for j, v in enumerate(np.asarray(y).reshape(-1))]
    return "(" + "\n ".join(rows) + ")\n"
