"""The threat registry: one table of names, one canonicaliser, read by every entry point."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from robustscope.cli.app import ThreatName, app
from robustscope.cli.image_grid import DEFAULT_THREATS
from robustscope.core.errors import InputError
from robustscope.runs.spec import ThreatSpec
from robustscope.scores.multiattack import resolve_attacks
from robustscope.search.grid import BENCHMARK_THREATS
from robustscope.threats import L1, L2, LINF
from robustscope.threats.registry import (
    RANKED_ATTACKS,
    THREATS,
    ThreatEntry,
    benchmark_name,
    canonical_threat,
    get_image_threat,
    get_threat,
    implemented_threat,
    threat_entry,
    threat_names,
)

DOCS = Path(__file__).resolve().parents[1] / "docs"
ALL_SPELLINGS = [(s, e.name) for e in THREATS for s in e.spellings]
IMPLEMENTED = [e for e in THREATS if e.implemented]


def _variants(spelling: str) -> set[str]:
    """The same name in other cases and separators (all accepted)."""
    return {spelling, spelling.upper(), spelling.lower(), spelling.replace("-", "_"),
            spelling.replace("-", " "), f" {spelling} "}


def test_canonical_names_are_unique_and_canonical():
    names = threat_names(implemented=False)
    assert len(names) == len(set(names)) == len(THREATS)
    for name in names:
        assert canonical_threat(name) == name
        assert name == name.lower() and " " not in name and "_" not in name


@pytest.mark.parametrize(("spelling", "name"), ALL_SPELLINGS)
def test_every_spelling_round_trips(spelling, name):
    for variant in _variants(spelling):
        assert canonical_threat(variant) == name
        assert threat_entry(variant).name == name


def test_documented_spellings_are_kept():
    # the docs show the canonical names; these other spellings appear in the docs, in older
    # specs or in the benchmark's files
    kept = {"jpeg_linf": "jpeg-linf", "jpeg_l1": "jpeg-l1", "jpeglinf": "jpeg-linf",
            "JPEGL1Attack": "jpeg-l1", "L2": "l2", "LINF": "linf", "AutoLinfAttack": "linf",
            "ElasticAttack": "elastic", "HueAttack": "hue", "Hue": "hue",
            "ReColorAdv": "recolor", "ReColorAdvAttack": "recolor",
            "PerspectiveWarpAttack": "perspective", "AffineWarp": "affine", "FogAttack": "fog"}
    assert {s: canonical_threat(s) for s in kept} == kept


@pytest.mark.parametrize("bad", ["jpeg", "nope", "", "linf2", "Attack"])
def test_unknown_name_lists_the_known_ones(bad):
    with pytest.raises(InputError, match="not known") as info:
        canonical_threat(bad)
    for name in threat_names(implemented=False):
        assert name in str(info.value)
    with pytest.raises(InputError, match="not known") as info:
        implemented_threat(bad)
    for name in threat_names():
        assert name in str(info.value)


def test_non_strings_are_input_errors():
    for bad in (None, 3, ["linf"]):
        with pytest.raises(InputError, match="not known"):
            canonical_threat(bad)


def test_every_benchmark_attack_type_is_searched():
    # snow, fog and gabor were names only until #45; an entry without a class still says so
    assert [e.name for e in THREATS if not e.implemented] == []
    assert implemented_threat("FogAttack").name == "fog"
    assert get_image_threat("snow").attack_name == "SnowAttack"
    bare = ThreatEntry("rain", "image", None, attack_name="RainAttack", grid_step=0.1)
    assert not bare.implemented and bare.factory is None
    with pytest.raises(InputError, match="does not implement"):
        bare.make()


def test_benchmark_names_come_from_the_registry():
    for spelling, name in ALL_SPELLINGS:
        assert benchmark_name(spelling) == threat_entry(name).attack_name
    assert benchmark_name("gaussian_noise") == "gaussian_noise"  # outside the registry
    assert RANKED_ATTACKS == tuple(e.attack_name for e in THREATS if e.ranked)
    assert len(RANKED_ATTACKS) == 9
    assert resolve_attacks(["jpeg-linf", "jpeg_linf", "JPEGLinfAttack"]) == ("JPEGLinfAttack",)


def test_lp_threats_give_their_norm_ball():
    assert threat_names("lp") == ("linf", "l2", "l1")
    assert [get_threat(n) for n in ("LINF", "L_2", "AutoL1Attack")] == [LINF, L2, L1]
    assert get_threat(L2) is L2
    with pytest.raises(InputError, match="image threat"):
        get_threat("elastic")


def test_every_reference_imports_and_matches_its_entry():
    # the table names classes and norm balls as "module:attribute" strings, imported on use
    for entry in IMPLEMENTED:
        threat = entry.make(**({"features": lambda x: x} if entry.needs_features else {}))
        assert threat.name == entry.name and threat.attack_name == entry.attack_name
        assert entry.takes("features") == entry.needs_features
        assert (entry.lp is not None) == (entry.kind == "lp")
        if entry.lp is not None:
            assert entry.lp.name == entry.name and threat.lp is entry.lp
    assert not any(e.needs_features or e.factory or e.lp for e in THREATS if not e.implemented)


def test_registry_options_are_checked():
    with pytest.raises(InputError, match="features"):
        get_image_threat("linf", features=object())
    assert implemented_threat("lpips").takes("features")
    assert not implemented_threat("elastic").takes("features")


def test_spec_accepts_exactly_the_searchable_names():
    for entry in THREATS:
        for variant in {v for s in entry.spellings for v in _variants(s)}:
            if entry.implemented:
                spec = ThreatSpec.model_validate({"name": variant})
                assert spec.name == entry.name
                assert spec.is_grid == (entry.kind == "image")
            else:
                with pytest.raises(ValidationError, match="does not implement"):
                    ThreatSpec.model_validate({"name": variant})
    with pytest.raises(ValidationError, match="not known"):
        ThreatSpec.model_validate({"name": "jpeg"})


def test_cli_choices_are_the_registry_names():
    assert [t.value for t in ThreatName] == list(threat_names("lp"))
    res = CliRunner().invoke(app, ["radius", "--model", "m.json", "--data", "d.csv",
                                   "--out", "o.csv", "--threat", "elastic"])
    assert res.exit_code == 2 and "elastic" in res.output
    assert DEFAULT_THREATS.split(",") == [e.name for e in IMPLEMENTED
                                          if e.ranked and not e.takes("features")]


def test_grid_search_runs_exactly_the_searchable_names():
    assert BENCHMARK_THREATS == threat_names() == tuple(e.name for e in IMPLEMENTED)


def test_image_threat_docs_list_the_registry():
    text = (DOCS / "image-threats.md").read_text()
    table = text[text.index("| name | benchmark name |"):]
    table = table[:table.index("\n\n")]
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:]]
    names = [n for cell, _ in rows for n in re.findall(r"`([^`]+)`", cell)]
    attacks = [a.strip() for _, cell in rows for a in cell.split(",")]
    assert dict(zip(names, attacks, strict=True)) == {e.name: e.attack_name for e in IMPLEMENTED}
