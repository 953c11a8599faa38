"""A synthetic credit data set whose features obey real relations (documented generator).

No public credit data set ships with the libraries robustscope depends on, and none may be
downloaded at test time; this generator makes one offline, reproducibly (same ``seed``, same
rows), with the relations a lender's application data has by construction:

=====================  ==========  =========================================================
feature                 type        how it is drawn (k€ amounts; per applicant)
=====================  ==========  =========================================================
age                     integer     uniform 21..70, **immutable**
income                  real        lognormal, median 42 k€/year
consumer_debt           real        ``income × 0.6 × Beta(2, 3)`` (policy cap 0.6 × income)
loan_amount             real        ``consumer_debt × Uniform(0.1, 1)`` (the loan is part of it)
savings, investments    real        lognormal; some applicants have none
assets                  real        ``savings + investments``
payments                integer     payments made so far, ``12 × history`` (±), ≤ 240
late_payments           integer     binomial over the payments, rate from a risk factor
history_years           real        ``Uniform(0, 1) × (age − 18)``
housing_rent/own/mortgage  one-hot  the applicant's housing
mortgage_balance        real        > 0 only with a mortgage
=====================  ==========  =========================================================

The relations (:data:`CREDIT_CONSTRAINTS`, in the feature-space syntax) hold on every row:
``loan_amount <= consumer_debt``, ``consumer_debt <= 0.6 * income``,
``savings + investments == assets``, ``late_payments <= payments``,
``history_years <= age - 18`` and ``mortgage_balance <= 600 * housing_mortgage``.
The label (1 = default) is drawn from a logistic model of the debt ratio, the late-payment
rate, the history, the assets and renting, so that about a third of applicants default.
"""

from __future__ import annotations

import numpy as np

from robustscope.core.space import FeatureSpace

CREDIT_FEATURES: list[str] = [
    "age", "income", "consumer_debt", "loan_amount", "savings", "investments", "assets",
    "payments", "late_payments", "history_years", "housing_rent", "housing_own",
    "housing_mortgage", "mortgage_balance",
]
CREDIT_CONSTRAINTS: list[str] = [
    "loan_amount <= consumer_debt",
    "consumer_debt <= 0.6 * income",
    "savings + investments == assets",
    "late_payments <= payments",
    "history_years <= age - 18",
    "mortgage_balance <= 600 * housing_mortgage",
]


def make_credit(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(X (n, 14) float64 in the units of the table above, y (n,) int 0/1)``."""
    rng = np.random.default_rng(seed)
    age = rng.integers(21, 71, n).astype(np.float64)
    income = np.exp(rng.normal(np.log(42.0), 0.45, n))
    debt = income * 0.6 * rng.beta(2, 3, n)
    loan = debt * rng.uniform(0.1, 1.0, n)
    savings = np.where(rng.random(n) < 0.15, 0.0, np.exp(rng.normal(np.log(8.0), 1.0, n)))
    invest = np.where(rng.random(n) < 0.5, 0.0, np.exp(rng.normal(np.log(15.0), 1.0, n)))
    history = rng.uniform(0, 1, n) * (age - 18)
    payments = np.minimum(240, np.round(12 * history * rng.uniform(0.6, 1.0, n)))
    risk = rng.beta(1.2, 12, n)
    late = rng.binomial(payments.astype(np.int64), risk).astype(np.float64)
    housing = rng.choice(3, size=n, p=[0.4, 0.25, 0.35])
    one_hot = np.eye(3)[housing]
    mortgage = np.where(housing == 2, rng.uniform(20, 400, n), 0.0)
    X = np.c_[age, income, debt, loan, savings, invest, savings + invest, payments, late,
              history, one_hot, mortgage]
    logit = (-2.6 + 5.0 * debt / income + 14.0 * late / np.maximum(payments, 1)
             - 0.04 * history - 0.25 * np.log1p(savings + invest) + 0.7 * (housing == 0)
             + 0.01 * loan)
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    return X, y


def credit_space(X: np.ndarray, constrained: bool = True) -> FeatureSpace:
    """The feature space of :func:`make_credit` data: bounds from ``X`` per column, age
    immutable, counts integer, housing one-hot; with ``constrained``, the relations
    :data:`CREDIT_CONSTRAINTS`."""
    X = np.asarray(X, dtype=np.float64)
    types = np.full(len(CREDIT_FEATURES), "real", dtype=object)
    for name, kind in (("age", "integer"), ("payments", "integer"),
                       ("late_payments", "integer"), ("housing_rent", "categorical"),
                       ("housing_own", "categorical"), ("housing_mortgage", "categorical")):
        types[CREDIT_FEATURES.index(name)] = kind
    mutable = np.array([name != "age" for name in CREDIT_FEATURES])
    housing = [CREDIT_FEATURES.index(f"housing_{h}") for h in ("rent", "own", "mortgage")]
    space = FeatureSpace.from_arrays(X.min(axis=0), X.max(axis=0), types=list(types),
                                     mutable=mutable, names=CREDIT_FEATURES, groups=[housing])
    return space.constrain(CREDIT_CONSTRAINTS) if constrained else space
