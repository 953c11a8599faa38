"""robustscope: the radius of robustness of any classifier, with verified counterexamples."""

from robustscope.errors import FeatureSpaceError, InputError, ModelError, RobustscopeError
from robustscope.models import Classifier, wrap_model
from robustscope.result import RadiusResult
from robustscope.space import FeatureSpace
from robustscope.statement import Statement

__version__ = "0.1.0"

__all__ = [
    "Classifier",
    "FeatureSpace",
    "FeatureSpaceError",
    "InputError",
    "ModelError",
    "RadiusResult",
    "RobustscopeError",
    "Statement",
    "__version__",
    "wrap_model",
]
