"""The one table of threat models: every threat robustscope knows, declared once.

Each :class:`ThreatEntry` of :data:`THREATS` gives a threat's canonical name (the spelling
the docs use), its kind (``"lp"``: a norm ball searched for a continuous radius by
:func:`robustscope.search.engine.radius`, also usable on images; ``"image"``: an image threat
searched on its strength grid by :mod:`robustscope.search.grid`), the class that builds its
:class:`~robustscope.threats.image.ImageThreat` (``None`` for the MultiRobustBench attacks
robustscope does not implement, which are known only to score accuracy files), the other
spellings it accepts, its MultiRobustBench attack name and the step of its default 20-level
strength grid.

Reading the table imports neither torch nor any threat module: classes and norm balls are
named ``"module:attribute"`` under this package and imported on first use (as the solver
registry does), so that the command line can show the names at start-up cheaply.

Every place that reads a threat name goes through :func:`canonical_threat` (or the lookups
built on it): the radius search, the grid search, the spec, the command line and the mapping
to MultiRobustBench's attack names. Names match case-insensitively, ignoring ``-``, ``_`` and
spaces, so ``"jpeg-linf"``, ``"jpeg_linf"``, ``"JPEG Linf"`` and ``"JPEGLinfAttack"`` all mean
``jpeg-linf``.

To add a threat: write its class (an :class:`ImageThreat` subclass in a module of this
package) and add one entry to :data:`THREATS` naming it (``"module:ClassName"``).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Literal

from robustscope.core.errors import InputError

if TYPE_CHECKING:  # imported on use: the threat modules import torch
    import numpy as np

    from robustscope.threats.image import ImageThreat
    from robustscope.threats.lp import LpThreat

ThreatKind = Literal["lp", "image"]
KINDS: tuple[str, ...] = ("lp", "image")


def _load(reference: str) -> object:
    """The object a ``"module:attribute"`` reference under this package names (imported)."""
    module, attribute = reference.split(":")
    return getattr(importlib.import_module(f"robustscope.threats.{module}"), attribute)


@dataclass(frozen=True)
class ThreatEntry:
    """One threat model, as the registry declares it.

    name : canonical name, the spelling the docs show (``"jpeg-linf"``).
    kind : ``"lp"`` (a norm ball; :attr:`lp` is its geometry) or ``"image"``.
    threat_class : ``"module:ClassName"`` of the threat's :class:`ImageThreat` under
        ``robustscope.threats`` (imported on first use; :attr:`factory` builds it), or
        ``None`` where robustscope does not implement the threat (a MultiRobustBench attack
        known only by its name and grid). The class of an ``"lp"`` threat takes its norm
        ball first.
    aliases : other accepted spellings (beyond case, ``-``, ``_`` and spaces).
    attack_name : the attack's name in MultiRobustBench's accuracy files, if it has one.
    grid_step : the default grid is ``grid_step * (1, ..., 20)``; ``None`` = no default grid.
    ranked : one of the 9 attacks the MultiRobustBench leaderboard ranks by.
    norm : ``"module:NAME"`` of the norm ball of an ``"lp"`` threat (searched by
        ``radius()``; :attr:`lp` imports it).
    needs_features : the threat compares images through a feature network, which its
        factory takes as ``features=`` (LPIPS); declared here so that the command line can
        choose its default threats without importing them.
    """

    name: str
    kind: ThreatKind
    threat_class: str | None
    aliases: tuple[str, ...] = ()
    attack_name: str | None = None
    grid_step: float | None = None
    ranked: bool = False
    norm: str | None = None
    needs_features: bool = False

    @property
    def implemented(self) -> bool:
        """robustscope can search this threat (it has a class)."""
        return self.threat_class is not None

    @property
    def spellings(self) -> tuple[str, ...]:
        """Every name this entry answers to: canonical, benchmark name, aliases."""
        names = (self.name,) + ((self.attack_name,) if self.attack_name else ()) + self.aliases
        return tuple(dict.fromkeys(names))

    @property
    def lp(self) -> LpThreat | None:
        """The norm ball of an ``"lp"`` threat (``None`` for an image threat)."""
        if self.norm is None:
            return None
        ball = _load(self.norm)
        if ball.name != self.name:
            raise ValueError(f"threat '{self.name}': its norm ball is named '{ball.name}'")
        return ball

    @property
    def factory(self) -> Callable[..., ImageThreat] | None:
        """Builds the threat's :class:`ImageThreat` (keyword options go to it); ``None``
        where robustscope does not implement the threat. Imports the threat's module."""
        if self.threat_class is None:
            return None
        cls = _load(self.threat_class)
        return partial(cls, self.lp) if self.kind == "lp" else cls

    @property
    def default_grid(self) -> np.ndarray:
        """The default 20 strengths ``(20,)``; empty where the threat has none."""
        import numpy as np

        from robustscope.threats.grids import level_grid

        if self.grid_step is None:
            return np.empty(0)
        return level_grid(self.grid_step)

    @property
    def channels(self) -> int | None:
        """The colour channels the threat needs (3 for the colour and JPEG threats), ``None``
        for any number or where robustscope does not implement it. Imports its module."""
        if self.threat_class is None:
            return None
        return getattr(_load(self.threat_class), "channels", None)

    def takes(self, option: str) -> bool:
        """The factory accepts the keyword ``option`` (``features`` for LPIPS)."""
        factory = self.factory
        if factory is None:
            return False
        return option in inspect.signature(factory).parameters

    def make(self, **options) -> ImageThreat:
        """Build the threat (``options`` go to its factory, e.g. ``features=`` for LPIPS),
        named, benchmark-named and with its default grid as this entry declares."""
        factory = self.factory
        if factory is None:
            raise _not_implemented(self)
        try:
            inspect.signature(factory).bind(**options)
        except TypeError as err:
            raise InputError(f"threat '{self.name}': {err}") from None
        threat = factory(**options)
        threat.name = self.name
        if self.attack_name is not None:
            threat.attack_name = self.attack_name
        threat.default_grid = self.default_grid
        return threat


#: Every threat, in the MultiRobustBench leaderboard's order: the 9 ranked attacks, the
#: other parametric ones, then snow, fog and Gabor (Kang et al.'s procedural threats).
THREATS: tuple[ThreatEntry, ...] = (
    ThreatEntry("linf", "lp", "lp_image:LpImageThreat", norm="lp:LINF",
                attack_name="AutoLinfAttack", grid_step=0.005, ranked=True),
    ThreatEntry("l2", "lp", "lp_image:LpImageThreat", norm="lp:L2",
                attack_name="AutoL2Attack", grid_step=0.125, ranked=True),
    ThreatEntry("l1", "lp", "lp_image:LpImageThreat", norm="lp:L1",
                attack_name="AutoL1Attack", grid_step=1.5, ranked=True),
    ThreatEntry("elastic", "image", "spatial:ElasticThreat",
                attack_name="ElasticAttack", grid_step=0.05, ranked=True),
    ThreatEntry("jpeg-linf", "image", "jpeg:JPEGLinfThreat",
                attack_name="JPEGLinfAttack", grid_step=0.01, ranked=True),
    ThreatEntry("jpeg-l1", "image", "jpeg:JPEGL1Threat",
                attack_name="JPEGL1Attack", grid_step=1.0, ranked=True),
    ThreatEntry("recolor", "image", "color:ReColorThreat", aliases=("ReColorAdv",),
                attack_name="ReColorAdvAttack", grid_step=0.005, ranked=True),
    ThreatEntry("stadv", "image", "spatial:StAdvThreat",
                attack_name="StAdvAttack", grid_step=0.005, ranked=True),
    ThreatEntry("lpips", "image", "perceptual:LPIPSThreat", needs_features=True,
                attack_name="LPIPSAttack", grid_step=0.025, ranked=True),
    ThreatEntry("hue", "image", "color:HueThreat", aliases=("HueAttack",),
                attack_name="Hue", grid_step=0.025),
    ThreatEntry("saturation", "image", "color:SaturationThreat", aliases=("SaturationAttack",),
                attack_name="Saturation", grid_step=0.025),
    ThreatEntry("brightness", "image", "color:BrightnessThreat", aliases=("BrightnessAttack",),
                attack_name="Brightness", grid_step=0.015),
    ThreatEntry("contrast", "image", "color:ContrastThreat", aliases=("ContrastAttack",),
                attack_name="Contrast", grid_step=0.025),
    ThreatEntry("affine", "image", "spatial:AffineWarpThreat", aliases=("AffineWarpAttack",),
                attack_name="AffineWarp", grid_step=0.005),
    ThreatEntry("perspective", "image", "spatial:PerspectiveWarpThreat",
                aliases=("PerspectiveWarpAttack",),
                attack_name="PerspectiveWarp", grid_step=0.0001),
    ThreatEntry("snow", "image", "unforeseen:SnowThreat", aliases=("Snow",),
                attack_name="SnowAttack", grid_step=0.005),
    ThreatEntry("fog", "image", "unforeseen:FogThreat", aliases=("Fog",),
                attack_name="FogAttack", grid_step=2.5),
    ThreatEntry("gabor", "image", "unforeseen:GaborThreat", aliases=("Gabor",),
                attack_name="GaborAttack", grid_step=0.5),
)


def _lookup_key(name: str) -> str:
    """The form names are compared in: lower case, without ``-``, ``_`` and spaces."""
    return "".join(ch for ch in name.strip().lower() if ch not in "-_ ")


def _index(entries: tuple[ThreatEntry, ...]) -> dict[str, ThreatEntry]:
    """Lookup key of every spelling -> its entry; checks the table is consistent (without
    importing the threats: ``tests/test_threat_registry.py`` imports every one)."""
    index: dict[str, ThreatEntry] = {}
    for entry in entries:
        if entry.kind not in KINDS:
            raise ValueError(f"threat '{entry.name}': kind must be one of {KINDS}")
        if (entry.kind == "lp") != (entry.norm is not None):
            raise ValueError(f"threat '{entry.name}': an 'lp' threat, and only one, has norm=")
        if entry.needs_features and entry.threat_class is None:
            raise ValueError(f"threat '{entry.name}': needs_features without a threat class")
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
    if not isinstance(name, str):
        from robustscope.threats.lp import LpThreat

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
    from robustscope.threats.image import ImageThreat

    if isinstance(name, ImageThreat):
        if options:
            raise InputError("options cannot be given together with a threat instance")
        return name
    return implemented_threat(name).make(**options)
