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


# -- legibility of the report's figures in a browser -----------------------------------------
#: Smallest text a figure may show, in CSS px once the browser has scaled the image: the
#: figure's smallest font (image px) times rendered width / natural width.
MIN_FONT_CSS_PX = 9.0
#: A figure sharing a row with others may be scaled down to this share of what the column
#: alone would give it (min(natural width, column width)), no further.
MIN_SLOT_SHARE = 0.9


def smallest_text_px(fig, dpi: float) -> float:
    """The smallest font of ``fig``'s visible, non-empty texts (titles, labels, tick labels,
    legends, annotations), in pixels of the image saved at ``dpi`` (pt x dpi / 72)."""
    from matplotlib.text import Text

    sizes = [t.get_fontsize() for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip()]
    return min(sizes) * dpi / 72.0 if sizes else float("inf")


def record_figure_fonts(monkeypatch) -> dict[str, float]:
    """Make the report record, per figure it embeds (keyed by its data URI), the figure's
    :func:`smallest_text_px`; returns the (filling) dict."""
    import robustscope.report.html as html_mod

    fonts: dict[str, float] = {}
    original = html_mod.figure_to_data_uri

    def recording(fig, dpi: int = 96) -> str:
        uri = original(fig, dpi=dpi)  # draws the figure: tick labels are final
        fonts[uri] = smallest_text_px(fig, dpi)
        return uri

    monkeypatch.setattr(html_mod, "figure_to_data_uri", recording)
    return fonts


def image_sources(html: str) -> list[str]:
    """The full src of every <img>, in document order."""
    parser = _Images()
    parser.feed(html)
    return [img.get("src", "") for img in parser.images]


def figure_readings(layout: dict, fonts: list[float]) -> list[dict]:
    """Per image of a browser ``layout`` (see ``browser.open_in_chromium``) with its
    smallest font ``fonts[k]`` (image px): natural and rendered width, scale, rendered font
    (CSS px) and the width the column alone would give it (min(natural, column))."""
    out = []
    for img, font in zip(layout["images"], fonts, strict=True):
        scale = img["width"] / img["natural_width"] if img["natural_width"] else 0.0
        out.append({"alt": img["alt"], "natural": img["natural_width"],
                    "width": round(img["width"], 1), "left": round(img["left"], 1),
                    "scale": round(scale, 3), "font_px": round(font * scale, 2),
                    "alone": min(img["natural_width"], layout["column"])})
    return out


def legibility_problems(layout: dict, fonts: list[float]) -> list[str]:
    """What makes a report unreadable at this window width: a figure whose smallest text
    renders under :data:`MIN_FONT_CSS_PX`, one scaled below :data:`MIN_SLOT_SHARE` of
    min(natural width, column width), one reaching out of the content column, and a page
    wider than the window (horizontal scrolling)."""
    problems = []
    for f in figure_readings(layout, fonts):
        name = f"{f['alt']!r} ({f['natural']} px drawn at {f['width']} px)"
        if f["font_px"] < MIN_FONT_CSS_PX:
            problems.append(f"{name}: smallest text {f['font_px']} CSS px < {MIN_FONT_CSS_PX}")
        if f["width"] < MIN_SLOT_SHARE * f["alone"] - 0.5:
            problems.append(f"{name}: below {MIN_SLOT_SHARE:.0%} of the {f['alone']} px "
                            "it would have alone")
        if f["left"] < -0.5 or f["left"] + f["width"] > layout["column"] + 0.5:
            problems.append(f"{name}: outside the {layout['column']} px content column")
    if layout["page_width"] > layout["viewport"]:
        problems.append(f"page is {layout['page_width']} px wide in a {layout['viewport']} px "
                        "window (horizontal scrolling)")
    return problems
