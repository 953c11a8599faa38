"""The options of :func:`robustscope.radius`, declared once.

:data:`OPTIONS` holds every plain-valued search option of :func:`robustscope.radius`: its
name, default, constraint (scikit-learn ``_parameter_constraints`` style: one object that
checks a value and describes what it accepts) and a one-line help text. Everything that
sets or passes these options reads them from here:

- :func:`robustscope.radius` validates its arguments with :func:`check_options` (its keyword
  signature must agree with the declaration; ``tests/test_options.py`` checks it);
- the ``robustscope radius`` command builds its options, defaults, choices and help from it
  (:mod:`robustscope.cli.search_options`);
- the evaluation spec (:mod:`robustscope.runs.spec`) builds its fields from it and places
  each option under a key (:data:`robustscope.runs.spec.OPTION_KEYS`); shards and Ray workers
  carry a validated :class:`RadiusOptions` to :func:`robustscope.radius`.

Options that are not plain values stay out of the declaration (:data:`NOT_DECLARED`):
``space`` (a :class:`~robustscope.core.space.FeatureSpace`; the CLI's ``--features``, a
spec's ``features``), ``statement`` (a :class:`~robustscope.core.statement.Statement`),
``config`` (a :class:`~robustscope.search.engine.SearchConfig`) and ``progress`` (a callback).

This module imports neither torch nor numpy: the command line reads it at start-up.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any

from robustscope.core.errors import InputError
from robustscope.solvers.registry import CERTIFY_CHOICES, SEARCH_SOLVERS
from robustscope.threats.registry import threat_entry, threat_names

#: The default thread policy (:mod:`robustscope.search.threads` reads it from here).
AUTO = "auto"

#: Arguments of :func:`robustscope.radius` that are not plain values, so not declared here.
NOT_DECLARED = ("model", "X", "y", "space", "statement", "config", "progress")


# -- constraints -------------------------------------------------------------------------------
class Constraint:
    """What an option accepts: :meth:`check` returns the value (converted where needed) or
    raises :class:`InputError` naming the option; :meth:`describe` says it in words."""

    def check(self, value: object, name: str) -> object:
        return value

    def describe(self) -> str:
        return "any value"


@dataclass(frozen=True)
class OneOf(Constraint):
    """One of ``values`` (strings); ``what`` names the kind of thing in messages."""

    values: tuple[str, ...]
    what: str

    def check(self, value: object, name: str) -> object:
        if not isinstance(value, str) or value not in self.values:
            raise InputError(self.message(value, name))
        return value

    def message(self, value: object, name: str | None) -> str:
        text = f"{value!r} is not {self.what}; choose one of {', '.join(self.values)}"
        return f"{name} {text}" if name else text

    def describe(self) -> str:
        return ", ".join(self.values)


@dataclass(frozen=True)
class Number(Constraint):
    """A finite number (an int when ``integer``) with optional bounds ``gt`` / ``ge`` /
    ``lt``; ``None`` too when ``allow_none``. ``integral_floats``: an integer-valued float
    (``3.0``) is accepted as an int; ``bool`` never is a number."""

    integer: bool = False
    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    allow_none: bool = False
    integral_floats: bool = True

    def check(self, value: object, name: str) -> object:
        if value is None and self.allow_none:
            return None
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if ok and self.integer:
            ok = isinstance(value, numbers.Integral) or (
                self.integral_floats and math.isfinite(float(value))
                and float(value) == int(value))
        if ok:
            v = float(value)
            ok = (math.isfinite(v) and (self.gt is None or v > self.gt)
                  and (self.ge is None or v >= self.ge) and (self.lt is None or v < self.lt))
        if not ok:
            raise InputError(f"{name} must be {self.describe()}, got {value!r}")
        return int(value) if self.integer else float(value)

    def describe(self) -> str:
        if self.gt is not None and self.lt is not None:
            text = f"in ({self.gt:g}, {self.lt:g})"
        elif self.integer and self.gt == 0:
            text = "a positive integer"
        elif self.integer and self.ge is not None:
            text = f"an integer >= {self.ge:g}"
        elif self.gt is not None:
            text = f"a finite number > {self.gt:g}"
        else:
            text = "an integer" if self.integer else "a finite number"
        return text + (" or None" if self.allow_none else "")

    def bounds(self) -> dict[str, float]:
        """The bounds as keyword arguments of ``pydantic.Field`` / ``typer.Option``."""
        return {k: getattr(self, k) for k in ("gt", "ge", "lt") if getattr(self, k) is not None}


@dataclass(frozen=True)
class Boolean(Constraint):
    """``True`` or ``False`` (numpy booleans too)."""

    def check(self, value: object, name: str) -> object:
        if type(value).__name__ not in ("bool", "bool_"):
            raise InputError(f"{name} must be True or False, got {value!r}")
        return bool(value)

    def describe(self) -> str:
        return "true, false"


@dataclass(frozen=True)
class Threads(Constraint):
    """``"auto"``, ``None`` or an int >= 1 (:mod:`robustscope.search.threads`)."""

    def check(self, value: object, name: str) -> object:
        if value is None or value == AUTO:
            return value
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise InputError(f"{name} must be 'auto', None or an int >= 1, got {value!r}")
        return int(value)

    def describe(self) -> str:
        return "auto, null or an int >= 1"

    @staticmethod
    def from_text(text: str) -> object:
        """A command-line value: ``auto``, ``none`` or an int (anything else is kept, for
        :meth:`check` to refuse)."""
        if text.lower() == "none":
            return None
        return int(text) if text.strip().lstrip("-").isdigit() else text


@dataclass(frozen=True)
class LpThreatName(Constraint):
    """An Lp threat by any spelling the threat registry accepts (``"Linf"``, ``"l2"``), or an
    :class:`~robustscope.threats.lp.LpThreat` itself (passed through)."""

    def check(self, value: object, name: str) -> object:
        if not isinstance(value, str):
            return value  # an LpThreat object: get_threat() checks what it is
        entry = threat_entry(value)
        if entry.kind != "lp":
            raise InputError(f"{name}: '{entry.name}' is an image threat, searched on its "
                             f"strength grid (robustscope.search.grid); a radius search "
                             f"takes one of {', '.join(self.values)}")
        return value

    @property
    def values(self) -> tuple[str, ...]:
        return threat_names("lp")

    def describe(self) -> str:
        return ", ".join(self.values)


@dataclass(frozen=True)
class Device(Constraint):
    """A torch device: a string such as ``cpu`` or ``cuda:0``, or a ``torch.device``
    (whether this machine has it is checked when the model is wrapped)."""

    def check(self, value: object, name: str) -> object:
        if not isinstance(value, str) and type(value).__name__ != "device":
            raise InputError(f"{name} must be a torch device such as 'cpu' or 'cuda:0', got "
                             f"{value!r}")
        return value

    def describe(self) -> str:
        return "cpu, cuda, cuda:N, mps"


# -- the declaration ---------------------------------------------------------------------------
_SAME = object()


@dataclass(frozen=True)
class Option:
    """One search option of :func:`robustscope.radius`.

    ``spec_default``: the default in an evaluation spec where it differs from
    ``radius()``'s, with ``spec_default_why`` saying why (shown in the docs)."""

    name: str
    default: object
    constraint: Constraint
    help: str
    spec_default: object = _SAME
    spec_default_why: str = ""

    def check(self, value: object, name: str | None = None) -> object:
        """``value`` if this option accepts it (converted), else :class:`InputError`."""
        return self.constraint.check(value, name or self.name)

    @property
    def run_default(self) -> object:
        """The default in an evaluation spec."""
        return self.default if self.spec_default is _SAME else self.spec_default

    @property
    def choices(self) -> tuple[str, ...] | None:
        """The accepted names, for options that take one of a list."""
        return getattr(self.constraint, "values", None)

    @property
    def flag(self) -> str:
        """The option of the ``robustscope radius`` command."""
        return "--" + self.name.replace("_", "-")


_DECLARED = (
    Option("threat", "linf", LpThreatName(),
           "Norm of the scaled perturbation (x' - x) / scale."),
    Option("solver", "auto", OneOf(SEARCH_SOLVERS, "a solver of the radius search"),
           "auto: exact where the model allows it, else minimum-norm + PGD; exact: auto plus "
           "the network MILP; minnorm or pgd alone."),
    Option("max_radius", None, Number(gt=0, allow_none=True),
           "Largest strength tried; default: one scale unit on every feature (1 for Linf, "
           "sqrt(d) for L2, d for L1)."),
    Option("budget", None, Number(integer=True, gt=0, allow_none=True),
           "Model passes (forward + backward) allowed per input; unset: no limit."),
    Option("rtol", 0.01, Number(gt=0, lt=1),
           "Relative bracket width (hi - lo) / hi at which bisection stops; also the tolerance of "
           "the evidence behind the converged column (white box: the margin of the last "
           "rounds; black box: the step-down search's smallest step, rtol / 2, and the "
           "radius's fall over the last fifth of the budget, under rtol)."),
    Option("seed", 0, Number(integer=True, ge=0, integral_floats=False),
           "Seeds every random choice; the same seed gives the same numbers."),
    Option("device", "cpu", Device(), "Torch device, e.g. cpu or cuda:0."),
    Option("batch_size", 512, Number(integer=True, gt=0),
           "Inputs searched together (and per progress step).",
           spec_default=128,
           spec_default_why="the inputs of a batch seed each other's search, so a run's "
                            "numbers depend on it; runs keep the batch size they always had"),
    Option("threads", AUTO, Threads(),
           "auto: one thread for small model calls, the caller's settings for large ones; "
           "an int: that many throughout; none: leave every setting alone."),
    Option("invalid", "error", OneOf(("error", "status"),
                                     "a policy for inputs that break a relation"),
           "Inputs that break a relation of the feature space: error (stop, naming them) or "
           "status (status invalid, not searched)."),
    Option("compare_unconstrained", False, Boolean(),
           "With relations in the feature space, also search every input without them and "
           "report what they change (a second whole search of every input)."),
    Option("certify", "auto", OneOf(CERTIFY_CHOICES, "a certification method"),
           "Certified lower bounds of torch networks: auto (CROWN when cheaper than the "
           "attack), none, ibp, crown, alpha-crown, or bab (branch and bound)."),
)

#: Every plain-valued option of :func:`robustscope.radius`, by name, in signature order.
OPTIONS: dict[str, Option] = {o.name: o for o in _DECLARED}


def check_options(**values: Any) -> dict[str, Any]:
    """``values`` (option name -> value) checked against the declaration and converted
    (``budget=3.0`` becomes ``3``); an unknown name or a refused value is an
    :class:`InputError` naming the option."""
    unknown = sorted(set(values) - set(OPTIONS))
    if unknown:
        raise InputError(f"unknown search option(s) {', '.join(unknown)}; the options are "
                         f"{', '.join(OPTIONS)}")
    return {name: OPTIONS[name].check(value) for name, value in values.items()}


def _post_init(self) -> None:
    for name, value in check_options(**dataclasses.asdict(self)).items():
        object.__setattr__(self, name, value)


def _kwargs(self, **overrides: Any) -> dict[str, Any]:
    """The options as keyword arguments of :func:`robustscope.radius` (``overrides``
    replace some, checked)."""
    out = {o: getattr(self, o) for o in OPTIONS}
    out.update(check_options(**overrides))
    return out


#: A checked set of search options (frozen, picklable: what a shard carries to a worker);
#: its fields are :data:`OPTIONS`, with their defaults. ``RadiusOptions(rtol=2)`` raises.
RadiusOptions = dataclasses.make_dataclass(
    "RadiusOptions",
    [(o.name, Any, dataclasses.field(default=o.default)) for o in _DECLARED],
    frozen=True, kw_only=True,
    namespace={"__post_init__": _post_init, "kwargs": _kwargs,
               "__doc__": "Search options of robustscope.radius(), checked against "
                          "robustscope.search.options.OPTIONS on construction."})
RadiusOptions.__module__ = __name__
