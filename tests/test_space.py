"""FeatureSpace: construction, validation and projection."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from robustscope import FeatureSpace, FeatureSpaceError, InputError


def test_from_data_takes_ranges_per_column_not_per_row():
    # the tutorial's trap: ranges taken over a row instead of a column
    X = np.array([[0.0, 100.0, -5.0], [1.0, 300.0, 5.0], [0.5, 200.0, 0.0]])
    space = FeatureSpace.from_data(X, names=["a", "b", "c"])
    np.testing.assert_array_equal(space.lower, [0.0, 100.0, -5.0])
    np.testing.assert_array_equal(space.upper, [1.0, 300.0, 5.0])
    np.testing.assert_array_equal(space.scale, [1.0, 200.0, 10.0])


def test_constant_column_gets_unit_scale():
    space = FeatureSpace.from_data(np.array([[1.0, 2.0], [1.0, 3.0]]))
    assert space.scale[0] == 1.0 and space.scale[1] == 1.0


def test_yaml_defaults_overrides_and_infinite_bounds(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text(
        "default: {lower: 0.0, upper: 1.0, scale: 1.0, type: real, mutable: true}\n"
        "features:\n"
        "  - {name: age, type: integer, lower: 18, upper: 100, mutable: false}\n"
        "  - {index: 2, lower: -.inf, upper: .inf}\n"
        "  - {name: income, lower: 0, upper: 5000}\n"
    )
    space = FeatureSpace.from_yaml(path, 4, names=["age", "x", "y", "income"])
    assert space.types[0] == "integer" and not space.mutable[0]
    assert space.lower[0] == 18 and space.upper[0] == 100
    assert space.lower[2] == -np.inf and space.upper[2] == np.inf
    # a default scale given explicitly applies to every feature that does not override it
    assert space.scale.tolist() == [1.0, 1.0, 1.0, 1.0]


def test_yaml_default_scale_is_range_where_finite(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text("default: {lower: 0, upper: 4}\nfeatures:\n  - {index: 1, upper: .inf}\n")
    space = FeatureSpace.from_yaml(path, 2)
    assert space.scale.tolist() == [4.0, 1.0]


@pytest.mark.parametrize("text, message", [
    ("default: {lower: 0, upper: 1, colour: red}\n", "unknown key"),
    ("features:\n  - {name: nope, lower: 0}\n", "no feature named 'nope'"),
    ("features:\n  - {index: 0, type: fuzzy}\n", "type 'fuzzy'"),
    ("default: {lower: 2, upper: 1}\n", "lower bound 2.0 > upper bound 1.0"),
    ("features:\n  - {index: 0, type: categorical}\n", "need a 'group'"),
    ("default: {lower: abc}\n", "must be a number"),
])
def test_yaml_errors_name_the_problem(tmp_path, text, message):
    path = tmp_path / "f.yaml"
    path.write_text(text)
    with pytest.raises(FeatureSpaceError, match=message):
        FeatureSpace.from_yaml(path, 2, names=["a", "b"])


def test_check_data_names_row_and_feature():
    space = FeatureSpace.from_arrays([0, 0], [1, 1], names=["a", "b"])
    with pytest.raises(InputError, match=r"row 1, feature 'b' = 2 is above upper bound 1"):
        space.check_data(np.array([[0.5, 0.5], [0.5, 2.0]]))
    with pytest.raises(InputError, match=r"row 0, feature 'a' is nan"):
        space.check_data(np.array([[np.nan, 0.5]]))
    with pytest.raises(InputError, match="does not match the feature space"):
        space.check_data(np.zeros((2, 3)))
    ints = FeatureSpace.from_arrays([0], [10], types=["integer"], names=["n"])
    with pytest.raises(InputError, match="'n' = 1.5 is not a valid integer"):
        ints.check_data(np.array([[1.5]]))


def _mixed_space() -> FeatureSpace:
    return FeatureSpace.from_arrays(
        lower=[0, -1, 0, 0, 0, 0, 5], upper=[1, 1, 10, 1, 1, 1, 5],
        types=["real", "real", "integer", "binary", "categorical", "categorical", "real"],
        mutable=[True, False, True, True, True, True, True],
        names=list("abcdefg"), groups=[[4, 5]],
    )


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, (5, 7), elements=st.floats(-20, 20)))
def test_projection_makes_any_candidate_valid(raw):
    space = _mixed_space()
    x = np.array([[0.5, 0.2, 3, 1, 1, 0, 5]] * 5, dtype=np.float64)
    proj = space.project(torch.tensor(raw), torch.tensor(x)).numpy()
    space.check_data(proj)  # bounds, integrality, binaries, one-hot
    np.testing.assert_array_equal(proj[:, 1], x[:, 1])  # immutable unchanged
    again = space.project(torch.tensor(proj), torch.tensor(x)).numpy()
    np.testing.assert_array_equal(again, proj)  # idempotent


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, (3, 4), elements=st.floats(0, 1)))
def test_projection_leaves_valid_real_inputs_unchanged(x):
    space = FeatureSpace.box(4)
    np.testing.assert_array_equal(space.project(torch.tensor(x), torch.tensor(x)).numpy(), x)


def test_delta_bounds_are_scaled_and_zero_for_immutable():
    space = FeatureSpace.from_arrays([0, 0], [10, 1], mutable=[True, False])
    lo, hi = space.delta_bounds(torch.tensor([[2.0, 0.5]], dtype=torch.float64))
    assert lo.tolist() == [[-0.2, 0.0]] and hi.tolist() == [[0.8, 0.0]]
