"""Image threat models: a common interface and input checks.

An image threat acts on a batch ``x`` of shape ``(n, C, H, W)`` with values in ``[0, 1]``. It
has a *parametrisation* of the perturbation (an additive delta, a flow field, a colour
look-up table, DCT offsets, a few transform parameters) held in one tensor ``params`` whose
first dimension is ``n``; a differentiable map ``apply(x, params) -> x'``; a projection of
``params`` onto the strength constraint ``strength(x, params) <= eps`` (``eps`` of shape
``(n,)``, one strength per input); and ``apply(x, init_params(x)) == x`` (strength 0 is the
identity). Solvers move ``params`` with :meth:`ImageThreat.step` and pull them back with
:meth:`ImageThreat.project`; the grid search checks every counterexample's
:meth:`ImageThreat.strength` against the level it claims.

Each threat carries its name, its benchmark name (``attack_name``, the key used in
MultiRobustBench's accuracy files) and its default 20-level strength grid (``default_grid``).
The built-in threats get all three from their entry in :mod:`robustscope.threats.registry`
(build them with :func:`robustscope.threats.registry.get_image_threat`); a threat defined
outside robustscope sets them as class attributes.
"""

from __future__ import annotations

import numpy as np
import torch

from robustscope.core.errors import InputError
from robustscope.threats.tensors import per_input

#: Relative slack allowed when a strength is checked against its bound (float32 arithmetic).
BOUND_RTOL = 1e-4
BOUND_ATOL = 1e-6


def check_images(x: torch.Tensor, name: str = "x") -> torch.Tensor:
    """Validate a batch of images: a float tensor ``(n, C, H, W)``, finite, within ``[0, 1]``."""
    if not torch.is_tensor(x):
        raise InputError(f"{name} must be a torch tensor of shape (n, C, H, W), "
                         f"got {type(x).__name__}")
    if x.ndim != 4:
        raise InputError(f"{name} must have shape (n, C, H, W); got shape {tuple(x.shape)}")
    if not torch.is_floating_point(x):
        raise InputError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.shape[0] == 0:
        raise InputError(f"{name} holds no images")
    if not torch.isfinite(x).all():
        raise InputError(f"{name} holds non-finite values")
    lo, hi = float(x.min()), float(x.max())
    if lo < 0.0 or hi > 1.0:
        rows = torch.nonzero(((x < 0) | (x > 1)).flatten(1).any(1)).flatten()[:5].tolist()
        hint = ("; that looks like 0..255 (8-bit pixels): divide by 255"
                if lo >= 0 and 2 <= hi <= 255 else "")
        raise InputError(f"{name} must lie in [0, 1] (images); found values in [{lo:.4g}, "
                         f"{hi:.4g}], first offending rows {rows}{hint}")
    return x


def as_eps(eps: float | torch.Tensor | np.ndarray, n: int, x: torch.Tensor) -> torch.Tensor:
    """Per-input strengths ``(n,)`` on ``x``'s device and dtype; all must be ``>= 0``."""
    e = torch.as_tensor(eps, dtype=x.dtype, device=x.device).reshape(-1)
    if e.numel() == 1:
        e = e.expand(n).clone()
    if e.numel() != n:
        raise InputError(f"eps must be a scalar or have one entry per input ({n}); "
                         f"got {e.numel()}")
    if not torch.isfinite(e).all() or (e < 0).any():
        raise InputError("eps must be finite and >= 0")
    return e


class ImageThreat:
    """Base class of image threats (see the module docstring for the contract).

    Subclasses implement
    :meth:`param_shape`, :meth:`apply`, :meth:`strength`. The default parameter geometry is
    an L-infinity box on ``params`` (sign steps, clamping); override :meth:`project`,
    :meth:`step`, :meth:`random_params` for other geometries. ``name``, ``attack_name`` and
    ``default_grid`` are set by the registry for the built-in threats (on the instance it
    builds); a threat defined elsewhere sets them as class attributes.
    """

    name: str = "image"
    attack_name: str = "ImageAttack"
    #: The default 20 strengths (set from the registry entry); empty = none, pass a grid.
    default_grid: np.ndarray = np.empty(0)
    #: Weight of :meth:`penalty` in the solver's objective (smoothness terms).
    penalty_weight: float = 0.0
    #: Step size of one solver iteration as a fraction of ``eps`` (times 2.5 / steps).
    step_scale: float = 1.0
    #: Start restarts > 0 from a random point in the constraint set.
    random_start: bool = True
    #: Colour channels the threat needs (3 for the colour and JPEG threats, which work in
    #: RGB); ``None``: any number, grayscale included.
    channels: int | None = None

    # -- to implement -------------------------------------------------------------------
    def param_shape(self, x: torch.Tensor) -> tuple[int, ...]:
        """Shape of one input's parameters (without the batch dimension)."""
        raise NotImplementedError

    def apply(self, x: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        """The perturbed images ``(n, C, H, W)`` in ``[0, 1]``; differentiable in both."""
        raise NotImplementedError

    def strength(self, x: torch.Tensor, params: torch.Tensor,
                 x_adv: torch.Tensor | None = None) -> torch.Tensor:
        """The strength of each perturbation, ``(n,)``, in the units of ``eps``."""
        raise NotImplementedError

    # -- defaults: an L-infinity box on the parameters -------------------------------------
    def zero_params(self, x: torch.Tensor) -> torch.Tensor:
        """Parameters of the identity (strength 0)."""
        return torch.zeros((x.shape[0],) + self.param_shape(x), dtype=x.dtype, device=x.device)

    def random_params(self, x: torch.Tensor, eps: torch.Tensor,
                      generator: torch.Generator) -> torch.Tensor:
        """A random point of the constraint set (uniform in the box)."""
        p = self.zero_params(x)
        r = torch.rand(p.shape, generator=generator, dtype=p.dtype, device=p.device)
        return self.project(x, (2 * r - 1) * per_input(eps, p), eps)

    def project(self, x: torch.Tensor, params: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
        """Projection onto ``strength <= eps`` (exact for the box)."""
        e = per_input(eps, params)
        return torch.maximum(torch.minimum(params, e), -e)

    def step(self, x: torch.Tensor, params: torch.Tensor, grad: torch.Tensor,
             eps: torch.Tensor, size: torch.Tensor) -> torch.Tensor:
        """One descent step of length ``size`` (n,) against ``grad`` (steepest for the box);
        ``x`` is the clean batch (for threats whose steps depend on it)."""
        return params - per_input(size, params) * torch.sign(grad)

    def penalty(self, params: torch.Tensor) -> torch.Tensor:
        """A regulariser added to the solver's objective (``penalty_weight`` times), ``(n,)``."""
        return torch.zeros(params.shape[0], dtype=params.dtype, device=params.device)

    # -- shared --------------------------------------------------------------------------
    def check_input(self, x: torch.Tensor, name: str = "x") -> torch.Tensor:
        """Validate ``x`` for this threat (shape, range, :attr:`channels`); subclasses add
        their own checks."""
        check_images(x, name)
        if self.channels is not None and x.shape[1] != self.channels:
            raise InputError(f"threat '{self.name}' needs {self.channels} colour channels "
                             f"(RGB); {name} has {x.shape[1]}")
        return x

    def within(self, x: torch.Tensor, params: torch.Tensor, eps: torch.Tensor,
               x_adv: torch.Tensor | None = None) -> torch.Tensor:
        """Boolean ``(n,)``: the perturbation satisfies its bound (float slack allowed)."""
        s = self.strength(x, params, x_adv)
        return s <= eps * (1 + BOUND_RTOL) + BOUND_ATOL

    def __call__(self, x: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        return self.apply(x, params)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
