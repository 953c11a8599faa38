"""The MILP radius of small ReLU networks against brute force, and in the search."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import train_mlp

from robustscope import FeatureSpace, InputError
from robustscope.search.engine import radius
from robustscope.solvers.exact.relu.milp import exact_relu_radius, relu_layers
from robustscope.threats import L1, LINF


@pytest.fixture(scope="module")
def toy_net():
    """A 2-16-3 ReLU network on three blobs in the unit square."""
    rng = np.random.default_rng(0)
    centers = np.array([[0.25, 0.3], [0.7, 0.35], [0.5, 0.75]])
    y = rng.integers(0, 3, 300)
    X = np.clip(centers[y] + 0.12 * rng.normal(size=(300, 2)), 0, 1)
    return train_mlp(X, y, hidden=16, epochs=300), X, y


@pytest.mark.parametrize("threat", [LINF, L1])
def test_matches_brute_force_on_a_grid(toy_net, threat):
    net, X, _ = toy_net
    grid = np.stack(np.meshgrid(np.linspace(0, 1, 301), np.linspace(0, 1, 301)), -1)
    grid = grid.reshape(-1, 2)
    with torch.no_grad():
        grid_pred = net(torch.tensor(grid, dtype=torch.float32)).argmax(1).numpy()
        pred = net(torch.tensor(X[:12], dtype=torch.float32)).argmax(1).numpy()
    space = FeatureSpace.box(2)
    res = exact_relu_radius(relu_layers(net), X[:12], pred, np.full(12, np.inf), space,
                            threat, time_limit=30)
    assert res.closed.all()
    order = np.inf if threat is LINF else 1
    spacing = 1 / 300
    for i in range(12):
        other = grid[grid_pred != pred[i]]
        brute = np.linalg.norm(other - X[i], ord=order, axis=1).min()
        assert res.lower_bound[i] <= brute + 1e-6  # a certified bound below every flip found
        assert res.lower_bound[i] >= brute - 2 * spacing  # and tight up to the grid's spacing
        milp = np.linalg.norm((res.x_adv[i].numpy() - X[i]) / space.scale, ord=order)
        assert milp == pytest.approx(res.lower_bound[i], rel=1e-4, abs=1e-7)


def test_search_certifies_the_attack_on_digits(digits):
    X, y = digits
    net = train_mlp(X[:600], y[:600], hidden=16, epochs=150)
    res = radius(net, X[600:606], y[600:606], threat="linf", space=FeatureSpace.box(64),
                 solver="exact")
    correct = res.status != "misclassified"
    assert (res.status[correct] == "exact").mean() >= 0.8
    assert (res.lower_bound[correct] <= res.radius[correct] * (1 + 1e-9)).all()
    with torch.no_grad():
        adv = net(torch.tensor(res.x_adv[correct], dtype=torch.float32)).argmax(1).numpy()
    assert (adv != y[600:606][correct]).all()
    assert res.meta["exact_solver"] == "relu"


def test_unsupported_networks_and_norms_are_refused(digits):
    conv = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten(),
                               torch.nn.Linear(72, 10))
    with pytest.raises(InputError, match="layer 0 is Conv2d"):
        relu_layers(conv)
    net = train_mlp(digits[0][:100], digits[1][:100], hidden=8, epochs=5)
    with pytest.raises(InputError, match="solver 'exact' needs"):
        radius(net, digits[0][:3], digits[1][:3], threat="l2", solver="exact")


@pytest.mark.parametrize("fmt", ["script", "trace", "export"])
def test_safe_formats_reach_the_exact_solver(toy_net, tmp_path, fmt):
    """A Sequential(Linear, ReLU, Linear) saved as TorchScript (.pt) or torch.export (.pt2)
    is read layer by layer from the saved module, as a pickled one is."""
    from robustscope import load_model

    net, X, y = toy_net
    example = torch.tensor(X[:4], dtype=torch.float32)
    if fmt == "export":
        path = tmp_path / "net.pt2"
        batch = torch.export.Dim("batch")
        torch.export.save(torch.export.export(net, (example,),
                                              dynamic_shapes={"input": {0: batch}}), path)
    else:
        path = tmp_path / "net.pt"
        saved = torch.jit.script(net) if fmt == "script" else torch.jit.trace(net, example)
        saved.save(str(path))
    model = load_model(path, example=X[:2])
    for (w, b), (w0, b0) in zip(relu_layers(model.module), relu_layers(net), strict=True):
        np.testing.assert_array_equal(w, w0)
        np.testing.assert_array_equal(b, b0)
    res = radius(model, X[:6], y[:6], threat="linf", space=FeatureSpace.box(2), solver="exact")
    assert res.meta["exact_solver"] == "relu"
    correct = res.status != "misclassified"
    assert correct.any() and (res.status[correct] == "exact").all()
    reference = radius(net, X[:6], y[:6], threat="linf", space=FeatureSpace.box(2),
                       solver="exact")
    np.testing.assert_allclose(res.radius, reference.radius, rtol=1e-3)


def test_a_saved_network_of_other_layers_is_refused_by_name(tmp_path):
    net = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    path = tmp_path / "tanh.pt2"
    torch.export.save(torch.export.export(net, (torch.zeros(3, 2),)), path)
    module = torch.export.load(str(path)).module()
    with pytest.raises(InputError, match="layer 1 is aten.tanh"):
        relu_layers(module)
    scripted = torch.jit.script(net)
    with pytest.raises(InputError, match="layer 1 is Tanh"):
        relu_layers(scripted)


def test_convolutional_network_milp_brackets_the_attack():
    """A tiny CNN with max-pooling: the MILP over the graph closes its brackets, its radius
    lies between the CROWN certificate and the attack's counterexample."""
    torch.manual_seed(4)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Flatten(), torch.nn.Linear(8, 3)).eval()
    with torch.no_grad():
        net[4].bias.zero_()  # every class predicted somewhere in the box
    X = torch.rand(6, 1, 6, 6).numpy()
    with torch.no_grad():
        y = net(torch.as_tensor(X)).argmax(1).numpy()
    space = FeatureSpace.box((1, 6, 6))
    attack = radius(net, X, y, threat="linf", space=space, certify="none")
    exact = radius(net, X, y, threat="linf", space=space, solver="exact", certify="crown")
    assert exact.meta["exact_solver"] == "relu"
    done = np.isfinite(attack.radius)
    assert done.sum() >= 4 and (exact.status[done] == "exact").all()
    assert (exact.radius[done] <= attack.radius[done] * (1 + 1e-4)).all()  # MILP tolerance
    assert (exact.lower_bound[done] <= exact.radius[done]).all()
    with torch.no_grad():
        adv = net(torch.as_tensor(exact.x_adv[done], dtype=torch.float32)).argmax(1).numpy()
    assert (adv != y[done]).all()
