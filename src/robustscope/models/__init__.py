"""Model adapters: white box (torch), black box (predict_proba), linear (exact)."""

from robustscope.models.base import Classifier, QueryLedger
from robustscope.models.blackbox import ProbaClassifier
from robustscope.models.linear import LinearClassifier
from robustscope.models.torch_model import TorchClassifier
from robustscope.models.wrap import wrap_model

__all__ = [
    "Classifier",
    "LinearClassifier",
    "ProbaClassifier",
    "QueryLedger",
    "TorchClassifier",
    "wrap_model",
]
