"""CLI commands: each module exposes ``register(app: typer.Typer) -> None``."""
