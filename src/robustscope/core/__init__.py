"""Errors, the feature space, the statement, the result and its row schema, input checks."""
