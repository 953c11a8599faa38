"""Issue 43 ("What a new user still hits"), the items that are not one bad command line
(those are in tests/test_new_user_table.py, ``ISSUE_43``): help and tables at 80 columns,
the run's progress per batch, quiet loading, numbers as read, messages that show what they
found."""

from __future__ import annotations

import re
from io import StringIO

import pytest
import torch
import typer
from rich.console import Console
from typer.testing import CliRunner

from robustscope.cli.app import app


def _commands() -> list[tuple[str, object]]:
    group = typer.main.get_command(app)
    ctx = group.make_context("robustscope", ["--help"], resilient_parsing=True)
    return [(name, group.get_command(ctx, name)) for name in group.list_commands(ctx)]


# -- item 6: 80 columns ---------------------------------------------------------------------
@pytest.mark.parametrize("name", [n for n, _ in _commands()])
def test_help_at_80_columns_cuts_no_option_name(name: str) -> None:
    command = dict(_commands())[name]
    res = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "80", "TERM": "dumb"})
    assert res.exit_code == 0, res.output
    assert "…" not in res.output, res.output
    words = set(re.findall(r"-[-\w]+", res.output))
    for param in command.params:
        for opt in [*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ())]:
            if opt.startswith("-") and not getattr(param, "hidden", False):
                assert opt in words, f"{name}: {opt} is not shown whole at 80 columns"
        # an option's choices are shown (not <str>), each whole: <auto|none|ibp|crow / n|...
        # was a choice folded where the type column ended
        shown = param.display_type_rich(ctx=None) if hasattr(param, "display_type_rich") \
            else None
        for choice in (shown[1:-1].split("|") if shown and "|" in shown else ()):
            word = re.escape(choice)  # whole, beside a | < or > (a line may start or end it)
            assert re.search(rf"[<|]{word}(?![\w-])|(?<![\w-]){word}[|>]", res.output), \
                f"{name}: choice {choice} of {param.name} is not shown whole at 80 columns"


def _prose_lines(name: str | None) -> list[list[str]]:
    """The paragraphs of prose that ``robustscope [name] --help`` prints at 80 columns: the
    description above the first panel, and each command's entry in the group's Commands
    panel (its help column), as lists of stripped lines."""
    args = [name, "--help"] if name else ["--help"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "80", "TERM": "dumb"})
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    top = lines[:next(i for i, x in enumerate(lines) if x.startswith("╭"))]
    paragraphs: list[list[str]] = [[]]
    for line in top:
        if line.strip() and not line.strip().startswith("Usage:"):
            paragraphs[-1].append(line.strip())
        elif paragraphs[-1]:
            paragraphs.append([])
    if name is None:  # the Commands panel: '│ name   help... │', continued under the help
        for line in lines:
            inner = line.strip("│ ")
            if not line.startswith("│") or not inner:
                continue
            if line[2] != " ":                       # a command's first line
                paragraphs.append([inner.split(None, 1)[1]])
            else:
                paragraphs[-1].append(inner)
    return [p for p in paragraphs if p]


@pytest.mark.parametrize("name", [None, *(n for n, _ in _commands())])
def test_help_prose_fills_its_lines_at_80_columns(name: str | None) -> None:
    """A docstring's own line breaks are not kept: the terminal wraps the prose, so no line
    of a paragraph but its last stops half-way ('... x one threat) that run' / 'on local
    worker processes ...' at 80 columns before)."""
    for paragraph in _prose_lines(name):
        for line, after in zip(paragraph, paragraph[1:], strict=False):
            # a line is short only where the next one's first word would not fit on it
            assert len(line) + 1 + len(after.split()[0]) > 60, (name, line, after)


def _words_whole(text: str, cells: list[str]) -> list[str]:
    """The words of ``cells`` that no line of the rendered ``text`` shows whole."""
    lines = text.splitlines()
    return [w for cell in cells for w in cell.split()
            if not any(re.search(rf"(?<![\w.%]){re.escape(w)}(?![\w.%])", line)
                       for line in lines)]


@pytest.mark.parametrize("width", [60, 80, 100])
def test_fitted_tables_break_no_word(width: int) -> None:
    """The run, relations and demo tables at 80 columns: headers and cells wrap at spaces
    only (rich's own narrowing printed ``unconstraine``/``d`` and ``HopSkipJum``/``p``)."""
    from robustscope.report.terminal import Col, fitted_table

    tables = [
        ((Col("model", "left"), Col("solver", "left", 1), Col("clean acc."),
          Col("exact", priority=2), Col("attacked", priority=2), Col("censored"),
          Col("median r"), Col("25% r", priority=3), Col("75% r", priority=3),
          Col("queries/input", priority=4), Col("seconds", priority=5)),
         [["logistic regression", "exact (linear)", "0.965", "143", "0", "0", "0.0812",
           "0.05", "0.1", "1", "0.2"],
          ["gradient boosting", "HopSkipJump + minnorm", "0.958", "0", "143", "0",
           "0.0812", "0.05", "0.1", "1234", "12.2"]]),
        ((Col("threat", "left"), Col("inputs", priority=2),
          Col("unconstrained counterexamples", priority=1), Col("break a relation"),
          Col("no valid counterexample", priority=1), Col("median radius growth"),
          Col("mean growth", priority=2)),
         [["linf", "100", "98", "12 (12.2%)", "3", "x1.234", "x1.5"]]),
    ]
    for columns, rows in tables:
        out = StringIO()
        console = Console(file=out, width=width)
        table = fitted_table("a title", columns, rows, console)
        console.print(table)
        text = out.getvalue()
        assert max(map(len, text.splitlines())) <= width
        shown = [c.header for c in table.columns]
        cells = [h for h in shown] + [row[[c.header for c in columns].index(h)]
                                      for row in rows for h in shown]
        assert not _words_whole(text, cells), text


_SPEC = """\
seed: 0
model: {{builtin: breast-cancer-logreg}}
data: {{builtin: breast-cancer, limit: 12}}
threats: [{{name: linf}}]
solver: {{budget: 200, batch_size: 2}}
scores: {{n_bootstrap: 20, ood: false, pad: false}}
outputs: {{dir: {out}, store: null}}
execution: {{shard_size: 6, workers: {workers}}}
"""


# -- item 4: quiet means quiet ------------------------------------------------------------
@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_quiet_radius_on_a_pt2_model_leaves_stderr_empty(tmp_path, kind: str) -> None:
    """``radius --model net.pt2 -q`` in a process of its own: nothing on stderr (torch gave
    a FutureWarning on loading and, for the CNN, printed the IndexError of a probe of the
    network at input shape ``()``, the program's input shape being unknown)."""
    import os
    import subprocess
    import sys

    import numpy as np
    import torch

    torch.manual_seed(0)
    if kind == "mlp":
        net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        X = torch.randn(6, 3)
    else:
        net = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU(),
                                  torch.nn.Flatten(), torch.nn.Linear(2 * 6 * 6, 3))
        X = torch.rand(4, 1, 8, 8)
    program = torch.export.export(net, (X[:2],),
                                  dynamic_shapes=({0: torch.export.Dim("batch")},))
    torch.export.save(program, tmp_path / "net.pt2")
    np.savez(tmp_path / "d.npz", X=X.numpy(), y=net(X).argmax(1).numpy())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-m", "robustscope.cli.app", "radius", "--model",
                           str(tmp_path / "net.pt2"), "--data", str(tmp_path / "d.npz"),
                           "--out", str(tmp_path / "r.csv"), "--budget", "200", "-q"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and proc.stdout == "", proc.stderr
    assert (tmp_path / "r.csv").exists()


# -- item 9: numbers as people read them ----------------------------------------------------
def test_accuracies_have_the_precision_of_their_count() -> None:
    from robustscope.scores.accuracy_grid import as_read, rounded_document

    assert as_read(57.99999999999999, 50) == 58
    assert as_read(100 / 3, 3) == 33 and as_read(200 / 3, 3) == 67
    assert as_read(100 * 117 / 200, 200) == 58.5
    assert as_read(100 * 5801 / 10000, 10000) == 58.01
    assert rounded_document({"NoAttack": 57.99999999999999, "A": {"0.1": 12.000000000000002}},
                            50) == {"NoAttack": 58, "A": {"0.1": 12}}


def test_image_grid_writes_rounded_accuracies_and_the_dataset(tmp_path) -> None:
    import json

    import numpy as np
    import torch

    from robustscope.scores.accuracy_grid import read_accuracy_file

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2))
    torch.jit.script(net).save(str(tmp_path / "tiny-net.pt"))
    X = np.random.default_rng(0).uniform(size=(7, 1, 4, 4))
    np.savez(tmp_path / "digits.npz", X=X, y=np.array([0, 1, 0, 1, 1, 0, 1]))
    res = CliRunner().invoke(app, ["image-grid", "--model", str(tmp_path / "tiny-net.pt"),
                                   "--data", str(tmp_path / "digits.npz"), "--threats",
                                   "linf", "--steps", "1", "--out", str(tmp_path / "a.json")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["details"] == {"model": "tiny-net", "dataset": "digits", "input_shape": [1, 4, 4],
                              "inputs": 7}
    values = [doc["NoAttack"], *doc["AutoLinfAttack"].values()]
    assert all(v == round(v) for v in values), values  # 7 inputs: whole percents
    [model] = read_accuracy_file(tmp_path / "a.json")
    assert model.name == "tiny-net" and model.details["dataset"] == "digits"


# -- item 1: column names as the library rewrote them ----------------------------------------
def test_respell_matches_only_what_the_library_rewrote() -> None:
    from robustscope.runs.columns import respell

    have, said = respell(["score 7", "a,b", "c"], ["c", "score_7", "a_b"], "lightgbm")
    assert have == ["score_7", "a_b", "c"] and len(said) == 2
    # scikit-learn keeps names as given: nothing is respelled
    assert respell(["score 7"], ["score_7"], "sklearn") == (["score 7"], [])
    # two columns that one rule maps to the same name: neither is taken
    assert respell(["a b", "a,b"], ["a_b"], "lightgbm")[0] == ["a b", "a,b"]
    # a column the model spells literally is never renamed
    assert respell(["a_b", "a b"], ["a_b", "x"], "lightgbm")[0] == ["a_b", "a b"]
    assert respell(["f[1]", "g"], ["f_1_", "g"], "xgboost")[0] == ["f_1_", "g"]


# -- item 3: shapes as one line ---------------------------------------------------------------
def test_fit_input_reshapes_only_where_sizes_agree() -> None:
    from robustscope.models.shapes import ShapeError, Takes, fit_input

    conv = Takes((3, None, None), "a Conv2d")
    assert fit_input((3, 8, 8), conv) == (None, "")
    shape, note = fit_input((192,), conv)
    assert shape == (3, 8, 8) and "square images assumed" in note
    assert fit_input((1, 28, 28), Takes((1, 28, 28), "exported"))[0] is None
    assert fit_input((784,), Takes((1, 28, 28), "exported"))[0] == (1, 28, 28)
    assert fit_input((3, 4, 4), Takes((48,), "Linear", flat=True)) == (None, "")
    for have, takes in (((100,), conv),                       # 100 / 3 is no image
                        ((3 * 8 * 6,), conv),                 # 48 is not square
                        ((785,), Takes((1, 28, 28), "x")),
                        ((8, 8, 3), conv),
                        ((3, 4), Takes((12,), "Linear"))):    # a Linear takes rows of 12
        with pytest.raises(ShapeError):
            fit_input(have, takes)
    with pytest.raises(ShapeError, match="channels-last"):
        fit_input((8, 8, 3), conv)
    assert fit_input((5,), None) == (None, "")


def test_torchscript_error_is_its_last_line(tmp_path) -> None:
    """A TorchScript model that fails on the example says the error, not its interpreter's
    traceback."""
    from robustscope.models.wrap import _reason

    text = ("The following operation failed in the TorchScript interpreter.\n"
            "Traceback of TorchScript (most recent call last):\n  File \"code/x.py\"\n"
            "RuntimeError: shape '[-1, 7]' is invalid for input of size 6\n")
    assert _reason(RuntimeError(text)) == ("RuntimeError: shape '[-1, 7]' is invalid for "
                                           "input of size 6")
    assert _reason(ValueError("plain")) == "plain"


class _HeadFirst(torch.nn.Module):
    """Defines its head (a Linear of 8) before the convolution it calls first."""

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(8, 2)
        self.conv = torch.nn.Conv2d(1, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x).mean(dim=(2, 3)).repeat(1, 4))


def test_data_the_model_runs_on_is_never_reshaped_or_refused(tmp_path) -> None:
    """The first layer is read only when the model fails on the data: a module whose first
    defined layer (a Linear of 8) is not the first it calls still takes its images, and a
    Linear takes any leading dimensions before its inputs."""
    import numpy as np

    from robustscope.models.loaders import load_model
    from robustscope.models.shapes import Takes, fit_input

    torch.jit.script(_HeadFirst()).save(str(tmp_path / "m.pt"))
    images = np.random.default_rng(0).uniform(size=(3, 1, 5, 5))
    clf = load_model(tmp_path / "m.pt", example=images)
    assert clf.shape_note is None and clf.n_classes == 2
    assert fit_input((7, 8), Takes((8,), "a Linear of 8 inputs")) == (None, "")
