"""The certification stage: certified lower bounds of torch networks by bound propagation,
scheduled below the verified radius (``certify=``; see ``docs/certified.md``).

:func:`certifier` decides once per search whether bound propagation may run (a torch
network the graph reader understands, an Lp threat, an untargeted statement);
:func:`certify_bounds` runs it per batch, through the registry's ``bound-propagation``
solver, and under ``certify="auto"`` only when its estimated cost, then its measured time,
stays within :data:`AUTO_CERTIFY_SHARE` of the search's (:func:`bound_within`). Its outputs
are applied like any exact solver's (:meth:`~robustscope.search.state.BatchState.
apply_exact`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from robustscope.core.errors import InputError
from robustscope.core.statement import Statement
from robustscope.models.base import Classifier
from robustscope.models.torch_model import TorchClassifier
from robustscope.search.state import BatchState, registered
from robustscope.solvers.bounds.certify import estimated_passes, network_or_none
from robustscope.solvers.bounds.domain import make_domain
from robustscope.solvers.bounds.graph import Network, read_network
from robustscope.threats import LpThreat

#: Under ``certify="auto"``, CROWN runs when its cost is at most this share of the search's:
#: first its estimate (forward-pass equivalents, counting the neurons IBP leaves unstable at
#: the attack's radius) against the passes the attack spent on the batch's inputs, then its
#: time, measured on chunks of 1, 2, 4, ... inputs, against the search's time on the batch.
#: The estimate alone was far off on convolutional networks (the tiny colour CNN of
#: ``benchmarks/peers``: 25 passes estimated, about 1 s per input measured, ten times the
#: attack's own time; the digits MLP: about a tenth of the attack's time).
AUTO_CERTIFY_SHARE = 1.0

#: The registry's bound propagation, looked up at each call.
BOUND_PROPAGATION = registered("bound-propagation")


@dataclass
class Certifier:
    """What certifies a search's inputs: the network's graph and the method (``auto`` weighs
    its cost per batch); ``seconds_per_input`` is CROWN's time per input in the last chunk
    it bounded under ``auto`` (``None`` until then), kept for the later batches."""

    net: Network
    method: str
    seconds_per_input: float | None = None


def certifier(model: Classifier, threat, statement: Statement, solver: str, certify: str,
              shape: tuple[int, ...]) -> Certifier | None:
    """The certifier where bound propagation may certify this search's inputs, else
    ``None``."""
    if certify == "none" or (certify == "auto" and solver not in ("auto", "exact")):
        return None
    usable = (isinstance(model, TorchClassifier) and isinstance(threat, LpThreat)
              and statement.target is None)
    if certify != "auto":
        if not usable:
            raise InputError(f"certify='{certify}' needs a torch network, an Lp threat and an "
                             f"untargeted statement; got {model.name} under {threat.name}")
        return Certifier(read_network(model.module, tuple(shape), model.device), certify)
    if not usable:
        return None
    net = network_or_none(model.module, tuple(shape), model.device)
    return None if net is None else Certifier(net, "auto")


def uncertified_reason(model: Classifier, threat, statement: Statement, solver: str,
                       certify: str, shape: tuple[int, ...]) -> str | None:
    """Why ``certify="auto"`` gives a network no certified lower bound (for the summary), or
    ``None`` where it does or where no network is involved (a linear model or trees get
    their exact solver instead)."""
    if certify != "auto" or solver not in ("auto", "exact"):
        return None
    if getattr(model, "onnx_graph", None) is not None and not isinstance(model,
                                                                         TorchClassifier):
        return (f"{model.name} is served by ONNX Runtime as a black box (its graph did not "
                "convert to torch), so no certified lower bound")
    if not isinstance(model, TorchClassifier):
        return None
    if not isinstance(threat, LpThreat) or statement.target is not None:
        return None
    try:
        read_network(model.module, tuple(shape), model.device)
    except InputError as exc:
        return f"no certified lower bound: {exc}"
    return None


def certify_bounds(state: BatchState, active: torch.Tensor, certifier: Certifier) -> None:
    """Torch networks: the largest strength at which bound propagation proves the decision,
    by bisection below the attack's radius (``max_radius`` where it found none); kept where
    it beats the bound already held. Under ``auto``, CROWN runs when its estimated cost is
    within ``AUTO_CERTIFY_SHARE`` of the passes the attack spent on these inputs, and then
    only as long as its measured time stays within that share of the search's time on the
    batch (:func:`bound_within`). Brackets already closed (by the network MILP) are left as
    they are."""
    sub = torch.nonzero(active & ~state.exact).reshape(-1)
    if len(sub) == 0:
        return
    net, method = certifier.net, certifier.method
    if method == "auto":
        owners = state.owners[sub.cpu().numpy()]
        spent = float(np.mean(state.ledger.forward[owners] + state.ledger.backward[owners]))
        x = state.x[sub]
        lo, hi = state.space.delta_bounds(x.reshape(len(x), -1))
        dom = make_domain(x, lo, hi, state.space.scale, state.upper_ends(sub),
                          state.threat.p)
        if estimated_passes(net, "crown", dom) > AUTO_CERTIFY_SHARE * spent:
            return
        bound_within(state, sub, certifier,
                     AUTO_CERTIFY_SHARE * (time.perf_counter() - state.started))
        return
    _bound_inputs(state, sub, net, method)


def bound_within(state: BatchState, sub: torch.Tensor, certifier: Certifier,
                 seconds: float) -> None:
    """CROWN on the inputs ``sub`` in chunks of 1, 2, 4, ... inputs while the next chunk,
    at the time per input the last one took (larger chunks take less), fits in what is left
    of ``seconds``; the rate is kept in ``certifier`` so that a later batch where even one
    input would not fit skips at once. Inputs not reached keep the bound they had."""
    rate = certifier.seconds_per_input
    if rate is not None and rate > seconds:
        return
    start, size, spent = 0, 1, 0.0
    while start < len(sub):
        chunk = sub[start:start + size]
        t0 = time.perf_counter()
        _bound_inputs(state, chunk, certifier.net, "crown")
        took = time.perf_counter() - t0
        spent += took
        start += len(chunk)
        certifier.seconds_per_input = rate = took / len(chunk)
        size = min(2 * size, len(sub) - start)
        if spent + rate * size > seconds:
            return


def _bound_inputs(state: BatchState, sub: torch.Tensor, net: Network, method: str) -> None:
    """Certified radii of the batch inputs ``sub`` by ``method`` below their brackets' upper
    ends, kept where they beat the bound already held (branch and bound's leaf points
    verified by the model)."""
    out = BOUND_PROPAGATION(state.problem(sub, state.upper_ends(sub)), method=method,
                            network=net, time_limit=state.config.exact_time_limit,
                            deadline=state.config.deadline)
    state.apply_exact(sub, out)
