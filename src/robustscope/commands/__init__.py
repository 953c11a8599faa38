"""CLI commands, one module each, exposing ``register(app)``."""
