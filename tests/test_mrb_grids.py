"""Default MultiRobustBench strength grids and attack names."""

import numpy as np
import pytest
from refdata_helpers import ACC_STAR, refdata_json

from robustscope.core.errors import InputError
from robustscope.threats.grids import canonical_eps, eps_key
from robustscope.threats.registry import (
    RANKED_ATTACKS,
    THREATS,
    benchmark_name,
    canonical_threat,
    default_grid,
    threat_names,
)

ATTACK_NAMES = {e.name: e.attack_name for e in THREATS}


@pytest.mark.parametrize("short", sorted(ATTACK_NAMES))
def test_default_grid_is_twenty_multiples_of_the_step(short):
    g = default_grid(short)
    assert g.shape == (20,) and g.dtype == np.float64
    assert np.all(np.diff(g) > 0)
    np.testing.assert_allclose(g / g[0], np.arange(1, 21), rtol=1e-9)
    np.testing.assert_array_equal(default_grid(ATTACK_NAMES[short]), g)


def test_readme_endpoints():
    # "Linf 0.005..0.1 · L2 0.125..2.5 · ... · Gabor 0.5..10" (reference README)
    ends = {"linf": (0.005, 0.1), "l2": (0.125, 2.5), "l1": (1.5, 30), "elastic": (0.05, 1.0),
            "jpeg-linf": (0.01, 0.2), "jpeg-l1": (1, 20), "recolor": (0.005, 0.1),
            "stadv": (0.005, 0.1), "lpips": (0.025, 0.5), "hue": (0.025, 0.5),
            "saturation": (0.025, 0.5), "brightness": (0.015, 0.3), "contrast": (0.025, 0.5),
            "affine": (0.005, 0.1), "perspective": (0.0001, 0.002), "snow": (0.005, 0.1),
            "fog": (2.5, 50), "gabor": (0.5, 10)}
    assert set(ends) == set(ATTACK_NAMES)
    for name, (lo, hi) in ends.items():
        g = default_grid(name)
        assert (g[0], g[-1]) == (lo, hi), name


def test_grid_keys_match_published_table():
    star = refdata_json(ACC_STAR)
    for short, full in ATTACK_NAMES.items():
        assert [eps_key(e) for e in default_grid(short)] == sorted(
            star[full], key=float), full


def test_names_and_keys():
    assert len(RANKED_ATTACKS) == 9
    assert benchmark_name("linf") == "AutoLinfAttack" == benchmark_name("AutoLinfAttack")
    assert benchmark_name("LINF") == "AutoLinfAttack"
    assert benchmark_name("gaussian_noise") == "gaussian_noise"
    assert benchmark_name("jpeg-l1") == benchmark_name("jpeg_l1") == "JPEGL1Attack"
    assert canonical_threat("JPEGL1Attack") == "jpeg-l1"
    assert RANKED_ATTACKS == tuple(ATTACK_NAMES[n] for n in threat_names()[:9])
    with pytest.raises(InputError, match="not known"):
        canonical_threat("nope")
    with pytest.raises(InputError, match="not known"):
        default_grid("nope")
    assert eps_key(1) == "1.0" and eps_key(0.1 + 0.2) == "0.3" and eps_key("30") == "30.0"
    assert canonical_eps(3 * 0.005) == 0.015
    for bad in ("x", -1.0, float("nan"), float("inf")):
        with pytest.raises(InputError, match="strength"):
            canonical_eps(bad)
