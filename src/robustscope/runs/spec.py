"""Evaluation specs: one YAML file that says what to evaluate, how, and where to write it.

A spec names the model, the data, the feature space, the threats with their strength grids,
the solver and its budget, the scores, and the outputs. It is validated with pydantic; every
error names the key (``threats[1].budget``) **and** the line of the YAML file it comes from,
found by composing the YAML into nodes (which keep their positions) and walking the error's
location through them.

Minimal example::

    model: {builtin: breast-cancer-gbm}
    data: {builtin: breast-cancer}
    threats:
      - {name: linf, strengths: {max: 0.5, num: 20}}

See :class:`EvaluationSpec` for every key. The options of the radius search (solver, budget,
rtol, certify, ...) are not declared here: their fields (type, default, constraint, help) are
built from :data:`robustscope.search.options.OPTIONS`, and :data:`OPTION_KEYS` says under
which key of the spec each one lives.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from robustscope.core.errors import InputError
from robustscope.runs.locations import is_store_url
from robustscope.search.options import (
    OPTIONS,
    Boolean,
    Number,
    OneOf,
    Option,
    RadiusOptions,
    Threads,
)
from robustscope.threats.registry import implemented_threat, threat_entry

#: Models and data sets that ship with robustscope (trained on scikit-learn's breast-cancer).
BUILTIN_MODELS = ("breast-cancer-gbm", "breast-cancer-logreg")
BUILTIN_DATA = ("breast-cancer",)


#: Where each option of :func:`robustscope.radius` lives in a spec, by option name (the
#: ``solver.*`` keys may also be given per threat, ``threats[].solver.*``, which then replace
#: the top-level ``solver`` for that threat). ``threat`` names any threat of the registry in a
#: spec: image threats are searched on their strength grid.
OPTION_KEYS: dict[str, str] = {
    "threat": "threats[].name",
    "solver": "solver.name",
    "max_radius": "threats[].max_radius",
    "budget": "solver.budget",
    "rtol": "solver.rtol",
    "seed": "seed",
    "device": "model.device",
    "batch_size": "solver.batch_size",
    "threads": "solver.threads",
    "invalid": "features.invalid",
    "compare_unconstrained": "features.compare_unconstrained",
    "certify": "solver.certify",
}


class SpecError(InputError):
    """An evaluation spec is invalid; the message names the key and the line."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _option_field(option: Option) -> tuple[Any, Any]:
    """``(annotation, Field)`` of a spec key from the option's declaration: its type, its
    default in a run, its bounds (pydantic's own messages: ``Input should be greater than
    0``) and its check (the declaration's message, without the Python name: the key path
    names it)."""
    constraint = option.constraint

    def check(value: object) -> object:
        if isinstance(constraint, OneOf) and value not in constraint.values:
            raise ValueError(constraint.message(value, None))
        try:
            return option.check(value)
        except InputError as exc:
            raise ValueError(str(exc)) from None

    kwargs: dict[str, Any] = {"description": option.help}
    if isinstance(constraint, Number):
        kind: Any = int if constraint.integer else float
        kwargs.update(constraint.bounds())
        if not constraint.integer:
            kwargs["allow_inf_nan"] = False
        if constraint.allow_none:
            kind = kind | None
    elif isinstance(constraint, Boolean):
        kind = bool
    elif isinstance(constraint, OneOf):
        kind = str
        kwargs["json_schema_extra"] = {"enum": list(constraint.values)}
    elif isinstance(constraint, Threads):
        kind = Any
    else:
        kind = str
    return Annotated[kind, AfterValidator(check)], Field(option.run_default, **kwargs)


def _with_options(cls: type[BaseModel], **keys: str) -> type[BaseModel]:
    """``cls`` with one field per ``key=option name``, built from the declaration."""
    fields = {key: _option_field(OPTIONS[name]) for key, name in keys.items()}
    return create_model(cls.__name__, __base__=cls, __module__=__name__, __doc__=cls.__doc__,
                        **fields)


class ModelSpec(_Strict):
    """The classifier: a model file (``path``) or a built-in demo model (``builtin``)."""

    path: Path | None = None
    builtin: Literal["breast-cancer-gbm", "breast-cancer-logreg"] | None = None
    trust_pickle: bool = False
    name: str | None = Field(None, description="Name in the report and the store.")

    @model_validator(mode="after")
    def _one_source(self) -> ModelSpec:
        if (self.path is None) == (self.builtin is None):
            raise ValueError("give exactly one of 'path' (a model file) or 'builtin' "
                             f"(one of {', '.join(BUILTIN_MODELS)})")
        return self

    @property
    def display_name(self) -> str:
        return self.name or (self.builtin or Path(str(self.path)).stem)


ModelSpec = _with_options(ModelSpec, device="device")


class SplitSpec(_Strict):
    """Split the data file into a reference part (used for the out-of-distribution reading
    and, without a feature file, for the feature ranges) and the evaluated part."""

    test_size: float = Field(0.25, gt=0, lt=1)
    seed: int = 0
    stratify: bool = True


class DataSpec(_Strict):
    """The evaluation inputs: a CSV/NPZ file (``path``) or the built-in data (``builtin``)."""

    path: Path | None = None
    builtin: Literal["breast-cancer"] | None = None
    label_column: str = "label"
    split: SplitSpec | None = None
    reference: Path | None = Field(None, description="Reference (training) data file for the "
                                   "out-of-distribution reading.")
    limit: int | None = Field(None, gt=0, description="Evaluate only the first N inputs.")

    @model_validator(mode="after")
    def _one_source(self) -> DataSpec:
        if (self.path is None) == (self.builtin is None):
            raise ValueError("give exactly one of 'path' (a .csv or .npz file) or 'builtin' "
                             f"(one of {', '.join(BUILTIN_DATA)})")
        if self.builtin is not None and (self.split is not None or self.reference is not None):
            raise ValueError("built-in data comes with its own train/test split; "
                             "'split' and 'reference' apply to data files only")
        if self.split is not None and self.reference is not None:
            raise ValueError("give at most one of 'split' and 'reference'")
        return self


class FeaturesSpec(_Strict):
    """The feature space: a YAML file (``file``) or the same content inline."""

    file: Path | None = None
    default: dict[str, Any] | None = None
    features: list[dict[str, Any]] | None = None
    #: relations between features (``"debt <= 0.6 * income"``); with ``file``, put them in it
    constraints: list[str] | None = None

    @model_validator(mode="after")
    def _file_or_inline(self) -> FeaturesSpec:
        if self.file is not None and (self.default is not None or self.features is not None
                                      or self.constraints is not None):
            raise ValueError("give either 'file' or inline 'default'/'features'/'constraints', "
                             "not both")
        return self

    def inline(self) -> dict | None:
        if self.file is not None:
            return None
        out: dict = {}
        if self.default is not None:
            out["default"] = self.default
        if self.features is not None:
            out["features"] = self.features
        if self.constraints is not None:
            out["constraints"] = self.constraints
        return out


#: ``invalid`` (inputs that break a relation: ``error`` or ``status``) and
#: ``compare_unconstrained`` (also search without the relations: a second whole search of
#: every input) come from the search options' declaration.
FeaturesSpec = _with_options(FeaturesSpec, invalid="invalid",
                             compare_unconstrained="compare_unconstrained")


class GridSpec(_Strict):
    """``num`` evenly spaced strengths ``max/num, 2 max/num, ..., max``."""

    max: float = Field(gt=0)
    num: int = Field(20, ge=1, le=1000)

    def values(self) -> list[float]:
        return [float(v) for v in np.linspace(self.max / self.num, self.max, self.num)]


class SolverSpec(_Strict):
    """How the neighbourhood is searched, and at what cost: ``name`` (the search's
    ``solver``), ``budget``, ``rtol``, ``batch_size``, ``threads`` and ``certify``, every one
    declared in :data:`robustscope.search.options.OPTIONS`."""


SolverSpec = _with_options(SolverSpec, **{key.split(".")[1]: name
                                          for name, key in OPTION_KEYS.items()
                                          if key.startswith("solver.")})


class ThreatSpec(_Strict):
    """One threat model and its strength grid (in the threat's norm of the scaled delta)."""

    name: str
    strengths: list[float] | GridSpec | None = None
    solver: SolverSpec | None = None

    @field_validator("name")
    @classmethod
    def _known(cls, value: str) -> str:
        """Any spelling the threat registry accepts, stored as the canonical name."""
        return implemented_threat(value).name

    @property
    def is_grid(self) -> bool:
        """An image threat searched on its strength grid (robustscope.search.grid), not an
        Lp radius search."""
        return threat_entry(self.name).kind == "image"

    @field_validator("strengths")
    @classmethod
    def _positive(cls, value):
        if isinstance(value, list):
            if not value:
                raise ValueError("give at least one strength")
            bad = [v for v in value if not (math.isfinite(v) and v > 0)]
            if bad:
                raise ValueError(f"strengths must be finite and > 0, got {bad[0]}")
            value = sorted(set(float(v) for v in value))
        return value

    def strength_values(self) -> list[float] | None:
        if self.strengths is None:
            return None
        if isinstance(self.strengths, GridSpec):
            return self.strengths.values()
        return list(self.strengths)

    @model_validator(mode="after")
    def _grid_within_max(self) -> ThreatSpec:
        values = self.strength_values()
        if values and self.max_radius is not None and max(values) > self.max_radius:
            raise ValueError(f"largest strength {max(values):g} exceeds max_radius "
                             f"{self.max_radius:g}; accuracy there would be unknown")
        return self


ThreatSpec = _with_options(ThreatSpec, max_radius="max_radius")


class CRSpec(_Strict):
    """Competitiveness ratios (MultiRobustBench) against a reference acc*: ``published``
    (the CIFAR-10 table) or an accuracy file."""

    reference: str = "published"


class ScoresSpec(_Strict):
    """Which readings to compute."""

    intrinsic: bool = True
    n_bootstrap: int = Field(1000, ge=0)
    confidence: float = Field(0.95, gt=0, lt=1)
    censored: Literal["exclude", "bound"] = "exclude"
    ood: bool = True
    pad: bool = True
    cr: CRSpec | None = None
    fragile: int = Field(5, ge=0, le=100, description="Most fragile inputs shown.")


class OutputsSpec(_Strict):
    """Where the run writes its files (relative paths are relative to the spec file)."""

    dir: Path = Path("robustscope-run")
    report: str = "report.html"
    store: str | None = Field(None, description="Results store: a SQLite file path or a "
                              "database URL (postgresql://user:password@host:port/db).")
    adversarial: bool = True

    @field_validator("report")
    @classmethod
    def _html(cls, value: str) -> str:
        if not value.endswith(".html") or "/" in value:
            raise ValueError("report must be a file name ending in .html (it goes in 'dir')")
        return value


class ExecutionSpec(_Strict):
    """How the evaluation is split and where it runs (see docs/scaling.md).

    ``shard_size`` fixes the shard boundaries, hence the numbers: the same seed and shard size
    give the same results on any backend and with any number of workers."""

    backend: Literal["local", "ray"] = "local"
    workers: int | None = Field(None, ge=1, description="Worker processes; default: all cores "
                                "(local) or the cluster's CPUs (ray).")
    address: str | None = Field(None, description="Ray cluster address (ray backend).")
    shard_size: int = Field(256, ge=1, description="Inputs per shard (per threat).")


class EvaluationSpec(_Strict):
    """A whole evaluation (the top level of the YAML file)."""

    name: str | None = None
    model: ModelSpec
    data: DataSpec
    features: FeaturesSpec | None = None
    threats: list[ThreatSpec] = Field(min_length=1)
    solver: SolverSpec = SolverSpec()
    scores: ScoresSpec = ScoresSpec()
    outputs: OutputsSpec = OutputsSpec()
    execution: ExecutionSpec = ExecutionSpec()

    @model_validator(mode="after")
    def _unique_threats(self) -> EvaluationSpec:
        names = [t.name for t in self.threats]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"threat(s) {sorted(dup)} listed twice")
        return self

    def solver_for(self, threat: ThreatSpec) -> SolverSpec:
        return threat.solver or self.solver

    def resolve_paths(self, base: Path) -> EvaluationSpec:
        """A copy with relative paths made relative to ``base`` (the spec file's folder)."""
        def fix(p: Path | None) -> Path | None:
            if p is None:
                return None
            return p if p.is_absolute() else base / p

        spec = self.model_copy(deep=True)
        if spec.model.path is not None:
            spec.model.path = fix(spec.model.path)
        spec.data.path = fix(spec.data.path) if spec.data.path else None
        spec.data.reference = fix(spec.data.reference) if spec.data.reference else None
        if spec.features is not None and spec.features.file is not None:
            spec.features.file = fix(spec.features.file)
        spec.outputs.dir = fix(spec.outputs.dir) or spec.outputs.dir
        store = spec.outputs.store
        if store is not None and store != ":memory:" and not is_store_url(store):
            spec.outputs.store = str(fix(Path(store)))
        if spec.scores.cr is not None and spec.scores.cr.reference != "published":
            spec.scores.cr.reference = str(fix(Path(spec.scores.cr.reference)))
        return spec

    def search_options(self, threat: ThreatSpec) -> RadiusOptions:
        """The options of :func:`robustscope.radius` for ``threat``'s shards (checked; the
        seed is the run's, each shard searches with its own seed derived from it)."""
        solver = self.solver_for(threat)
        grid = threat.strength_values()
        values = {"seed": self.seed, "device": self.model.device,
                  "max_radius": threat.max_radius or (max(grid) if grid else None)}
        if not threat.is_grid:  # an image threat is searched on its grid, not by radius()
            values["threat"] = threat.name
        for name, key in OPTION_KEYS.items():
            section, _, field = key.partition(".")
            if section == "solver":
                values[name] = getattr(solver, field)
            elif section == "features":
                values[name] = getattr(self.features, field) if self.features is not None \
                    else OPTIONS[name].run_default
        return RadiusOptions(**values)


#: ``seed`` seeds every random choice of the run (each shard's search gets its own seed,
#: derived from it and the shard).
EvaluationSpec = _with_options(EvaluationSpec, seed="seed")


# -- loading with line numbers ---------------------------------------------------------------
def _node_at(root: yaml.Node, loc: tuple) -> tuple[yaml.Node, bool]:
    """The deepest node along ``loc`` (pydantic's error location); ``exact`` is False when
    the path stops early (a missing key: the error then points at its parent mapping)."""
    node = root
    for part in loc:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            for key, value in node.value:
                if key.value == part:
                    node = value
                    break
            else:
                return node, False
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return node, False
            node = node.value[part]
        else:
            # pydantic adds union-member tags ("list[float]", "GridSpec"): skip them
            continue
    return node, True


_TYPE_ERRORS = ("list_type", "dict_type", "model_type", "model_attributes_type")


def _key_path(loc: tuple) -> str:
    """``threats[1].solver.budget`` from pydantic's location tuple (union tags skipped)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "[" in str(part) or str(part)[:1].isupper():
            continue
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def parse_spec(text: str, source: str = "spec") -> EvaluationSpec:
    """Validate spec text; raise :class:`SpecError` naming ``source``, the key and the line."""
    try:
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark is not None else ""
        raise SpecError(f"{source}{where}: not valid YAML ({getattr(exc, 'problem', exc)})") \
            from exc
    if root is None or not isinstance(data, dict):
        raise SpecError(f"{source}, line 1: the spec must be a mapping with at least "
                        "'model', 'data' and 'threats'")
    try:
        return EvaluationSpec.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        paths = [_key_path(tuple(e["loc"])) for e in errors]
        lines = []
        for err, path in zip(errors, paths, strict=True):
            loc = tuple(err["loc"])
            # a failed union reports every alternative: drop the "wrong type" ones when a
            # more specific error exists at or below the same key
            if err["type"] in _TYPE_ERRORS and any(
                    q != path and q.startswith(path) for q in paths):
                continue
            node, _ = _node_at(root, loc)
            line = node.start_mark.line + 1
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                key_node, _ = _node_at(root, loc)
                line = key_node.start_mark.line + 1
                msg = "unknown key"
            elif err["type"] == "missing":
                msg = "missing required key"
            lines.append(f"{source}, line {line}: {path}: {msg}")
        # pydantic lists union alternatives separately; keep one message per key and line
        unique = list(dict.fromkeys(lines))
        raise SpecError("\n".join(unique)) from None


def load_spec(path: str | Path) -> EvaluationSpec:
    """Read and validate a spec file; relative paths in it are resolved against its folder."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"spec file {path} does not exist")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"spec file {path}: cannot read it ({exc})") from exc
    return parse_spec(text, str(path)).resolve_paths(path.parent)


# -- the options table of the docs -----------------------------------------------------------
def _shown(value: object) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) \
        else str(value)


def options_table() -> str:
    """The Markdown table of the radius search's options (``docs/evaluations.md`` holds it;
    ``tests/test_options.py`` checks it is this one): per option its ``radius()`` argument,
    command-line option, spec key, defaults, what it accepts and what it does, all read
    from the declaration."""
    lines = ["| `radius()` | `robustscope radius` | spec key | default | accepts | what |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, option in OPTIONS.items():
        default = f"`{_shown(option.default)}`"
        if option.run_default != option.default:
            default += (f" (spec: `{_shown(option.run_default)}`: "
                        f"{option.spec_default_why})")
        lines.append(f"| `{name}` | `{option.flag}` | `{OPTION_KEYS[name]}` | {default} | "
                     f"{option.constraint.describe()} | {option.help} |")
    return "\n".join(lines) + "\n"
