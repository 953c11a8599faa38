"""One failure policy for every command: how a problem is reported and which exit code it gets.

Every command runs its body inside :func:`reporting_errors`, which turns any exception into
one line ``error: <what went wrong>`` on stderr and an exit code from :class:`ExitCode`:

====  ===========  ========================================================================
code  name         when
====  ===========  ========================================================================
0     OK           the command did what it was asked
1     FAILURE      a runtime failure: the model raised (or returned garbage) while being
                   evaluated, a full disk or another I/O error while writing, an evaluation
                   that stopped part-way, an unexpected exception (a bug). ``--verbose``
                   shows its traceback.
2     BAD_INPUT    bad input: a file that does not exist or cannot be read as what it should
                   be, invalid data, labels, feature-space or spec file, a model file that
                   cannot be loaded, an unknown or invalid option value (every
                   :class:`~robustscope.core.errors.RobustscopeError` outside the computation)
130   INTERRUPTED  interrupted (Ctrl-C): 128 + SIGINT, as shells report it
143   TERMINATED   stopped by SIGTERM (``robustscope run``): 128 + SIGTERM
====  ===========  ========================================================================

A :class:`~robustscope.core.errors.ModelError` is bad input while the model is loaded and
checked (an unknown file type, a model that fails on its probe input) and a runtime failure
while it is evaluated: commands mark the evaluation with :func:`computing`. Command-line
syntax errors that typer finds itself (an unknown option, a value outside a choice) are
reported the same way, in one line with exit code 2, by :class:`OneLineErrorsGroup`.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import logging
import re
import traceback
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from enum import IntEnum
from typing import Any, NoReturn

import typer
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from robustscope.core.errors import (
    BudgetExhausted,
    ModelError,
    RobustscopeError,
    RobustscopeWarning,
)


class ExitCode(IntEnum):
    """Exit codes of every ``robustscope`` command (see the module's table)."""

    OK = 0
    FAILURE = 1
    BAD_INPUT = 2
    INTERRUPTED = 130
    TERMINATED = 143


#: The exit-code policy, code -> what it means; the table the documentation shows.
EXIT_CODES: dict[int, str] = {
    ExitCode.OK: "success",
    ExitCode.FAILURE: "runtime failure: the model raised while being evaluated, a full disk or "
                      "other I/O error while writing, a results store that went away, an "
                      "unexpected exception (--verbose shows the traceback)",
    ExitCode.BAD_INPUT: "bad input: a missing or unreadable file, invalid data, labels, "
                        "features, spec or model file, a bad option value",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
    ExitCode.TERMINATED: "stopped by SIGTERM (robustscope run; the resume command is printed)",
}

#: OS errors that say a path given by the user is wrong, not that the system failed.
PATH_ERRORS: tuple[type[OSError], ...] = (FileNotFoundError, FileExistsError,
                                          IsADirectoryError, NotADirectoryError,
                                          PermissionError)

#: The exceptions module of the click that typer runs on (recent typer vendors its own copy).
_click_errors = importlib.import_module(typer.BadParameter.__module__)
#: Exceptions that already carry their exit (or usage error): never re-reported.
_PASS_THROUGH: tuple[type[BaseException], ...] = (
    typer.Exit, typer.Abort, _click_errors.ClickException,
    *(getattr(_click_errors, name) for name in ("Exit", "Abort") if hasattr(_click_errors, name)))


class ComputationFailed(Exception):
    """A failure while the computation ran (not a problem with its input): exit code 1."""


def one_line(message: object) -> str:
    """``message`` as one line: its lines joined with ``"; "``, blank lines dropped."""
    lines = [part.strip() for part in str(message).splitlines()]
    return "; ".join(part for part in lines if part) or "unknown error"


def fail(message: object, code: int = ExitCode.BAD_INPUT) -> NoReturn:
    """Print ``error: message`` (one line) on stderr and exit with ``code``."""
    prefix = typer.style("error:", fg="red", bold=True)
    typer.echo(f"{prefix} {one_line(message)}", err=True)
    raise typer.Exit(int(code))


def verbose_requested() -> bool:
    """Whether ``robustscope --verbose`` was given (``False`` outside a command line)."""
    ctx = _click_context()
    return bool(ctx is not None and ctx.find_root().params.get("verbose"))


def _click_context() -> Any:
    globals_module = importlib.import_module(_click_errors.__name__.rpartition(".")[0] +
                                             ".globals")
    return globals_module.get_current_context(silent=True)


def user_facing(message: str) -> str:
    """``message`` with the running command's Python parameter names (which library
    functions use) replaced by its option names: ``n_bootstrap: -1 must be >= 0`` becomes
    ``--n-bootstrap: -1 must be >= 0``. Replaced are a name that starts the message
    (``name:``), ``name=`` anywhere, and names with an underscore anywhere (no English word
    has one)."""
    ctx = _click_context()
    if ctx is None:
        return message
    for param in ctx.command.params:
        long = [o for o in getattr(param, "opts", ()) if o.startswith("--")]
        if param.param_type_name != "option" or not long or not param.name:
            continue
        name, option = re.escape(param.name), long[0]
        message = re.sub(rf"^{name}(?=:)", option, message)
        message = re.sub(rf"\b{name}=", f"{option} ", message)
        if "_" in param.name:
            message = re.sub(rf"(?<![-\w]){name}\b", option, message)
    return message


def _describe_os_error(exc: OSError) -> str:
    reason = exc.strerror or str(exc) or type(exc).__name__
    names = [str(n) for n in (exc.filename, exc.filename2) if n is not None]
    return f"{' -> '.join(names)}: {reason}" if names else reason


@contextmanager
def computing(*failures: type[BaseException]) -> Iterator[None]:
    """Mark the part of a command that evaluates: ``failures`` raised inside it are runtime
    failures (exit code 1), not bad input.

    Without arguments these are :class:`~robustscope.core.errors.ModelError` (the model
    raised or returned invalid output while being called) and
    :class:`~robustscope.core.errors.BudgetExhausted`. Input errors raised inside
    (:class:`~robustscope.core.errors.InputError`) keep exit code 2."""
    kinds = failures or (ModelError, BudgetExhausted)
    try:
        yield
    except kinds as exc:
        raise ComputationFailed(str(exc)) from exc


@contextmanager
def reporting_errors(verbose: bool | None = None) -> Iterator[None]:
    """Run a command's body under the exit-code policy of :class:`ExitCode`.

    Every exception becomes one line ``error: ...`` on stderr and ``typer.Exit`` with its
    code; ``typer.Exit`` raised inside (by :func:`fail`, say) passes through unchanged.
    ``verbose`` (default: ``robustscope --verbose``) prints the traceback of a runtime
    failure before its line."""
    try:
        yield
    except _PASS_THROUGH:
        raise
    except KeyboardInterrupt:
        fail("interrupted", ExitCode.INTERRUPTED)
    except ComputationFailed as exc:
        _runtime_failure(exc, str(exc), verbose)
    except RobustscopeError as exc:
        fail(user_facing(str(exc)), ExitCode.BAD_INPUT)
    except PATH_ERRORS as exc:
        fail(_describe_os_error(exc), ExitCode.BAD_INPUT)
    except OSError as exc:  # a full disk, an I/O error: the system failed, not the input
        _runtime_failure(exc, _describe_os_error(exc), verbose)
    except Exception as exc:  # a bug: say what it was, and how to see where
        _runtime_failure(exc, f"unexpected {type(exc).__name__}: {exc}", verbose)


def _runtime_failure(exc: BaseException, message: str, verbose: bool | None) -> NoReturn:
    if verbose if verbose is not None else verbose_requested():
        cause = exc.__cause__ if isinstance(exc, ComputationFailed) and exc.__cause__ else exc
        typer.echo("".join(traceback.format_exception(cause)).rstrip(), err=True)
    elif not isinstance(exc, OSError):
        message += " (run robustscope --verbose ... for the traceback)"
    fail(message, ExitCode.FAILURE)


def print_version(value: bool) -> None:
    """Print ``robustscope <version>`` and exit when ``value`` (the ``--version`` flag)."""
    if value:
        from importlib import metadata

        try:
            version = metadata.version("robustscope")
        except metadata.PackageNotFoundError:  # run from a source tree that is not installed
            version = "unknown (not installed)"
        typer.echo(f"robustscope {version}")
        raise typer.Exit()


def quiet_logging(quiet: bool) -> None:
    """With ``quiet``, show only errors from the ``robustscope`` loggers; without it, their
    level is the root's again (a quiet command earlier in the same process must not silence
    this one)."""
    logging.getLogger("robustscope").setLevel(logging.ERROR if quiet else logging.NOTSET)


class _Choices:
    """A type cell of choices (``<auto|none|ibp|crown|alpha-crown|bab>``) that wraps after a
    ``|`` only: as one word, rich folded it wherever the column ended (``<auto|none|ibp|crow``
    / ``n|alpha-crown|bab>`` at 80 columns)."""

    def __init__(self, text: Text) -> None:
        self.text = text
        plain, self.cuts = text.plain, [0]
        self.cuts += [i + 1 for i, ch in enumerate(plain) if ch == "|"] + [len(plain)]

    def _pieces(self) -> list[Text]:
        return [self.text[a:b] for a, b in zip(self.cuts, self.cuts[1:], strict=False)]

    def __rich_measure__(self, console: Any, options: Any) -> Measurement:
        return Measurement(max(len(p) for p in self._pieces()), len(self.text))

    def __rich_console__(self, console: Any, options: Any) -> Iterator[Text]:
        line = Text()
        for piece in self._pieces():
            if len(line) and len(line) + len(piece) > options.max_width:
                yield line
                line = Text()
            line.append_text(piece)
        yield line


class _OptionsTable(Table):
    """typer's options table in ``--help`` with the option names kept whole.

    typer lays an options panel out as one table whose columns it never declares (the
    required mark, the long names, the short ones, the negative names, the type, the help
    text); at 80 columns rich then shares the width among all of them and cuts names
    (``--adversarial-…``). Here every column but the last two never wraps, so the type and
    the help text (which can wrap) give up the width instead; a word of the help text wider
    than its column (a URL) is folded, not cut."""

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        declared = bool(self.columns)
        kind = renderables[-2] if len(renderables) > 1 else None
        if isinstance(kind, Text) and "|" in kind.plain:  # the type column: choices
            renderables = (*renderables[:-2], _Choices(kind), renderables[-1])
        for part in getattr(renderables[-1], "renderables", renderables[-1:]):
            if isinstance(part, Text):  # the help text: typer's Columns of Text parts
                part.overflow = "fold"
        super().add_row(*renderables, **kwargs)
        if not declared:  # the columns add_row just made: the names are all but the last two
            for column in self.columns[:-2]:
                column.no_wrap = True
                column.overflow = "ignore"


_typer_rich_utils = importlib.import_module("typer.rich_utils")
if getattr(_typer_rich_utils, "Table", None) is Table:  # typer's own options table only
    _typer_rich_utils.Table = _OptionsTable


class OneLineErrorsGroup(TyperGroup):
    """The ``robustscope`` command group: usage errors that typer finds while parsing the
    command line (an unknown option, a missing one, a value outside its choices or range)
    are reported like any bad input, in one line with exit code 2, instead of a usage
    banner. Every subcommand takes ``--version`` as the group does."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None,
                     **extra: Any) -> Any:
        with _one_line_usage_errors():
            return super().make_context(info_name, args, parent=parent, **extra)

    def get_params(self, ctx: Any) -> list[Any]:
        return _untyped_flags(super().get_params(ctx))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None and not getattr(command, "_flags_untyped", False):
            if not any("--version" in getattr(p, "opts", ()) for p in command.params):
                command.params.extend(_version_flags(self.params))
            inner = command.get_params
            command.get_params = lambda c: _untyped_flags(inner(c))
            command.help = reflowed(command.help)
            command._flags_untyped = True
        return command

    def invoke(self, ctx: Any) -> Any:
        with _one_line_usage_errors(), one_line_warnings():
            return super().invoke(ctx)


@contextmanager
def one_line_warnings() -> Iterator[None]:
    """robustscope's own warnings (:class:`RobustscopeWarning`: a choice likely to give poor
    results, a reference of another dataset) on stderr as one line ``warning: ...``, not in
    Python's format (the source file and line, then the line of code). Other warnings keep
    their format; warnings recorded (``pytest.warns``) are still recorded."""
    python_format = warnings.formatwarning

    def formatted(message: Any, category: type[Warning], filename: str, lineno: int,
                  line: str | None = None) -> str:
        if issubclass(category, RobustscopeWarning):
            return f"warning: {message}\n"
        return python_format(message, category, filename, lineno, line)

    warnings.formatwarning = formatted
    try:
        yield
    finally:
        warnings.formatwarning = python_format


def reflowed(text: str | None) -> str | None:
    """``text`` (a command's docstring) with the line breaks inside each paragraph made
    spaces, so that the terminal wraps it at its own width: typer's rich help keeps a
    docstring's own breaks, which at 80 columns left half-empty lines ("... that run" /
    "on local worker processes ..."). Paragraphs (separated by a blank line) stay apart; a
    paragraph that starts with ``\\b`` (click's "do not rewrap" mark) is kept as written."""
    if text is None:
        return None
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split("\n"))
                        for p in paragraphs)


def _version_flags(params: list[Any]) -> list[Any]:
    """The group's eager ``--version`` flag for a subcommand (``robustscope radius
    --version``): a copy that passes no value to the command's function."""
    out = []
    for param in params:
        if "--version" in getattr(param, "opts", ()):
            param = copy.copy(param)
            param.expose_value = False
            out.append(param)
    return out


def _untyped_flags(params: list[Any]) -> list[Any]:
    """``params`` with an empty type column for flags (typer's help shows ``<bool>`` for an
    option that takes no value); an option's own metavar is kept."""
    for param in params:
        if getattr(param, "is_flag", False) and not getattr(param, "count", False) \
                and param.metavar is None:
            param.metavar = ""
    return params


@contextmanager
def _one_line_usage_errors() -> Iterator[None]:
    help_instead = getattr(_click_errors, "NoArgsIsHelpError", ())  # shows help, not an error
    try:
        yield
    except _click_errors.ClickException as exc:
        if isinstance(exc, help_instead):
            raise
        fail(exc.format_message(), ExitCode.BAD_INPUT)
