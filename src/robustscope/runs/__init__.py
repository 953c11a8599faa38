"""Evaluation runs: specs, data, shards, backends, the journal, the results store."""
