"""Command-line interface: ``robustscope <command>``."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="robustscope",
    help="Radius of robustness for any classifier, with verified counterexamples.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def main() -> None:
    """robustscope: how far is each input from a decision change?"""
