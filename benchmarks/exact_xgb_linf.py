"""Exact Linf radius of a binary XGBoost model, for benchmarking only (Kantchelian et al.
2016 MILP, solved with HiGHS through ``scipy.optimize.milp``).

The library's own exact tree solver lives elsewhere (solvers/exact/trees/driver.py, another
engineer's work); this standalone copy only gives the gradient-free benchmark a ground truth
while that lands. Thresholds are read from the model's JSON (float32 values, not the rounded
text dump). The radius returned is the infimum over counterexamples (a strict split ``x < t``
is reached at ``x = t`` in the limit); each solution is turned into a concrete point just
inside its region and checked with the model's own ``predict``.

    exact_linf(xgb_classifier, X (n, d), y (n,), space) -> radii (n,), or None for other models
"""

from __future__ import annotations

import json

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

MARGIN_EPS = 1e-6


def _trees(booster):
    model = json.loads(booster.save_raw("json"))
    learner = model["learner"]
    base = float(learner["learner_model_param"]["base_score"].strip("[]"))
    trees = learner["gradient_booster"]["model"]["trees"]
    return np.log(base / (1 - base)), trees


def _structure(trees, d):
    """Thresholds per feature, leaves, and the sparse structural constraints."""
    thr = [set() for _ in range(d)]
    for t in trees:
        for node, left in enumerate(t["left_children"]):
            if left != -1:
                thr[t["split_indices"][node]].add(float(np.float32(t["split_conditions"][node])))
    thr = [np.array(sorted(s)) for s in thr]
    offset = np.cumsum([0] + [len(s) for s in thr])
    n_p = int(offset[-1])
    p_index = {(j, v): int(offset[j] + k) for j in range(d) for k, v in enumerate(thr[j])}
    rows, cols, vals, lo, hi = [], [], [], [], []

    def row(entries, lb, ub):
        r = len(lo)
        for c, v in entries:
            rows.append(r)
            cols.append(c)
            vals.append(v)
        lo.append(lb)
        hi.append(ub)

    # x < t_k implies x < t_{k+1}
    for j in range(d):
        for k in range(len(thr[j]) - 1):
            row([(1 + offset[j] + k, 1.0), (1 + offset[j] + k + 1, -1.0)], -np.inf, 0.0)
    leaf_values = []
    n_leaves = 0
    for t in trees:
        left, right = t["left_children"], t["right_children"]
        first = 1 + n_p + n_leaves
        leaf_of = {}
        for node, lc in enumerate(left):
            if lc == -1:
                leaf_of[node] = first + len(leaf_of)
                leaf_values.append(float(t["base_weights"][node]))
        n_leaves += len(leaf_of)

        def leaves_under(node, left=left, right=right, leaf_of=leaf_of):
            if left[node] == -1:
                return [leaf_of[node]]
            return leaves_under(left[node]) + leaves_under(right[node])

        row([(c, 1.0) for c in leaf_of.values()], 1.0, 1.0)
        for node, lc in enumerate(left):
            if lc == -1:
                continue
            pv = 1 + p_index[(t["split_indices"][node],
                              float(np.float32(t["split_conditions"][node])))]
            row([(c, 1.0) for c in leaves_under(lc)] + [(pv, -1.0)], -np.inf, 0.0)
            row([(c, 1.0) for c in leaves_under(right[node])] + [(pv, 1.0)], -np.inf, 1.0)
    n_var = 1 + n_p + n_leaves
    A = sparse.csr_matrix((vals, (rows, cols)), shape=(len(lo), n_var))
    return thr, offset, n_p, np.array(leaf_values), A, np.array(lo), np.array(hi)


def exact_linf(clf, X, y, space):
    """Exact Linf radii (scaled units) of a binary ``XGBClassifier``; None for other models."""
    if type(clf).__name__ != "XGBClassifier" or len(clf.classes_) != 2:
        return None
    X = np.asarray(X, dtype=np.float64)
    d = X.shape[1]
    base, trees = _trees(clf.get_booster())
    thr, offset, n_p, leaf_values, A_struct, lo_s, hi_s = _structure(trees, d)
    n_var = A_struct.shape[1]
    scale, lower, upper = space.scale, space.lower, space.upper
    c = np.zeros(n_var)
    c[0] = 1.0
    integrality = np.zeros(n_var)
    integrality[1:1 + n_p] = 1
    radii = np.full(len(X), np.nan)
    for i, (x, label) in enumerate(zip(X, np.asarray(y), strict=True)):
        if clf.predict(x[None])[0] != label:
            radii[i] = 0.0
            continue
        # decision: the ensemble's margin must reach the other side of 0
        dec = np.zeros(n_var)
        dec[1 + n_p:] = leaf_values
        if label == 1:
            dec_con = LinearConstraint(dec[None], -np.inf, -base)
        else:
            dec_con = LinearConstraint(dec[None], -base + MARGIN_EPS, np.inf)
        # r >= distance needed to put feature j on the other side of each threshold
        rr, cc, vv, rlo = [], [], [], []
        p_lb = np.zeros(n_p)
        p_ub = np.ones(n_p)
        for j in range(d):
            for k, t in enumerate(thr[j]):
                col = 1 + offset[j] + k
                if t <= x[j]:  # now x >= t (p = 0); p = 1 needs x' < t
                    a = (x[j] - t) / scale[j]
                    rr += [len(rlo)] * 2
                    cc += [0, col]
                    vv += [1.0, -a]
                    rlo.append(0.0)
                    if t <= lower[j]:
                        p_ub[col - 1] = 0
                else:  # now x < t (p = 1); p = 0 needs x' >= t
                    a = (t - x[j]) / scale[j]
                    rr += [len(rlo)] * 2
                    cc += [0, col]
                    vv += [1.0, a]
                    rlo.append(a)
                    if t > upper[j]:
                        p_lb[col - 1] = 1
        A_r = sparse.csr_matrix((vv, (rr, cc)), shape=(len(rlo), n_var))
        lb = np.r_[0.0, p_lb, np.zeros(n_var - 1 - n_p)]
        ub = np.r_[np.inf, p_ub, np.ones(n_var - 1 - n_p)]
        res = milp(c, integrality=integrality, bounds=Bounds(lb, ub),
                   constraints=[LinearConstraint(A_struct, lo_s, hi_s), dec_con,
                                LinearConstraint(A_r, np.array(rlo), np.inf)],
                   options={"mip_rel_gap": 1e-6})
        if res.status != 0:
            continue
        radii[i] = res.x[0]
        _check(clf, x, label, res.x, thr, offset, scale, lower, upper, radii[i])
    return radii


def _check(clf, x, label, sol, thr, offset, scale, lower, upper, r):
    """Build a concrete point in the solution's region and confirm it flips the model."""
    xp = x.copy()
    for j in range(len(x)):
        p = np.round(sol[1 + offset[j]:1 + offset[j + 1]])
        lo = max([lower[j]] + [t for t, v in zip(thr[j], p, strict=True) if v == 0])
        hi_candidates = [t for t, v in zip(thr[j], p, strict=True) if v == 1]
        hi = min(hi_candidates + [upper[j]]) if hi_candidates else upper[j]
        if hi_candidates and hi == min(hi_candidates):
            hi = float(np.nextafter(np.float32(hi), np.float32(-np.inf)))
        xp[j] = min(max(x[j], lo), hi)
    size = np.max(np.abs(xp - x) / scale)
    assert clf.predict(xp[None])[0] != label, "MILP solution does not flip the model"
    assert size <= r * (1 + 1e-4) + 1e-6, f"MILP point of size {size} exceeds radius {r}"
