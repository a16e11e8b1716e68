"""The HTML report opened in a real browser (headless Chromium, driven by Playwright).

The page must load without a console error or a failed request, every image must decode
(``naturalWidth > 0``), and every section must hold something. The checks themselves are
tested: a copy of the report with one image broken, and one with a script that logs an
error, must fail them.

Chromium is Debian's ``chromium`` package (``.ci/run`` installs it). Where it is missing
the tests are skipped, except under CI (``CI`` set), where that is a failure.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

import bayes_scalerl as bs
from bayes_scalerl.report import write_report

playwright_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    if os.environ.get("CI"):
        raise RuntimeError("CI runs the browser tests: install Debian's chromium package (.ci/run does)")
    pytest.skip("no chromium on this machine (apt-get install chromium)", allow_module_level=True)

#: Flags for a root user on a machine with a closed network (no sandbox, no background calls).
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

#: Run in the page: broken images, and sections (an ``h2`` up to the next one) with nothing in them.
PAGE_CHECKS = """() => {
  const images = Array.from(document.images);
  const broken = images.filter(im => !im.complete || im.naturalWidth === 0)
    .map(im => im.alt || im.src.slice(0, 40));
  const empty = [];
  for (const h of document.querySelectorAll('h2')) {
    let n = h.nextElementSibling, text = '', media = 0;
    while (n && n.tagName !== 'H2') {
      if (!['SCRIPT', 'STYLE'].includes(n.tagName)) {
        text += n.textContent.trim();
        media += n.querySelectorAll('img, table, li').length + (['IMG', 'TABLE'].includes(n.tagName) ? 1 : 0);
      }
      n = n.nextElementSibling;
    }
    if (!text && !media) empty.push(h.textContent);
  }
  const missing = Array.from(document.querySelectorAll('a[href^="#"]'))
    .map(a => a.getAttribute('href').slice(1)).filter(id => !document.getElementById(id));
  return {images: images.length, broken, empty, missing,
          sections: Array.from(document.querySelectorAll('h2')).map(h => h.textContent)};
}"""


def open_report(html: Path, screenshot: Path | None = None) -> dict:
    """Load ``html`` in headless Chromium; what the page checks found, console errors included."""
    errors: list[str] = []
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.on(
                "console",
                lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None,
            )
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url[:60]}"))
            page.goto(html.resolve().as_uri(), wait_until="load")
            found = page.evaluate(PAGE_CHECKS)
            if screenshot is not None:
                page.screenshot(path=str(screenshot))
        finally:
            browser.close()
    return {**found, "errors": errors}


def problems(found: dict) -> list[str]:
    """What makes a loaded report fail: console errors, broken images, empty sections, dead links."""
    out = list(found["errors"])
    out += [f"broken image: {b}" for b in found["broken"]]
    out += [f"empty section: {s}" for s in found["empty"]]
    out += [f"link to a missing section: #{m}" for m in found["missing"]]
    return out


@pytest.fixture(scope="module")
def report_html(demo_fit, tmp_path_factory) -> Path:
    """The demo fit's report with forecasts, comparisons and one run marked not converged (rank plots)."""
    fitdir = tmp_path_factory.mktemp("browser") / "demo-out"
    bs.write_fit_folder(demo_fit, fitdir, predict=[32000.0])
    bs.compare(demo_fit).to_csv(fitdir / "comparisons.csv", index=False)
    diag = pd.read_csv(fitdir / "diagnostics.csv")
    diag.loc[0, "converged"] = False
    diag.to_csv(fitdir / "diagnostics.csv", index=False)
    return write_report(fitdir)["html"]


def test_report_loads_cleanly_in_chromium(report_html):
    shot = report_html.parent / "report-screenshot.png"
    found = open_report(report_html, screenshot=shot)
    assert problems(found) == []
    assert found["sections"][0] == "Answers"
    for section in (
        "Runs",
        "Curves",
        "Forest plot",
        "Diagnostics",
        "Rank plots of the runs that did not converge",
    ):
        assert section in found["sections"], section
    assert found["images"] == 4  # curves, forest, linearised, rank
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 20_000
    keep = os.environ.get("BAYES_SCALERL_SCREENSHOTS")
    if keep:  # for a person to look at (CI keeps none)
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / "report-first-screen.png")


def test_a_broken_image_fails_the_check(report_html, tmp_path):
    text = report_html.read_text(encoding="utf-8")
    first = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]{200})', text)
    assert first is not None
    broken = text.replace(first.group(1), "A" * 200, 1)  # the PNG's header and first chunk destroyed
    (tmp_path / "report.html").write_text(broken, encoding="utf-8")
    found = open_report(tmp_path / "report.html")
    assert [p for p in problems(found) if p.startswith("broken image")] == ["broken image: Curves"]


def test_a_console_error_and_an_empty_section_fail_the_check(report_html, tmp_path):
    text = report_html.read_text(encoding="utf-8")
    text = text.replace("</main>", '<h2 id="x">Empty</h2><script>console.error("boom")</script></main>', 1)
    (tmp_path / "report.html").write_text(text, encoding="utf-8")
    found = problems(open_report(tmp_path / "report.html"))
    assert "console error: boom" in found
    assert "empty section: Empty" in found
