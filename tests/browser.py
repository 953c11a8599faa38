"""Open an HTML file in headless Chromium and report what a reader's browser would see:
broken images, console errors, uncaught errors, resources fetched from outside the file, and
the layout at a given window width (each image's rendered box, the page's horizontal
overflow)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

#: Injected first in <head>: records console errors/warnings, load errors (capture phase, so
#: failed <img>/<link>/<script> loads count) and, on load, every image that did not decode,
#: every resource that is not inline data and the layout (viewport and page widths, the
#: body's content column, each image's natural size and rendered box, in CSS px); writes them
#: as JSON into <pre id=__rs_check> (appended after the layout is read, so it takes no room).
PROBE = """<script>
window.__rs = {errors: []};
for (const level of ["error", "warn"]) {
  const orig = console[level];
  console[level] = (...args) => { __rs.errors.push(level + ": " + args.join(" "));
                                  orig.apply(console, args); };
}
window.addEventListener("error", (e) => {
  const t = e.target;
  __rs.errors.push("error: " + (e.message || (t && (t.src || t.href)) || "unknown"));
}, true);
window.addEventListener("load", () => {
  const imgs = Array.from(document.images);
  const body = getComputedStyle(document.body);
  const colLeft = document.body.getBoundingClientRect().left + parseFloat(body.paddingLeft);
  const layout = {
    viewport: window.innerWidth,
    page_width: document.documentElement.scrollWidth,
    column: document.body.clientWidth - parseFloat(body.paddingLeft)
            - parseFloat(body.paddingRight),
    images: imgs.map((i) => {  // the content box: the drawn pixels, borders left out
      const b = i.getBoundingClientRect(), st = getComputedStyle(i);
      const bl = parseFloat(st.borderLeftWidth), br = parseFloat(st.borderRightWidth);
      const bt = parseFloat(st.borderTopWidth), bb = parseFloat(st.borderBottomWidth);
      return {alt: i.alt, natural_width: i.naturalWidth, natural_height: i.naturalHeight,
              width: b.width - bl - br, height: b.height - bt - bb,
              left: b.left + bl - colLeft, top: b.top + window.scrollY + bt}; }),
  };
  const out = {
    layout: layout,
    n_images: imgs.length,
    broken: imgs.filter((i) => !(i.complete && i.naturalWidth > 0)).map((i) => i.alt),
    errors: __rs.errors,
    resources: performance.getEntriesByType("resource").map((r) => r.name)
      .filter((n) => !n.startsWith("data:")),
  };
  const pre = document.createElement("pre");
  pre.id = "__rs_check";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run",
                  "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000",
                  "--force-device-scale-factor=1", "--hide-scrollbars")


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def open_in_chromium(html_path: Path, timeout: float = 90.0, width: int = 1400,
                     height: int = 900) -> dict:
    """Load a copy of ``html_path`` (with :data:`PROBE` injected) in headless Chromium, in a
    ``width`` x ``height`` window (CSS px, device scale factor 1).

    Returns ``{n_images, broken, errors, resources, console, layout}``, ``console`` being the
    console lines Chromium logged for the page itself and ``layout`` ``{viewport, page_width,
    column, images}`` (``images``: ``{alt, natural_width, natural_height, width, height, left,
    top}`` in document order: the content box, borders left out, ``left`` from the content
    column's left edge).
    """
    browser = chromium_path()
    if browser is None:
        raise RuntimeError("chromium is not installed")
    text = Path(html_path).read_text(encoding="utf-8")
    probed = re.sub(r"<head>", "<head>" + PROBE, text, count=1)
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "page.html"
        page.write_text(probed, encoding="utf-8")
        proc = subprocess.run(
            [browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp}/profile",
             f"--window-size={width},{height}", "--dump-dom",
             page.as_uri()], capture_output=True, text=True, timeout=timeout)
    found = re.search(r'<pre id="__rs_check">(.*?)</pre>', proc.stdout, flags=re.S)
    if found is None:
        raise RuntimeError(f"chromium did not run the probe (exit {proc.returncode}): "
                           f"{proc.stderr[-2000:]}")
    out = json.loads(found.group(1).replace("&amp;", "&").replace("&lt;", "<")
                     .replace("&gt;", ">").replace("&quot;", '"'))
    out["console"] = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return out
