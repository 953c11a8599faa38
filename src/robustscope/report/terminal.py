"""Tables that fit the terminal they are printed in.

A summary table of ten or more columns does not fit 80 columns: rich then folds numbers
across lines, which makes them unreadable. :func:`fitted_table` builds a rich table whose
columns carry a priority; while the table's narrowest rendering (every header wrapped at its
spaces, no number cut) is wider than the console, it leaves out the least important column
and names the columns it left out in the caption. The columns it keeps get widths of their
own (:func:`_fit_widths`): each at least its longest word, header included, so that no word
is broken (rich's own narrowing takes from the widest columns first and cuts ``HopSkipJump``
to ``HopSkipJum``/``p``). Where even the essential columns do not fit, rich wraps (and as
a last resort folds) their cells.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table


@dataclass(frozen=True)
class Col:
    """A column of a :func:`fitted_table`: header, alignment, priority (0 = always shown;
    columns of higher priority are left out first when the table is too wide) and a note
    that explains it in the caption (while it is shown)."""

    header: str
    justify: str = "right"
    priority: int = 0
    note: str | None = None


def fitted_table(title: str, columns: Sequence[Col], rows: Sequence[Sequence[str]],
                 console: Console, caption: str | None = None) -> Table:
    """A :class:`rich.table.Table` of ``rows`` (one string per column) that fits
    ``console.width``, leaving out the columns of highest priority first (the caption says
    which)."""
    shown = list(range(len(columns)))
    while True:
        table = _build(title, columns, rows, shown, caption)
        notes = [caption] if caption else []
        notes += [columns[i].note for i in shown if columns[i].note]
        dropped = [columns[i].header for i in range(len(columns)) if i not in shown]
        if dropped:
            notes.append(f"left out to fit {console.width} columns: {', '.join(dropped)}")
        table.caption = "; ".join(notes) or None
        optional = [i for i in shown if columns[i].priority > 0]
        if not optional or _min_width(console, table) <= console.width:
            _fit_widths(table, [columns[i].header for i in shown],
                        [[row[i] for i in shown] for row in rows], console.width)
            return table
        # the least important column; among equals, the rightmost
        shown.remove(max(optional, key=lambda i: (columns[i].priority, i)))


def _build(title: str, columns: Sequence[Col], rows: Sequence[Sequence[str]],
           shown: list[int], caption: str | None) -> Table:
    table = Table(title=title, caption=caption)
    for i in shown:
        table.add_column(columns[i].header, justify=columns[i].justify, overflow="fold")
    for row in rows:
        table.add_row(*(row[i] for i in shown))
    return table


def _min_width(console: Console, table: Table) -> int:
    # measured unbounded: a measurement is capped at the width it is given
    return Measurement.get(console, console.options.update_width(10**6), table).minimum


def _fit_widths(table: Table, headers: Sequence[str], rows: Sequence[Sequence[str]],
                width: int) -> None:
    """Give ``table``'s columns widths that fit ``width`` without breaking a word: each gets
    its longest word (of its header and cells), and the room left goes to the columns that
    need the least more to fit their longest line, so as many as possible stay on one line.
    Nothing is set where the table fits as it is, or where even the longest words do not."""
    cells = [[h, *(row[k] for row in rows)] for k, h in enumerate(headers)]
    longest_word = [max(cell_len(w) for text in col for w in text.split() or [""])
                    for col in cells]
    longest_line = [max(cell_len(line) for text in col for line in text.splitlines() or [""])
                    for col in cells]
    # borders: one rule per column and one more; padding: one space either side of each cell
    room = width - (len(headers) + 1) - 2 * len(headers)
    if sum(longest_line) <= room or sum(longest_word) > room:
        return
    widths = list(longest_word)
    left = room - sum(widths)
    for k in sorted(range(len(widths)), key=lambda k: longest_line[k] - longest_word[k]):
        grow = min(left, longest_line[k] - widths[k])
        widths[k] += grow
        left -= grow
    for column, w in zip(table.columns, widths, strict=True):
        column.width = w
