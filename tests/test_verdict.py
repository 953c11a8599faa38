"""VNN-LIB properties (core/vnnlib.py) and verdicts (search/verdict.py): parsing, the
robustness form, and soundness against exact answers of a MILP on small random ReLU
networks; the ``verify`` command on an ONNX file and an instance list."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import Bounds, LinearConstraint, milp
from typer.testing import CliRunner

from robustscope.cli.app import app
from robustscope.core.errors import InputError
from robustscope.core.vnnlib import counterexample_text, parse_property, robustness_form
from robustscope.models.torch_model import TorchClassifier
from robustscope.search.verdict import SAT, UNSAT, Bracket, verify_property


def _declare(d: int, k: int) -> list[str]:
    return ([f"(declare-const X_{i} Real)" for i in range(d)]
            + [f"(declare-const Y_{j} Real)" for j in range(k)])


def _box(lo, hi) -> list[str]:
    return ([f"(assert (>= X_{i} {float(v)!r}))" for i, v in enumerate(lo)]
            + [f"(assert (<= X_{i} {float(v)!r}))" for i, v in enumerate(hi)])


def robustness_text(x: np.ndarray, label: int, eps: float, k: int, clip=(0.0, 1.0)) -> str:
    lo = np.maximum(x - eps, clip[0])
    hi = np.minimum(x + eps, clip[1])
    alts = " ".join(f"(and (>= Y_{j} Y_{label}))" for j in range(k) if j != label)
    return "\n".join(_declare(len(x), k) + _box(lo, hi) + [f"(assert (or {alts}))"])


# -- parsing ------------------------------------------------------------------------------
def test_parse_box_disjunction_and_linear_terms():
    text = "\n".join(["; a comment", *_declare(2, 3), *_box([0.0, -1.0], [1.0, 2.5]),
                      "(assert (or (and (>= Y_0 Y_1) (<= Y_2 0.5))",
                      "            (and (<= (+ Y_0 (* 2 Y_1)) (- Y_2 1)))))",
                      "(assert (< Y_0 3))"])
    prop = parse_property(text)
    np.testing.assert_array_equal(prop.lower, [0.0, -1.0])
    np.testing.assert_array_equal(prop.upper, [1.0, 2.5])
    assert len(prop.disjuncts) == 2  # the last assert joins each disjunct
    c, b = prop.disjuncts[0]
    np.testing.assert_array_equal(c, [[-1, 1, 0], [0, 0, 1], [1, 0, 0]])
    np.testing.assert_array_equal(b, [0, 0.5, 3])
    assert list(prop.strict[0]) == [False, False, True]
    c, b = prop.disjuncts[1]
    np.testing.assert_array_equal(c[0], [1, 2, -1])
    assert b[0] == -1
    y = np.array([[2.0, 1.0, 0.4], [2.0, 3.0, 0.4], [0.0, 0.0, 2.0]])
    np.testing.assert_array_equal(prop.unsafe(y), [True, False, True])


@pytest.mark.parametrize("text, match", [
    ("(declare-const X_0 Real)(declare-const Y_0 Real)(assert (<= X_0 1))"
     "(assert (<= Y_0 0))", "X_0 has no lower bound"),
    ("(declare-const X_0 Real)(declare-const Y_0 Real)(assert (<= X_0 1))(assert (>= X_0 0))"
     "(assert (<= Y_0 X_0))", "X_0 inside an output"),
    ("(declare-const X_0 Real)(declare-const Y_0 Real)(assert (<= X_0 1))(assert (>= X_0 0))",
     "no output constraint"),
    ("(declare-const X_0 Real)(assert (<= X_0 1)", "unbalanced"),
])
def test_parse_errors_name_the_problem(text, match):
    with pytest.raises(InputError, match=match):
        parse_property(text, "p.vnnlib")


def test_robustness_form_with_clipping():
    x = np.array([0.0, 0.02, 0.5, 0.99, 1.0])
    prop = parse_property(robustness_text(x, 2, 0.05, 4))
    form = robustness_form(prop)
    assert form is not None and form.label == 2
    assert form.clip_lower == 0.0 and form.clip_upper == 1.0
    assert form.eps_inner == pytest.approx(0.05) and form.eps_outer == pytest.approx(0.05)
    # a coordinate clipped on one side is centred eps inside the other end
    np.testing.assert_allclose(np.maximum(form.center - 0.05, 0), prop.lower, atol=1e-12)
    np.testing.assert_allclose(np.minimum(form.center + 0.05, 1), prop.upper, atol=1e-12)
    # not every other class: not a robustness property
    text = "\n".join(_declare(2, 3) + _box([0, 0], [1, 1]) + ["(assert (>= Y_1 Y_0))"])
    assert robustness_form(parse_property(text)) is None


def test_counterexample_format():
    assert counterexample_text(np.array([0.5, 1.0]), np.array([-2.0])) == \
        "((X_0 0.5)\n (X_1 1.0)\n (Y_0 -2.0))\n"


# -- soundness against a MILP ---------------------------------------------------------------
def _net(seed: int, d: int = 3, width: int = 8, k: int = 3) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(d, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, k)).eval()


def _feasible(net: torch.nn.Sequential, lo, hi, c, b) -> bool:
    """Whether some x in [lo, hi] gives outputs with ``c @ y <= b`` (exact MILP, big-M from
    interval bounds)."""
    layers = [(m.weight.detach().double().numpy(), m.bias.detach().double().numpy())
              for m in net if isinstance(m, torch.nn.Linear)]
    sizes = [len(lo)]
    lb_all, ub_all, integ = list(lo), list(hi), [0] * len(lo)
    rows, rlo, rhi = [], [], []
    cur, cur_lo, cur_hi = 0, np.asarray(lo, float), np.asarray(hi, float)
    offset = len(lo)

    def new(n, low, up, integer=0):
        nonlocal offset
        start = offset
        offset += n
        lb_all.extend(low)
        ub_all.extend(up)
        integ.extend([integer] * n)
        return start

    blocks = []
    for li, (w, bias) in enumerate(layers):
        zl = np.minimum(w, 0) @ cur_hi + np.maximum(w, 0) @ cur_lo + bias
        zu = np.maximum(w, 0) @ cur_hi + np.minimum(w, 0) @ cur_lo + bias
        z = new(len(bias), zl, zu)
        blocks.append(("eq", z, cur, w, bias, len(sizes)))
        sizes.append(len(bias))
        if li == len(layers) - 1:
            out = z
            break
        a = new(len(bias), np.maximum(zl, 0), np.maximum(zu, 0))
        dlt = new(len(bias), np.zeros(len(bias)), np.ones(len(bias)), 1)
        blocks.append(("relu", a, z, zl, zu, dlt))
        cur, cur_lo, cur_hi = a, np.maximum(zl, 0), np.maximum(zu, 0)
    n = offset

    def row():
        return np.zeros(n)
    for blk in blocks:
        if blk[0] == "eq":
            _, z, src, w, bias, _ = blk
            for j in range(len(bias)):
                r = row()
                r[z + j] = 1
                r[src:src + w.shape[1]] -= w[j]
                rows.append(r)
                rlo.append(bias[j])
                rhi.append(bias[j])
        else:
            _, a, z, zl, zu, dlt = blk
            for j in range(len(zl)):
                r = row()  # a >= z
                r[a + j], r[z + j] = 1, -1
                rows.append(r)
                rlo.append(0)
                rhi.append(np.inf)
                r = row()  # a <= z - zl (1 - delta)
                r[a + j], r[z + j], r[dlt + j] = 1, -1, -zl[j]
                rows.append(r)
                rlo.append(-np.inf)
                rhi.append(-zl[j])
                r = row()  # a <= zu delta
                r[a + j], r[dlt + j] = 1, -zu[j]
                rows.append(r)
                rlo.append(-np.inf)
                rhi.append(0)
    k = c.shape[1]
    for i in range(len(b)):
        r = row()
        r[out:out + k] = c[i]
        rows.append(r)
        rlo.append(-np.inf)
        rhi.append(b[i])
    res = milp(np.zeros(n), constraints=LinearConstraint(np.array(rows), rlo, rhi),
               integrality=np.array(integ), bounds=Bounds(lb_all, ub_all))
    assert res.status in (0, 2), res.message
    return res.status == 0


def _truth(net, prop, slack: float = 1e-5) -> str | None:
    """``sat`` / ``unsat`` by the MILP, ``None`` where the answer lies within ``slack``
    of the boundary (float32 rounding could decide it either way)."""
    inside = any(_feasible(net, prop.lower, prop.upper, c, b - slack)
                 for c, b in prop.disjuncts)
    if inside:
        return SAT
    near = any(_feasible(net, prop.lower, prop.upper, c, b + slack) for c, b in prop.disjuncts)
    return None if near else UNSAT


def _random_property(rng, d: int, k: int) -> str:
    center = rng.uniform(-1, 1, d)
    half = rng.uniform(0.05, 0.6, d)
    lines = _declare(d, k) + _box(center - half, center + half)
    disj = []
    for _ in range(rng.integers(1, 4)):
        atoms = []
        for _ in range(rng.integers(1, 3)):
            j, m = rng.choice(k, 2, replace=False)
            if rng.random() < 0.5:
                atoms.append(f"(>= Y_{j} Y_{m})")
            else:
                atoms.append(f"(<= Y_{j} {rng.normal(0, 0.5):.4f})")
        disj.append("(and " + " ".join(atoms) + ")")
    lines.append("(assert (or " + " ".join(disj) + "))")
    return "\n".join(lines)


def test_no_verdict_contradicts_the_milp():
    rng = np.random.default_rng(1)
    decided = checked = 0
    for seed in range(12):
        net = _net(seed)
        model = TorchClassifier(net, 3, (3,))
        for _ in range(4):
            if rng.random() < 0.4:
                x = rng.uniform(0, 1, 3)
                with torch.no_grad():
                    label = int(net(torch.as_tensor(x, dtype=torch.float32)[None]).argmax())
                text = robustness_text(x, label, float(rng.uniform(0.01, 0.3)), 3)
            else:
                text = _random_property(rng, 3, 3)
            prop = parse_property(text)
            truth = _truth(net, prop)
            if truth is None:
                continue
            # with the radius bracket, and without it (attack, bounds, branch and bound)
            for bracket in (None, lambda form: Bracket(0.0, np.inf, None, 0.0)):
                verdict = verify_property(model, prop, timeout=10, seed=seed, bracket=bracket)
                checked += 1
                if verdict.result in (SAT, UNSAT):
                    decided += 1
                    assert verdict.result == truth, (seed, text, verdict)
                if verdict.result == SAT:  # the counterexample is in the box and unsafe
                    assert prop.contains(verdict.x[None])[0]
                    with torch.no_grad():
                        y = net(torch.as_tensor(verdict.x, dtype=torch.float32)[None]).numpy()
                    assert prop.unsafe(y)[0]
    assert checked >= 80 and decided >= 0.9 * checked, (checked, decided)


# -- the command ----------------------------------------------------------------------------
@pytest.fixture
def onnx_net(tmp_path):
    """A ReLU MLP exported to ONNX with a fixed batch of 1 and input 1×6×1."""
    import warnings

    net = _net(3, d=6, width=10, k=3)
    with torch.no_grad():  # decisions that change within the unit box
        net[0].weight.mul_(6.0)

    class Flat(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x):
            return self.net(x.flatten(1))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Flat().eval(), torch.zeros(1, 6, 1), str(tmp_path / "net.onnx"),
                          dynamo=False, input_names=["x"])
    return tmp_path / "net.onnx", net


def test_verify_command_writes_the_result_and_counterexample(tmp_path, onnx_net):
    path, net = onnx_net
    rng = np.random.default_rng(0)
    runner = CliRunner()
    rows = []
    results = {}
    for i in range(3):
        x = rng.uniform(0, 1, 6)
        with torch.no_grad():
            label = int(net(torch.as_tensor(x, dtype=torch.float32)[None]).argmax())
        for eps in (0.001, 0.5):
            spec = tmp_path / f"p{i}_{eps}.vnnlib"
            spec.write_text(robustness_text(x, label, eps, 3))
            rows.append(f"net.onnx,{spec.name},10")
            out = tmp_path / f"r{i}_{eps}.txt"
            res = runner.invoke(app, ["verify", "--model", str(path), "--spec", str(spec),
                                      "--timeout", "10", "--out", str(out)])
            assert res.exit_code == 0, res.output
            word = out.read_text().splitlines()[0]
            results[spec.name] = word
            assert word in ("sat", "unsat", "unknown", "timeout")
            prop = parse_property(spec.read_text())
            assert word == _truth(net, prop, 1e-6) or word in ("unknown", "timeout")
            if word == "sat":
                values = [float(t.strip("()").split()[1])
                          for t in out.read_text().splitlines()[1:]]
                assert prop.contains(np.array(values[:6])[None])[0]
                with torch.no_grad():
                    y = net(torch.as_tensor(values[:6], dtype=torch.float32)[None]).numpy()
                assert prop.unsafe(y)[0]
    assert "unsat" in results.values() and "sat" in results.values()
    (tmp_path / "instances.csv").write_text("\n".join(rows) + "\n")
    res = runner.invoke(app, ["verify", "--instances", str(tmp_path / "instances.csv"),
                              "--out-dir", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    import pandas as pd

    summary = pd.read_csv(tmp_path / "out" / "summary.csv")
    assert list(summary["result"]) == [results[r.split(",")[1]] for r in rows]
    assert "solved" in res.output


def test_verify_command_bad_input(tmp_path, onnx_net):
    path, _ = onnx_net
    spec = tmp_path / "p.vnnlib"
    spec.write_text("\n".join(_declare(5, 3) + _box([0] * 5, [1] * 5)
                              + ["(assert (>= Y_1 Y_0))"]))
    res = CliRunner().invoke(app, ["verify", "--model", str(path), "--spec", str(spec)])
    assert res.exit_code == 2 and "declares 5 inputs" in res.output and "N×6×1" in res.output
    (tmp_path / "i.csv").write_text("net.onnx,p.vnnlib\n")
    res = CliRunner().invoke(app, ["verify", "--instances", str(tmp_path / "i.csv")])
    assert res.exit_code == 2 and "row 1 has 2 fields" in res.output


def test_a_shared_bracket_certifies_only_beyond_the_distance_between_centers():
    lin = torch.nn.Linear(2, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 0.0]]))
        lin.bias.copy_(torch.tensor([0.0, 0.5]))
    model = TorchClassifier(torch.nn.Sequential(lin), 2, (2,))
    prop = parse_property(robustness_text(np.array([0.8, 0.5]), 0, 0.1, 2))
    center = robustness_form(prop).center

    def shared(shift):
        return lambda form: Bracket(0.1 + 1e-3, np.inf, None, 0.0, center + shift)
    assert verify_property(model, prop, 10, bracket=shared(0.0)).method == "radius bracket"
    other = verify_property(model, prop, 10, bracket=shared(0.01))
    assert other.result == UNSAT and other.method != "radius bracket"


def test_an_answer_counts_every_row_the_model_saw():
    """Checks and attack go through one ledger: the verdict's passes equal the rows the
    network itself computed, forward and backward (counted by hooks), and a bracket shared by
    two properties is paid by the first answer only. The bound engine (float64) applies the
    network's layers to shapes and bounds, as in radius(): no query, not counted; the model
    itself runs in float32."""
    net = _net(3)
    model = TorchClassifier(net, 3, (3,))
    rows = {"forward": 0, "backward": 0}

    def forward(module, inputs, output):
        x = inputs[0]
        if x.dtype == torch.float32:
            rows["forward"] += x.shape[0]

    net[0].register_forward_hook(forward)
    net[0].register_full_backward_hook(lambda m, gi, go: rows.__setitem__(
        "backward", rows["backward"] + go[0].shape[0]))
    rng = np.random.default_rng(5)
    answered = 0
    for _ in range(6):
        prop = parse_property(_random_property(rng, 3, 3))
        before = rows["forward"] + rows["backward"]
        verdict = verify_property(model, prop, timeout=10, seed=0,
                                  bracket=lambda form: Bracket(0.0, np.inf, None, 0.0))
        spent = rows["forward"] + rows["backward"] - before
        assert verdict.queries == spent > 0
        answered += verdict.result in (SAT, UNSAT)
    assert answered >= 3
    shared = Bracket(0.0, np.inf, None, 0.0, queries=40)
    x = np.array([0.5, 0.5, 0.5])
    with torch.no_grad():
        label = int(net(torch.as_tensor(x, dtype=torch.float32)[None]).argmax())
    costs = []
    for eps in (0.05, 0.1):
        prop = parse_property(robustness_text(x, label, eps, 3))
        before = rows["forward"] + rows["backward"]
        verdict = verify_property(model, prop, timeout=10, bracket=lambda form: shared)
        costs.append(verdict.queries - (rows["forward"] + rows["backward"] - before))
    assert costs == [40, 0]


@pytest.mark.parametrize("with_bracket", [True, False])
def test_an_answer_keeps_its_timeout(with_bracket):
    """An answer ends near its limit: the radius bracket's rounds and bound probes,
    alpha-CROWN's steps and branch and bound all watch the clock (before, the bracket alone
    ran 4x past a 2 s limit on this network, whose property no method decides in 1.5 s
    where measured: a ``timeout``). The slack allows one uninterruptible step (the planned
    attack, one bound batch) on a loaded machine."""
    torch.manual_seed(0)
    d = 64
    layers = [torch.nn.Linear(d, 128), torch.nn.ReLU()]
    for _ in range(4):
        layers += [torch.nn.Linear(128, 128), torch.nn.ReLU()]
    net = torch.nn.Sequential(*layers, torch.nn.Linear(128, 10)).double().eval()
    model = TorchClassifier(net, 10, (d,))
    x = np.random.default_rng(0).uniform(0, 1, d)
    with torch.no_grad():
        label = int(net(torch.as_tensor(x)[None]).argmax())
    prop = parse_property(robustness_text(x, label, 0.05, 10))
    bracket = None if with_bracket else (lambda form: Bracket(0.0, np.inf, None, 0.0))
    verdict = verify_property(model, prop, timeout=1.5, bracket=bracket)
    assert verdict.result in ("timeout", "sat", "unsat")  # a timeout where measured
    assert verdict.seconds < 1.5 + 2.0, verdict.seconds
