"""Certified bounds of torch networks by bound propagation (IBP, CROWN, alpha-CROWN).

- :mod:`.graph` reads a network with ``torch.fx`` into a small graph of four node kinds
  (input, affine, ReLU, sum);
- :mod:`.domain` is the set of inputs a bound covers: the feature space's box intersected
  with the threat's Lp ball, and the exact (Linf, L1) or dual (L2) minimum of a linear
  function over it;
- :mod:`.forward` bounds every node by forward-mode linear functions (small networks);
- :mod:`.dual_norm` bounds a node affine in the input over an L1 / L2 ball by its rows'
  dual norms (where forward mode does not fit);
- :mod:`.propagate` computes lower bounds of linear functions of the logits;
- :mod:`.branch` proves a decision at one strength by branch and bound over unstable ReLUs;
- :mod:`.certify` turns them into a certified radius per input by bisection.

Every bound runs in float64 on the model's device: see :mod:`.certify` for how rounding is
kept from making a certificate unsafe. Only branch and bound's Adam steps, which choose the
slopes and multipliers a bound is then computed from, run on a float32 copy (:mod:`.cast`).
"""
