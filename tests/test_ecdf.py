"""The sort-based shares agree with the direct (eps × n) comparison they replace."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from robustscope.core.ecdf import count_above, count_at_most, share_above, share_at_most

values = arrays(np.float64, st.integers(0, 60),
                elements=st.one_of(st.floats(-5, 5), st.sampled_from([np.inf, np.nan, 0.0])))
thresholds = arrays(np.float64, st.integers(1, 12),
                    elements=st.one_of(st.floats(-6, 6), st.sampled_from([np.inf, 0.0])))


@given(values, thresholds)
def test_counts_match_direct_comparison(v, eps):
    assert count_above(v, eps).tolist() == (v[None, :] > eps[:, None]).sum(axis=1).tolist()
    assert count_at_most(v, eps).tolist() == (v[None, :] <= eps[:, None]).sum(axis=1).tolist()


@given(values, thresholds)
def test_shares_use_every_value_as_denominator(v, eps):
    if len(v) == 0:
        assert np.isnan(share_above(v, eps)).all() and np.isnan(share_at_most(v, eps)).all()
        return
    np.testing.assert_allclose(share_above(v, eps), (v[None, :] > eps[:, None]).mean(axis=1))
    np.testing.assert_allclose(share_at_most(v, eps),
                               (v[None, :] <= eps[:, None]).mean(axis=1))


def test_scalar_threshold_and_ties():
    v = np.array([0.0, 1.0, 1.0, 2.0, np.inf])
    assert count_above(v, 1.0).tolist() == [2]
    assert count_at_most(v, 1.0).tolist() == [3]
    assert count_above(v, np.inf).tolist() == [0]
