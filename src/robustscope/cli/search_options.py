"""The search options of ``robustscope radius``, built from their declaration.

Every option of :data:`robustscope.search.options.OPTIONS` becomes one command-line option
(``max_radius`` -> ``--max-radius``) with the declaration's default, help text and choices
(an :class:`~enum.Enum` for options that take one of a list); nothing about them is written
here. :func:`with_search_options` adds them to a command function's signature, which typer
reads; :func:`search_values` turns what typer parsed into checked keyword arguments of
:func:`robustscope.radius`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from enum import Enum
from typing import Any

import typer

from robustscope.search.options import OPTIONS, Boolean, Number, Option, Threads


def _enum(option: Option) -> type[Enum]:
    title = "".join(part.title() for part in option.name.split("_"))
    return Enum(f"{title}Name", {v: v for v in option.choices}, type=str)


#: The choices of the options that take one of a list, as the enums typer shows.
CHOICES: dict[str, type[Enum]] = {o.name: _enum(o) for o in OPTIONS.values() if o.choices}


def _annotation_and_default(option: Option) -> tuple[Any, Any]:
    if option.name in CHOICES:
        return CHOICES[option.name], CHOICES[option.name](option.default)
    constraint = option.constraint
    if isinstance(constraint, Boolean):
        return bool, option.default
    if isinstance(constraint, Number):
        kind = int if constraint.integer else float
        return (kind | None if constraint.allow_none else kind), option.default
    if isinstance(constraint, Threads):
        return str, option.default if option.default is not None else "none"
    return str, option.default


def declared_parameters() -> list[inspect.Parameter]:
    """One keyword parameter per declared option, its default a ``typer.Option``."""
    out = []
    for option in OPTIONS.values():
        annotation, default = _annotation_and_default(option)
        # a flag that is off by default has one name: typer's --no-... twin only repeats the
        # default (and cuts the help table's names at 80 columns)
        names = (option.flag,) if annotation is bool and default is False else ()
        out.append(inspect.Parameter(
            option.name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
            default=typer.Option(default, *names, help=option.help)))
    return out


def with_search_options(command: Callable) -> Callable:
    """``command`` (whose ``**search`` receives them) with the declared options added to the
    signature typer reads."""
    signature = inspect.signature(command, eval_str=True)
    own = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    command.__signature__ = signature.replace(parameters=own + declared_parameters())
    return command


def search_values(parsed: dict[str, Any]) -> dict[str, Any]:
    """The values typer parsed as checked keyword arguments of :func:`robustscope.radius`
    (choices as their strings, ``--threads`` read as ``auto`` / ``none`` / an int); a refused
    value is an :class:`~robustscope.core.errors.InputError` naming its option
    (``--rtol``)."""
    out = {}
    for name, value in parsed.items():
        option = OPTIONS[name]
        if isinstance(value, Enum):
            value = value.value
        if isinstance(option.constraint, Threads) and isinstance(value, str):
            value = Threads.from_text(value)
        out[name] = option.check(value, option.flag)
    return out
