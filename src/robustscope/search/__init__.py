"""The radius search: strategy, verification, censoring, the ledger; grid search."""
