"""The command line: one module per command, one failure helper."""
