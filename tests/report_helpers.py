"""Helpers of the report tests: small evaluations, and reading a report's images back."""

from __future__ import annotations

import base64
import re
import struct
from html.parser import HTMLParser

import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from robustscope.core.space import FeatureSpace
from robustscope.scores.evaluation import ReadingOptions, build_evaluation
from robustscope.search.engine import radius


def tabular_evaluation(n: int = 40, n_bootstrap: int = 100):
    """Logistic regression on breast-cancer: exact Linf radii, and L2 radii censored above a
    small max_radius, over ``n`` test inputs."""
    X, y = load_breast_cancer(return_X_y=True)
    names = list(load_breast_cancer().feature_names)
    X_train, y_train, X_test, y_test = X[:400], y[:400], X[400:400 + n], y[400:400 + n]
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000)).fit(X_train,
                                                                                  y_train)
    space = FeatureSpace.from_data(np.vstack([X_train, X_test]), names=names)
    results = {
        "linf": radius(model, X_test, y_test, threat="linf", space=space),
        "l2": radius(model, X_test, y_test, threat="l2", space=space, max_radius=0.3),
    }
    ev = build_evaluation("LR on breast-cancer", results, X_test, y_test, space, X_train,
                          ReadingOptions(n_bootstrap=n_bootstrap))
    return ev, model


class _Images(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[dict] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs))


def report_images(html: str) -> list[dict]:
    """``{src, alt, width, height}`` of every <img>; width/height read from the PNG header."""
    parser = _Images()
    parser.feed(html)
    out = []
    for img in parser.images:
        src = img.get("src", "")
        info = {"src": src[:40], "alt": img.get("alt"), "width": 0, "height": 0}
        if src.startswith("data:image/png;base64,"):
            png = base64.b64decode(src.split(",", 1)[1])
            if png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR":
                info["width"], info["height"] = struct.unpack(">II", png[16:24])
        out.append(info)
    return out


def external_references(html: str) -> list[str]:
    """Every src/href that is not inline data or an in-page anchor, and any <script>/<link>."""
    refs = re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', html)
    bad = [r for r in refs if not (r.startswith("data:") or r.startswith("#"))]
    bad += re.findall(r"<(?:script|link)\b[^>]*>", html, flags=re.I)
    bad += re.findall(r"url\((?!data:)[^)]*\)", html)
    return bad
