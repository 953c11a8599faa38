"""Open an HTML file in headless Chromium and report what a reader's browser would see:
broken images, console errors, uncaught errors, resources fetched from outside the file."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

#: Injected first in <head>: records console errors/warnings, load errors (capture phase, so
#: failed <img>/<link>/<script> loads count) and, on load, every image that did not decode
#: and every resource that is not inline data; writes them as JSON into <pre id=__rs_check>.
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
  const out = {
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
                  "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000")


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def open_in_chromium(html_path: Path, timeout: float = 90.0) -> dict:
    """Load a copy of ``html_path`` (with :data:`PROBE` injected) in headless Chromium.

    Returns ``{n_images, broken, errors, resources, console}``, ``console`` being the
    console lines Chromium logged for the page itself.
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
            [browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp}/profile", "--dump-dom",
             page.as_uri()], capture_output=True, text=True, timeout=timeout)
    found = re.search(r'<pre id="__rs_check">(.*?)</pre>', proc.stdout, flags=re.S)
    if found is None:
        raise RuntimeError(f"chromium did not run the probe (exit {proc.returncode}): "
                           f"{proc.stderr[-2000:]}")
    out = json.loads(found.group(1).replace("&amp;", "&").replace("&lt;", "<")
                     .replace("&gt;", ">").replace("&quot;", '"'))
    out["console"] = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return out
