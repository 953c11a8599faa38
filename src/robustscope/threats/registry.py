"""The one table of threat models: every threat robustscope knows, declared once.

Each :class:`ThreatEntry` of :data:`THREATS` gives a threat's canonical name (the spelling
the docs use), its kind (``"lp"``: a norm ball searched for a continuous radius by
:func:`robustscope.search.engine.radius`, also usable on images; ``"image"``: an image threat
searched on its strength grid by :mod:`robustscope.search.grid`), the factory that builds its
:class:`~robustscope.threats.image.ImageThreat` (``None`` for the MultiRobustBench attacks
robustscope does not implement, which are known only to score accuracy files), the other
spellings it accepts, its MultiRobustBench attack name and the step of its default 20-level
strength grid.

Every place that reads a threat name goes through :func:`canonical_threat` (or the lookups
built on it): the radius search, the grid search, the spec, the command line and the mapping
to MultiRobustBench's attack names. Names match case-insensitively, ignoring ``-``, ``_`` and
spaces, so ``"jpeg-linf"``, ``"jpeg_linf"``, ``"JPEG Linf"`` and ``"JPEGLinfAttack"`` all mean
``jpeg-linf``.

To add a threat: write its class (an :class:`ImageThreat` subclass in a module of this
package) and add one entry to :data:`THREATS`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

import numpy as np

from robustscope.core.errors import InputError
from robustscope.threats.color import (
    BrightnessThreat,
    ContrastThreat,
    HueThreat,
    ReColorThreat,
    SaturationThreat,
)
from robustscope.threats.grids import level_grid
from robustscope.threats.image import ImageThreat
from robustscope.threats.jpeg import JPEGL1Threat, JPEGLinfThreat
from robustscope.threats.lp import L1, L2, LINF, LpThreat
from robustscope.threats.lp_image import LpImageThreat
from robustscope.threats.perceptual import LPIPSThreat
from robustscope.threats.spatial import (
    AffineWarpThreat,
    ElasticThreat,
    PerspectiveWarpThreat,
    StAdvThreat,
)

ThreatKind = Literal["lp", "image"]
KINDS: tuple[str, ...] = ("lp", "image")


@dataclass(frozen=True)
class ThreatEntry:
    """One threat model, as the registry declares it.

    name : canonical name, the spelling the docs show (``"jpeg-linf"``).
    kind : ``"lp"`` (a norm ball; :attr:`lp` is its geometry) or ``"image"``.
    factory : builds the threat's :class:`ImageThreat` (keyword options go to it), or
        ``None`` where robustscope does not implement the threat (a MultiRobustBench attack
        known only by its name and grid).
    aliases : other accepted spellings (beyond case, ``-``, ``_`` and spaces).
    attack_name : the attack's name in MultiRobustBench's accuracy files, if it has one.
    grid_step : the default grid is ``grid_step * (1, ..., 20)``; ``None`` = no default grid.
    ranked : one of the 9 attacks the MultiRobustBench leaderboard ranks by.
    lp : the norm ball of an ``"lp"`` threat (searched by ``radius()``).
    """

    name: str
    kind: ThreatKind
    factory: Callable[..., ImageThreat] | None
    aliases: tuple[str, ...] = ()
    attack_name: str | None = None
    grid_step: float | None = None
    ranked: bool = False
    lp: LpThreat | None = field(default=None, repr=False)

    @property
    def implemented(self) -> bool:
        """robustscope can search this threat (it has a factory)."""
        return self.factory is not None

    @property
    def spellings(self) -> tuple[str, ...]:
        """Every name this entry answers to: canonical, benchmark name, aliases."""
        names = (self.name,) + ((self.attack_name,) if self.attack_name else ()) + self.aliases
        return tuple(dict.fromkeys(names))

    @property
    def default_grid(self) -> np.ndarray:
        """The default 20 strengths ``(20,)``; empty where the threat has none."""
        if self.grid_step is None:
            return np.empty(0)
        return level_grid(self.grid_step)

    def takes(self, option: str) -> bool:
        """The factory accepts the keyword ``option`` (``features`` for LPIPS)."""
        if self.factory is None:
            return False
        return option in inspect.signature(self.factory).parameters

    def make(self, **options) -> ImageThreat:
        """Build the threat (``options`` go to its factory, e.g. ``features=`` for LPIPS),
        named, benchmark-named and with its default grid as this entry declares."""
        if self.factory is None:
            raise _not_implemented(self)
        try:
            inspect.signature(self.factory).bind(**options)
        except TypeError as err:
            raise InputError(f"threat '{self.name}': {err}") from None
        threat = self.factory(**options)
        threat.name = self.name
        if self.attack_name is not None:
            threat.attack_name = self.attack_name
        threat.default_grid = self.default_grid
        return threat


#: Every threat, in the MultiRobustBench leaderboard's order: the 9 ranked attacks, the
#: parametric ones robustscope implements, then the benchmark's attacks it does not.
THREATS: tuple[ThreatEntry, ...] = (
    ThreatEntry("linf", "lp", partial(LpImageThreat, LINF), lp=LINF,
                attack_name="AutoLinfAttack", grid_step=0.005, ranked=True),
    ThreatEntry("l2", "lp", partial(LpImageThreat, L2), lp=L2,
                attack_name="AutoL2Attack", grid_step=0.125, ranked=True),
    ThreatEntry("l1", "lp", partial(LpImageThreat, L1), lp=L1,
                attack_name="AutoL1Attack", grid_step=1.5, ranked=True),
    ThreatEntry("elastic", "image", ElasticThreat,
                attack_name="ElasticAttack", grid_step=0.05, ranked=True),
    ThreatEntry("jpeg-linf", "image", JPEGLinfThreat,
                attack_name="JPEGLinfAttack", grid_step=0.01, ranked=True),
    ThreatEntry("jpeg-l1", "image", JPEGL1Threat,
                attack_name="JPEGL1Attack", grid_step=1.0, ranked=True),
    ThreatEntry("recolor", "image", ReColorThreat, aliases=("ReColorAdv",),
                attack_name="ReColorAdvAttack", grid_step=0.005, ranked=True),
    ThreatEntry("stadv", "image", StAdvThreat,
                attack_name="StAdvAttack", grid_step=0.005, ranked=True),
    ThreatEntry("lpips", "image", LPIPSThreat,
                attack_name="LPIPSAttack", grid_step=0.025, ranked=True),
    ThreatEntry("hue", "image", HueThreat, aliases=("HueAttack",),
                attack_name="Hue", grid_step=0.025),
    ThreatEntry("saturation", "image", SaturationThreat, aliases=("SaturationAttack",),
                attack_name="Saturation", grid_step=0.025),
    ThreatEntry("brightness", "image", BrightnessThreat, aliases=("BrightnessAttack",),
                attack_name="Brightness", grid_step=0.015),
    ThreatEntry("contrast", "image", ContrastThreat, aliases=("ContrastAttack",),
                attack_name="Contrast", grid_step=0.025),
    ThreatEntry("affine", "image", AffineWarpThreat, aliases=("AffineWarpAttack",),
                attack_name="AffineWarp", grid_step=0.005),
    ThreatEntry("perspective", "image", PerspectiveWarpThreat,
                aliases=("PerspectiveWarpAttack",),
                attack_name="PerspectiveWarp", grid_step=0.0001),
    ThreatEntry("snow", "image", None, attack_name="SnowAttack", grid_step=0.005),
    ThreatEntry("fog", "image", None, attack_name="FogAttack", grid_step=2.5),
    ThreatEntry("gabor", "image", None, attack_name="GaborAttack", grid_step=0.5),
)


def _lookup_key(name: str) -> str:
    """The form names are compared in: lower case, without ``-``, ``_`` and spaces."""
    return "".join(ch for ch in name.strip().lower() if ch not in "-_ ")


def _index(entries: tuple[ThreatEntry, ...]) -> dict[str, ThreatEntry]:
    """Lookup key of every spelling -> its entry; checks the table is consistent."""
    index: dict[str, ThreatEntry] = {}
    for entry in entries:
        if entry.kind not in KINDS:
            raise ValueError(f"threat '{entry.name}': kind must be one of {KINDS}")
        if (entry.kind == "lp") != (entry.lp is not None):
            raise ValueError(f"threat '{entry.name}': an 'lp' threat, and only one, has lp=")
        if entry.lp is not None and entry.lp.name != entry.name:
            raise ValueError(f"threat '{entry.name}': its norm ball is named '{entry.lp.name}'")
        for spelling in entry.spellings:
            other = index.setdefault(_lookup_key(spelling), entry)
            if other is not entry:
                raise ValueError(f"threat name '{spelling}' is claimed by both "
                                 f"'{other.name}' and '{entry.name}'")
    return index


_BY_KEY: dict[str, ThreatEntry] = _index(THREATS)


def threat_names(kind: str | None = None, implemented: bool = True) -> tuple[str, ...]:
    """Canonical names in table order; only ``kind`` (``"lp"`` or ``"image"``) if given; only
    the threats robustscope can search unless ``implemented=False``."""
    if kind is not None and kind not in KINDS:
        raise InputError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    return tuple(e.name for e in THREATS
                 if (kind is None or e.kind == kind) and (e.implemented or not implemented))


def find_threat(name: str) -> ThreatEntry | None:
    """The entry a spelling names, or ``None`` (no error; see :func:`threat_entry`)."""
    if not isinstance(name, str):
        return None
    return _BY_KEY.get(_lookup_key(name))


def _unknown(name: object, known: tuple[str, ...]) -> InputError:
    return InputError(f"threat {name!r} is not known; choose one of {', '.join(known)} (or "
                      f"their benchmark names, e.g. AutoLinfAttack)")


def threat_entry(name: str) -> ThreatEntry:
    """The entry a spelling names (canonical name, benchmark name or alias), implemented or
    not. Raises :class:`InputError` listing the known threats when ``name`` is none of them.
    """
    entry = find_threat(name)
    if entry is None:
        raise _unknown(name, threat_names(implemented=False))
    return entry


def implemented_threat(name: str) -> ThreatEntry:
    """The entry of a threat robustscope can search, by any spelling. Raises
    :class:`InputError` listing the threats it can search when ``name`` is none of them, or
    is a benchmark attack known only by name."""
    entry = find_threat(name)
    if entry is None:
        raise _unknown(name, threat_names())
    if not entry.implemented:
        raise _not_implemented(entry)
    return entry


def _not_implemented(entry: ThreatEntry) -> InputError:
    return InputError(f"threat '{entry.name}' is a MultiRobustBench attack that robustscope "
                      f"does not implement; choose one of {', '.join(threat_names())}")


def canonical_threat(name: str) -> str:
    """The canonical name of a threat given any accepted spelling:
    ``"JPEGLinfAttack"``, ``"jpeg_linf"``, ``"JPEG-Linf"`` -> ``"jpeg-linf"``.

    Raises :class:`InputError` listing the known threats when ``name`` is none of them.
    """
    return threat_entry(name).name


def benchmark_name(name: str) -> str:
    """The MultiRobustBench attack name of a threat (``"linf"`` -> ``"AutoLinfAttack"``).
    Names the registry does not know are returned unchanged, so that accuracy files may hold
    attacks outside it (e.g. CIFAR-10-C corruptions ``"gaussian_noise"``)."""
    entry = find_threat(name)
    if entry is None or entry.attack_name is None:
        return name
    return entry.attack_name


def default_grid(name: str) -> np.ndarray:
    """The default 20 strengths of a threat (any spelling), shape ``(20,)``, float64,
    increasing, each rounded to 5 decimals (``eps_key`` of each is the benchmark's key)."""
    entry = threat_entry(name)
    if entry.grid_step is None:
        raise InputError(f"threat '{entry.name}' has no default grid; give its strengths")
    return entry.default_grid


#: The 9 attacks the MultiRobustBench leaderboard ranks by, as benchmark names, in its order.
RANKED_ATTACKS: tuple[str, ...] = tuple(e.attack_name for e in THREATS if e.ranked)


def get_threat(name: str | LpThreat) -> LpThreat:
    """The norm ball of an Lp threat (``"linf"``, ``"l2"``, ``"l1"`` or another spelling),
    for the radius search; an :class:`LpThreat` is returned as is."""
    if isinstance(name, LpThreat):
        return name
    entry = threat_entry(name)
    if entry.lp is None:
        raise InputError(f"threat '{entry.name}' is an image threat, searched on its strength "
                         f"grid (robustscope.search.grid); a radius search takes one of "
                         f"{', '.join(threat_names('lp'))}")
    return entry.lp


def get_image_threat(name: str | ImageThreat, **options) -> ImageThreat:
    """An image threat by any spelling (``"elastic"``, ``"jpeg-linf"``, ``"ElasticAttack"``,
    ``"HueAttack"``, ...), or ``name`` itself when it already is an :class:`ImageThreat`.

    ``options`` go to the threat's constructor (``features=`` for LPIPS).
    """
    if isinstance(name, ImageThreat):
        if options:
            raise InputError("options cannot be given together with a threat instance")
        return name
    return implemented_threat(name).make(**options)
