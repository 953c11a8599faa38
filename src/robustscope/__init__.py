"""robustscope: the radius of robustness of any classifier, with verified counterexamples.

The public API lives here; each name is imported from its layer on first use, so that
``import robustscope`` (and the command line's start-up) stays cheap.

Layers (each a subpackage; imports point down this list only): ``cli`` → ``runs`` →
``report`` → ``scores`` → ``search`` → ``solvers`` → ``models``, ``threats`` → ``core``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

#: Public name -> the module that defines it.
_PUBLIC = {
    # core
    "FeatureSpace": "robustscope.core.space",
    "Statement": "robustscope.core.statement",
    "RadiusResult": "robustscope.core.result",
    "RobustscopeError": "robustscope.core.errors",
    "RobustscopeWarning": "robustscope.core.errors",
    "InputError": "robustscope.core.errors",
    "ModelError": "robustscope.core.errors",
    "FeatureSpaceError": "robustscope.core.errors",
    # models
    "Classifier": "robustscope.models.base",
    "wrap_model": "robustscope.models.wrap",
    "load_model": "robustscope.models.loaders",
    # search
    "radius": "robustscope.search.engine",
    "SearchConfig": "robustscope.search.plan",
    "grid_robustness": "robustscope.search.grid",
    "evaluate_threats": "robustscope.search.grid",
    "random_directions_radius": "robustscope.search.random_directions",
    # scores
    "intrinsic_scores": "robustscope.scores.intrinsic",
    "scores_from_result": "robustscope.scores.intrinsic",
    "subset_independence": "robustscope.scores.intrinsic",
    "subset_independence_from_result": "robustscope.scores.intrinsic",
    "flip_rate": "robustscope.scores.distribution",
    "ood_check": "robustscope.scores.distribution",
    "proxy_a_distance": "robustscope.scores.distribution",
    "competitiveness": "robustscope.scores.multiattack",
    "flip_probability": "robustscope.scores.tradeoff",
    "eps_for_alpha": "robustscope.scores.tradeoff",
    # runs
    "open_store": "robustscope.runs.store",
}

__all__ = [
    "Classifier",
    "FeatureSpace",
    "FeatureSpaceError",
    "InputError",
    "ModelError",
    "RadiusResult",
    "RobustscopeError",
    "RobustscopeWarning",
    "SearchConfig",
    "Statement",
    "__version__",
    "competitiveness",
    "eps_for_alpha",
    "evaluate_threats",
    "flip_probability",
    "flip_rate",
    "grid_robustness",
    "intrinsic_scores",
    "load_model",
    "ood_check",
    "open_store",
    "proxy_a_distance",
    "radius",
    "random_directions_radius",
    "scores_from_result",
    "subset_independence",
    "subset_independence_from_result",
    "wrap_model",
]


def _version() -> str:
    """The installed distribution's version (reading the metadata costs a scan of the
    environment's packages, so it is done on first use of ``__version__``)."""
    from importlib import metadata

    try:
        return metadata.version("robustscope")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return "0+unknown"


def __getattr__(name: str) -> object:
    module = _PUBLIC.get(name)
    if name == "__version__":
        value: object = _version()
    elif module is None:
        raise AttributeError(f"module 'robustscope' has no attribute '{name}'")
    else:
        value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # static tools see the real names
    from robustscope.core.errors import (
        FeatureSpaceError,
        InputError,
        ModelError,
        RobustscopeError,
        RobustscopeWarning,
    )
    from robustscope.core.result import RadiusResult
    from robustscope.core.space import FeatureSpace
    from robustscope.core.statement import Statement
    from robustscope.models.base import Classifier
    from robustscope.models.loaders import load_model
    from robustscope.models.wrap import wrap_model
    from robustscope.runs.store import open_store
    from robustscope.scores.distribution import flip_rate, ood_check, proxy_a_distance
    from robustscope.scores.intrinsic import (
        intrinsic_scores,
        scores_from_result,
        subset_independence,
        subset_independence_from_result,
    )
    from robustscope.scores.multiattack import competitiveness
    from robustscope.scores.tradeoff import eps_for_alpha, flip_probability
    from robustscope.search.engine import radius
    from robustscope.search.grid import evaluate_threats, grid_robustness
    from robustscope.search.plan import SearchConfig
    from robustscope.search.random_directions import random_directions_radius
