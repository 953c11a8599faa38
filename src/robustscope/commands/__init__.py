"""Sub-commands that register themselves on the CLI (see ``robustscope.cli.COMMAND_MODULES``)."""
