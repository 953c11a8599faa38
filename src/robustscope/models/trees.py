"""Tree ensembles parsed into one common structure, for exact radius computation.

XGBoost, LightGBM and scikit-learn tree classifiers are read into a :class:`TreeEnsemble`:
per tree the arrays ``feature``, ``threshold``, ``left``, ``right`` and a leaf ``value``
vector; per ensemble the raw-score offset, the comparison rule and the input precision. The
class scores are ``offset + sum_t value_t[leaf_t(x)]`` (shape ``(n_scores,)``) and the decision
is the argmax of the class scores (a single-score binary model has class scores ``(0, F)``).

How each library routes an input value ``v`` at a split ``(feature, threshold t)``:

============  ===================  ===================  ==============================
library       comparison (left)    input precision      threshold precision
============  ===================  ===================  ==============================
XGBoost       ``float32(v) < t``   float32              float32 (read from JSON model)
LightGBM      ``v <= t``           float64              float64 (``dump_model``)
scikit-learn  ``float32(v) <= t``  float32              float64
============  ===================  ===================  ==============================

XGBoost's text dump (``get_dump``) rounds thresholds; we read the JSON model
(``save_raw('json')``), whose float32 values round-trip exactly. Missing values (NaN) and
LightGBM's ``zero_as_missing`` routing are not modelled: robustscope's inputs are finite, and
a LightGBM model that routes zeros as missing is refused.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from robustscope.core.errors import ModelError
from robustscope.models.base import PROBA_FLOOR, Classifier
from robustscope.models.names import feature_names, named_input
from robustscope.models.threads import ThreadCount

#: LightGBM's ``kZeroThreshold`` (``1e-35f`` as a double): its predictor builds a sparse row
#: and skips every value with ``|v| <= kZeroThreshold``, which then reads as 0 at every split.
LIGHTGBM_ZERO_BAND = float(np.float32(1e-35))
#: Links from raw scores to probabilities (the decision is the argmax of the scores for all).
LINKS = ("sigmoid", "softmax", "average")


@dataclass
class Tree:
    """One binary decision tree; node arrays have length ``n_nodes``.

    ``feature[i] < 0`` marks a leaf. ``value`` has shape ``(n_nodes, n_scores)`` and is read at
    leaves only (it already includes learning rate / averaging weight).
    """

    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    value: np.ndarray

    def __post_init__(self) -> None:
        self.feature = np.asarray(self.feature, dtype=np.int64)
        self.threshold = np.asarray(self.threshold, dtype=np.float64)
        self.left = np.asarray(self.left, dtype=np.int64)
        self.right = np.asarray(self.right, dtype=np.int64)
        self.value = np.asarray(self.value, dtype=np.float64)
        if self.value.ndim == 1:
            self.value = self.value[:, None]

    @property
    def leaves(self) -> np.ndarray:
        """Indices of the leaf nodes."""
        return np.flatnonzero(self.feature < 0)


@dataclass(frozen=True)
class _StackedTrees:
    """The nodes of all trees of an ensemble in single arrays; children are global
    indices; ``root[k]`` is tree ``k``'s first node."""

    root: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    value: np.ndarray


@dataclass
class TreeEnsemble:
    """A parsed tree-ensemble classifier.

    Attributes
    ----------
    trees : the trees; every tree's ``value`` has ``n_scores`` columns.
    offset : float64 ``(n_scores,)``, the raw score before any tree (base score, prior).
    link : one of ``LINKS``; ``sigmoid`` means one score F and class scores ``(0, F)``.
    n_classes, n_features : sizes.
    strict : True when ``x < t`` goes left (XGBoost), False for ``x <= t``.
    input_float32 : True when the library casts inputs to float32 before comparing.
    zero_band : inputs with ``|v| <= zero_band`` are read as exactly 0 before comparing
        (LightGBM drops them as zeros of a sparse row: ``LIGHTGBM_ZERO_BAND``); 0 for none.
    source : the library and class the ensemble was read from.
    """

    trees: list[Tree]
    offset: np.ndarray
    link: str
    n_classes: int
    n_features: int
    strict: bool
    input_float32: bool
    source: str = "tree ensemble"
    zero_band: float = 0.0
    classes: np.ndarray | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.offset = np.asarray(self.offset, dtype=np.float64).reshape(-1)
        if self.link not in LINKS:
            raise ModelError(f"{self.source}: unknown link '{self.link}'")
        expected = 1 if self.link == "sigmoid" else self.n_classes
        if len(self.offset) != expected:
            raise ModelError(f"{self.source}: offset has {len(self.offset)} entries, "
                             f"expected {expected}")
        for k, t in enumerate(self.trees):
            if t.value.shape[1] != expected:
                raise ModelError(f"{self.source}: tree {k} has {t.value.shape[1]} score "
                                 f"columns, expected {expected}")
            used = t.feature[t.feature >= 0]
            if len(used) and used.max() >= self.n_features:
                raise ModelError(f"{self.source}: tree {k} splits on feature {used.max()} but "
                                 f"the model has {self.n_features} features")

    @property
    def n_scores(self) -> int:
        """Raw score columns: 1 for a sigmoid binary model, else ``n_classes``."""
        return len(self.offset)

    def goes_left(self, v: np.ndarray, t: float | np.ndarray) -> np.ndarray:
        """The library's routing of values ``v`` (float64) at threshold ``t``."""
        v = np.asarray(v, dtype=np.float64)
        if self.input_float32:
            v = v.astype(np.float32).astype(np.float64)
        if self.zero_band > 0:
            v = np.where(np.abs(v) <= self.zero_band, 0.0, v)
        return v < t if self.strict else v <= t

    def _stacked(self) -> _StackedTrees:
        """Every tree's nodes in one set of arrays (built on first use; the trees are not
        expected to change after parsing)."""
        stacked = self.__dict__.get("_stacked_trees")
        if stacked is None:
            trees = self.trees
            sizes = np.array([len(t.feature) for t in trees], dtype=np.int64)
            start = np.cumsum(sizes) - sizes
            index = np.zeros(0, dtype=np.int64)  # the empty head keeps dtypes with no trees
            stacked = _StackedTrees(
                root=start,
                feature=np.concatenate([index, *(t.feature for t in trees)]),
                threshold=np.concatenate([np.zeros(0), *(t.threshold for t in trees)]),
                left=np.concatenate([index, *(t.left + s
                                              for t, s in zip(trees, start, strict=True))]),
                right=np.concatenate([index, *(t.right + s
                                               for t, s in zip(trees, start, strict=True))]),
                value=np.concatenate([np.zeros((0, self.n_scores)),
                                      *(t.value for t in trees)]))
            self.__dict__["_stacked_trees"] = stacked
        return stacked

    def _node_index(self, X: np.ndarray) -> np.ndarray:
        """Leaf reached in each tree as an index into the stacked nodes, ``(n, n_trees)``:
        all trees step down together, one level per pass."""
        X = np.asarray(X, dtype=np.float64)
        st = self._stacked()
        node = np.broadcast_to(st.root, (X.shape[0], len(st.root))).copy()
        rows = np.broadcast_to(np.arange(X.shape[0])[:, None], node.shape)
        inner = st.feature[node] >= 0
        while inner.any():
            ni = node[inner]
            left = self.goes_left(X[rows[inner], st.feature[ni]], st.threshold[ni])
            node[inner] = np.where(left, st.left[ni], st.right[ni])
            inner = st.feature[node] >= 0
        return node

    def leaf_index(self, X: np.ndarray) -> np.ndarray:
        """Leaf node reached in each tree, int array ``(n, n_trees)``."""
        return self._node_index(X) - self._stacked().root[None, :]

    def raw_scores(self, X: np.ndarray) -> np.ndarray:
        """Raw scores in float64, ``(n, n_scores)``."""
        node = self._node_index(X)
        return self.offset[None, :] + self._stacked().value[node].sum(axis=1)

    def class_scores(self, X: np.ndarray) -> np.ndarray:
        """Scores whose argmax is the decision, ``(n, n_classes)``."""
        raw = self.raw_scores(X)
        if self.link == "sigmoid":
            return np.hstack([np.zeros_like(raw), raw])
        return raw

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Class index (``0..n_classes-1``) per row, ``(n,)``."""
        return self.class_scores(X).argmax(axis=1)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Probabilities through the link, ``(n, n_classes)``."""
        scores = self.class_scores(X)
        if self.link == "average":
            return scores
        z = scores - scores.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)

    def thresholds_by_feature(self) -> list[np.ndarray]:
        """Sorted distinct thresholds used on each feature (a list of ``n_features`` arrays)."""
        per: list[list[np.ndarray]] = [[] for _ in range(self.n_features)]
        for t in self.trees:
            inner = t.feature >= 0
            for f, th in zip(t.feature[inner], t.threshold[inner], strict=True):
                per[f].append(th)
        return [np.unique(np.asarray(v, dtype=np.float64)) for v in per]


# -- recognising and parsing ------------------------------------------------------------------
_SKLEARN_FORESTS = {"RandomForestClassifier", "ExtraTreesClassifier"}
_SKLEARN_SINGLE = {"DecisionTreeClassifier", "ExtraTreeClassifier"}
_SKLEARN_GBM = {"GradientBoostingClassifier"}


def _kind(obj: object) -> str | None:
    name = type(obj).__name__
    module = type(obj).__module__
    if module.startswith("xgboost") and name in ("XGBClassifier", "Booster"):
        return "xgboost"
    if module.startswith("lightgbm") and name in ("LGBMClassifier", "Booster"):
        return "lightgbm"
    if module.startswith("sklearn"):
        if name in _SKLEARN_FORESTS:
            return "sklearn-forest"
        if name in _SKLEARN_SINGLE:
            return "sklearn-tree"
        if name in _SKLEARN_GBM:
            return "sklearn-gbm"
    return None


def is_tree_ensemble(obj: object) -> bool:
    """True for a (fitted or not) XGBClassifier, LGBMClassifier or scikit-learn tree
    classifier (decision tree, random forest, extra trees, gradient boosting), or a raw
    ``xgboost.Booster`` / ``lightgbm.Booster`` (as read from a model file)."""
    return _kind(obj) is not None


def parse_tree_model(model: object) -> TreeEnsemble:
    """Read a fitted tree classifier into a :class:`TreeEnsemble`.

    Raises :class:`ModelError` for unsupported variants (DART boosters, categorical splits,
    multi-output trees, linear trees, zero-as-missing routing, an estimator as GBM init).
    """
    kind = _kind(model)
    if kind is None:
        raise ModelError(f"{type(model).__name__} is not a supported tree ensemble")
    parser = {"xgboost": _parse_xgboost, "lightgbm": _parse_lightgbm,
              "sklearn-forest": _parse_sklearn_forest, "sklearn-tree": _parse_sklearn_forest,
              "sklearn-gbm": _parse_sklearn_gbm}[kind]
    return parser(model)


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def _parse_xgboost(model) -> TreeEnsemble:
    name = type(model).__name__
    raw = name == "Booster"
    try:
        booster = model if raw else model.get_booster()
    except Exception as exc:
        raise ModelError(f"{name}: not fitted ({exc})") from exc
    doc = json.loads(bytes(booster.save_raw("json")))
    learner = doc["learner"]
    objective = learner["objective"]["name"]
    gb = learner["gradient_booster"]
    if gb.get("name") != "gbtree":
        raise ModelError(f"{name}: booster '{gb.get('name')}' is not supported (gbtree only)")
    params = learner["learner_model_param"]
    n_features = int(params["num_feature"])
    num_class = int(params.get("num_class", "0"))
    base = np.array([float(v) for v in str(params["base_score"]).strip("[]").split(",")])
    if raw and objective not in ("binary:logistic", "multi:softprob"):
        raise ModelError(f"xgboost.Booster: objective '{objective}' does not predict class "
                         "probabilities; train with binary:logistic or multi:softprob")
    if objective in ("binary:logistic", "binary:logitraw"):
        link, n_classes = "sigmoid", 2
        offset = np.array([_logit(float(base[0]))]) if objective == "binary:logistic" else base[:1]
    elif objective in ("multi:softprob", "multi:softmax"):
        link, n_classes = "softmax", num_class
        # the intercept of softmax objectives is kept in margin space
        offset = np.broadcast_to(base, (num_class,)).astype(np.float64)
    else:
        raise ModelError(f"{name}: objective '{objective}' is not a supported classifier "
                         "objective (binary:logistic, binary:logitraw, multi:softprob)")
    model_part = gb["model"]
    tree_info = np.asarray(model_part["tree_info"], dtype=np.int64)
    n_use = len(tree_info)
    best = None if raw or not _has_best_iteration(model) else model.best_iteration
    if best is not None and "iteration_indptr" in model_part:
        n_use = int(model_part["iteration_indptr"][int(best) + 1])
    n_scores = 1 if link == "sigmoid" else n_classes
    trees = []
    for k, raw in enumerate(model_part["trees"][:n_use]):
        if int(raw["tree_param"].get("size_leaf_vector", "1")) > 1:
            raise ModelError(f"{name}: multi-output trees are not supported")
        if any(int(s) != 0 for s in raw.get("split_type", [])):
            raise ModelError(f"{name}: categorical splits are not supported")
        left = np.asarray(raw["left_children"], dtype=np.int64)
        right = np.asarray(raw["right_children"], dtype=np.int64)
        # float32 values printed shortest-round-trip: casting back gives the exact threshold
        cond = np.asarray(raw["split_conditions"], dtype=np.float64).astype(np.float32)
        is_leaf = left < 0
        feature = np.where(is_leaf, -1, np.asarray(raw["split_indices"], dtype=np.int64))
        value = np.zeros((len(left), n_scores))
        value[is_leaf, 0 if n_scores == 1 else int(tree_info[k])] = cond[is_leaf]
        trees.append(Tree(feature, np.where(is_leaf, 0.0, cond.astype(np.float64)),
                          left, right, value))
    ens = TreeEnsemble(trees, offset, link, n_classes, n_features, strict=True,
                       input_float32=True, source=f"xgboost.{name}",
                       classes=getattr(model, "classes_", None),
                       meta={"float32_scores": True})
    _check_offset(ens, lambda X: _xgb_margin(booster, X))
    return ens


def _has_best_iteration(model) -> bool:
    try:
        return getattr(model, "best_iteration", None) is not None
    except AttributeError:
        return False


def _xgb_margin(booster, X: np.ndarray) -> np.ndarray:
    import xgboost

    out = booster.predict(xgboost.DMatrix(X, feature_names=booster.feature_names),
                          output_margin=True)
    return np.asarray(out, dtype=np.float64).reshape(X.shape[0], -1)


def _check_offset(ens: TreeEnsemble, margin_fn) -> None:
    """Compare the parsed offset with the library's own raw score on a probe row and adopt
    the library's value if the two disagree (base-score conventions change across versions)."""
    probe = np.zeros((1, ens.n_features))
    own = margin_fn(probe)[0]
    ours = ens.raw_scores(probe)[0]
    if own.shape != ours.shape:
        raise ModelError(f"{ens.source}: library returns {own.shape[0]} raw scores, parsed "
                         f"{ours.shape[0]}")
    if np.max(np.abs(own - ours)) > 1e-4 * (1.0 + np.max(np.abs(own))):
        ens.offset = ens.offset + (own - ours)
        ens.meta["offset_from_probe"] = True


def _parse_lightgbm(model) -> TreeEnsemble:
    name = type(model).__name__
    raw = name == "Booster"
    try:
        booster = model if raw else model.booster_
    except Exception as exc:
        raise ModelError(f"{name}: not fitted ({exc})") from exc
    best = getattr(model, "best_iteration" if raw else "best_iteration_", None)
    num_iteration = best if best else None
    doc = booster.dump_model(num_iteration=num_iteration)
    objective = str(doc.get("objective", "")).split()
    obj = objective[0] if objective else ""
    n_classes = int(doc["num_class"])
    if obj == "binary":
        link, n_classes, n_scores = "sigmoid", 2, 1
    elif obj in ("multiclass", "multiclassova"):
        link, n_scores = "softmax", n_classes
    else:
        raise ModelError(f"{name}: objective '{doc.get('objective')}' is not supported "
                         "(binary, multiclass, multiclassova)")
    if doc.get("average_output"):
        raise ModelError(f"{name}: random-forest mode (average_output) is not supported")
    per_iter = int(doc["num_tree_per_iteration"])
    trees = []
    for info in doc["tree_info"]:
        cls = int(info["tree_index"]) % per_iter if n_scores > 1 else 0
        trees.append(_lgb_tree(info["tree_structure"], n_scores, cls, name))
    n_features = int(doc["max_feature_idx"]) + 1
    ens = TreeEnsemble(trees, np.zeros(n_scores), link, n_classes, n_features, strict=False,
                       input_float32=False, source=f"lightgbm.{name}",
                       zero_band=LIGHTGBM_ZERO_BAND,
                       classes=getattr(model, "classes_", None))
    _check_offset(ens, lambda X: np.asarray(
        booster.predict(X, raw_score=True, num_iteration=num_iteration),
        dtype=np.float64).reshape(X.shape[0], -1))
    return ens


def _lgb_tree(root: dict, n_scores: int, cls: int, name: str) -> Tree:
    feature, threshold, left, right, values = [], [], [], [], []

    def visit(node: dict) -> int:
        idx = len(feature)
        feature.append(-1)
        threshold.append(0.0)
        left.append(-1)
        right.append(-1)
        values.append(0.0)
        if "leaf_value" in node and "split_feature" not in node:
            values[idx] = float(node["leaf_value"])
            return idx
        if node.get("decision_type", "<=") != "<=":
            raise ModelError(f"{name}: categorical splits are not supported")
        if node.get("missing_type") == "Zero":
            raise ModelError(f"{name}: zero_as_missing routing is not supported")
        if "leaf_coeff" in node:
            raise ModelError(f"{name}: linear trees are not supported")
        feature[idx] = int(node["split_feature"])
        threshold[idx] = float(node["threshold"])
        left[idx] = visit(node["left_child"])
        right[idx] = visit(node["right_child"])
        return idx

    visit(root)
    value = np.zeros((len(feature), n_scores))
    value[:, cls] = values
    return Tree(feature, threshold, left, right, value)


def _sklearn_tree(est, n_scores: int, weight: float, column: int | None, name: str) -> Tree:
    tr = est.tree_
    if tr.n_outputs != 1:
        raise ModelError(f"{name}: multi-output trees are not supported")
    feature = np.where(tr.children_left < 0, -1, tr.feature)
    if column is None:  # class-probability leaves (forests, single trees)
        v = np.asarray(tr.value[:, 0, :], dtype=np.float64)
        total = v.sum(axis=1, keepdims=True)
        v = np.divide(v, total, out=np.zeros_like(v), where=total > 0) * weight
    else:
        v = np.zeros((tr.node_count, n_scores))
        v[:, column] = np.asarray(tr.value[:, 0, 0], dtype=np.float64) * weight
    return Tree(feature, np.where(feature < 0, 0.0, tr.threshold), tr.children_left,
                tr.children_right, v)


def _parse_sklearn_forest(model) -> TreeEnsemble:
    name = type(model).__name__
    if not hasattr(model, "classes_"):
        raise ModelError(f"{name}: not fitted")
    if np.ndim(model.classes_) != 1 or getattr(model, "n_outputs_", 1) != 1:
        raise ModelError(f"{name}: multi-output classifiers are not supported")
    estimators = getattr(model, "estimators_", [model])
    k = len(model.classes_)
    if k < 2:
        raise ModelError(f"{name}: fitted on a single class")
    trees = [_sklearn_tree(e, k, 1.0 / len(estimators), None, name) for e in estimators]
    return TreeEnsemble(trees, np.zeros(k), "average", k, int(model.n_features_in_),
                        strict=False, input_float32=True, source=f"sklearn.{name}",
                        classes=model.classes_)


def _parse_sklearn_gbm(model) -> TreeEnsemble:
    name = type(model).__name__
    if not hasattr(model, "estimators_"):
        raise ModelError(f"{name}: not fitted")
    init = getattr(model, "init_", None)
    if not (init == "zero" or type(init).__name__ == "DummyClassifier"):
        raise ModelError(f"{name}: an estimator as 'init' is not supported (its raw score "
                         "depends on the input)")
    k = len(model.classes_)
    n_scores = 1 if k == 2 else k
    lr = float(model.learning_rate)
    trees = []
    for stage in model.estimators_:
        for c, est in enumerate(stage):
            trees.append(_sklearn_tree(est, n_scores, lr, c, name))
    probe = np.zeros((1, int(model.n_features_in_)), dtype=np.float64)
    offset = np.asarray(model._raw_predict_init(probe.astype(np.float32)),
                        dtype=np.float64).reshape(-1)
    return TreeEnsemble(trees, offset, "sigmoid" if k == 2 else "softmax", k,
                        int(model.n_features_in_), strict=False, input_float32=True,
                        source=f"sklearn.{name}", classes=model.classes_)


# -- adapter ----------------------------------------------------------------------------------
class TreeEnsembleClassifier(Classifier):
    """A tree classifier served by its own ``predict_proba`` and exposing the parsed
    :class:`TreeEnsemble` (``.ensemble``) for the exact solver.

    Logits are ``log(clamp(p, 1e-12))`` of the library's probabilities, as for any black box.
    """

    differentiable = False
    is_tree_ensemble = True

    def __init__(self, model: object, ensemble: TreeEnsemble | None = None,
                 device: str | torch.device = "cpu") -> None:
        ens = parse_tree_model(model) if ensemble is None else ensemble
        super().__init__(ens.n_classes, (ens.n_features,), device, torch.float64, ens.source)
        self.model = model
        self.native = model
        self.ensemble = ens
        self.classes = None if ens.classes is None else np.asarray(ens.classes)
        self.feature_names = feature_names(model)
        self.thread_count = ThreadCount()  # a LightGBM booster's per-call count
        self._predict_proba = _proba_function(model, self.thread_count)

    def probabilities_numpy(self, x: np.ndarray) -> np.ndarray:
        """The library's ``predict_proba`` on float64 rows ``(n, d)``, as ``(n, n_classes)``."""
        try:
            p = np.asarray(self._predict_proba(x), dtype=np.float64)
        except Exception as exc:
            raise ModelError(f"{self.name} raised {type(exc).__name__}: {exc}") from exc
        if p.ndim == 1:
            p = np.stack([1.0 - p, p], axis=1)
        if p.shape != (x.shape[0], self.n_classes):
            raise ModelError(f"{self.name} returned shape {p.shape}; "
                             f"expected ({x.shape[0]}, {self.n_classes})")
        return p

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.detach().reshape(x.shape[0], -1).cpu().numpy().astype(np.float64, copy=False)
        p = self.probabilities_numpy(flat)
        return torch.log(torch.as_tensor(p, device=self.device).clamp_min(PROBA_FLOOR))


def _proba_function(model: object, count: ThreadCount | None = None):
    """The library's own class-probability call (a raw booster's ``predict``), given a
    DataFrame with the model's column names when it was fitted with names; a raw LightGBM
    booster runs on ``count``'s threads (its own default where unset)."""
    names = feature_names(model)
    if type(model).__name__ != "Booster":
        return named_input(model.predict_proba, names)
    if _kind(model) == "xgboost":  # the booster's nthread is set through the adapter's setter
        if names is None:
            return lambda x: model.inplace_predict(np.asarray(x, dtype=np.float32))
        return named_input(model.inplace_predict, names)
    # a LightGBM booster takes its thread count per call (0: its default)
    return named_input(lambda x: model.predict(
        x, num_threads=(count.value if count is not None else None) or 0), names)


def wrap_tree_model(obj: object, device: str | torch.device = "cpu") -> TreeEnsembleClassifier:
    """Wrap a fitted tree classifier (see :func:`is_tree_ensemble`)."""
    return TreeEnsembleClassifier(obj, device=device)


def check_parsed(model: object, ensemble: TreeEnsemble, X: np.ndarray) -> float:
    """Share of rows of ``X`` on which the parsed ensemble's decision equals the argmax of the
    model's own ``predict_proba`` (1.0 when the parse is faithful)."""
    X = np.asarray(X, dtype=np.float64)
    p = np.asarray(_proba_function(model)(X), dtype=np.float64)
    if p.ndim == 1:
        p = np.stack([1.0 - p, p], axis=1)
    return float((p.argmax(axis=1) == ensemble.predict(X)).mean())
