"""Exceptions raised at robustscope's boundaries.

Every error names what was wrong (argument, feature, row) so that a user can fix the input
without reading the source.
"""

from __future__ import annotations


class RobustscopeError(Exception):
    """Base class of every error robustscope raises on purpose."""


class InputError(RobustscopeError, ValueError):
    """The data, labels or arguments given are invalid (names the argument, feature or row)."""


class ModelError(RobustscopeError):
    """The model cannot be wrapped, raised while called, or returned invalid output."""


class FeatureSpaceError(InputError):
    """A feature-space definition is invalid or contradicts the data."""


class BudgetExhausted(RobustscopeError):
    """A solver asked for more model calls than the per-input budget allows."""


class RobustscopeWarning(UserWarning):
    """A choice that runs but is likely to give poor results (e.g. a weak solver)."""
