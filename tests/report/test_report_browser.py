"""The report page opens in headless Chromium without a console error, and the viewer renders every tick.

How errors are caught: Chromium runs with `--enable-logging=stderr --v=0`, which prints every console
message, uncaught exception (sync or in a promise) and CSP violation as an `INFO:CONSOLE` line on
stderr; the page itself logs nothing, so any such line is a failure. The negative tests prove the
method catches a syntax error, an error thrown asynchronously after load, and a script injected past
the page's Content-Security-Policy. `--dump-dom` after a virtual-time budget returns the DOM the
viewer built, which shows what rendered.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from report_runs import HOSTILE

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
                 if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (Debian: apt-get install chromium; .ci/run does it)")


def open_page(path: Path, fragment: str, profile: Path) -> tuple[str, list[str]]:
    """(the DOM after the page ran, the console lines) of `path#fragment` in a fresh headless Chromium."""
    url = path.resolve().as_uri() + (f"#{fragment}" if fragment else "")
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
           "--disable-background-networking", "--no-first-run", "--disable-extensions", "--disable-sync",
           "--enable-logging=stderr", "--v=0", "--virtual-time-budget=15000", "--dump-dom", url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"chromium exited {proc.returncode}: {proc.stderr[-2000:]}"
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    return proc.stdout, console


def _ticks(dom: str) -> list[int]:
    return [int(x) for x in re.findall(r'<tr class="tick[^"]*" data-tick="(\d+)"', dom)]


@pytest.mark.parametrize(("name", "body", "expect"), [
    ("syntax", "<script>function (</script>", "SyntaxError"),
    ("async", "<script>document.body.dataset.ready = '1';"
              "Promise.resolve().then(() => { undefinedFunction(); });</script>", "undefinedFunction"),
])
def test_the_method_catches_javascript_errors(tmp_path, name, body, expect):
    page = tmp_path / f"{name}.html"
    page.write_text(f"<!DOCTYPE html><html><body><p>broken</p>{body}</body></html>")
    _, console = open_page(page, "", tmp_path / "profile")
    assert any(expect in line for line in console), f"a deliberate {name} error went unnoticed: {console}"


def test_the_page_blocks_an_injected_script(single_report, tmp_path):
    html = single_report.html.read_text(encoding="utf-8")
    page = tmp_path / "injected.html"
    page.write_text(html.replace("</body>", '<script>document.title = "pwned";</script></body>'), encoding="utf-8")
    dom, console = open_page(page, "", tmp_path / "profile")
    assert any("Content Security Policy" in line for line in console), console
    assert "<title>pwned</title>" not in dom
    assert 'data-viewer="ready"' in dom  # the page's own script still ran


def test_the_report_opens_without_console_errors_and_renders_every_tick(single_report, analyzed, tmp_path):
    dom, console = open_page(single_report.html, "traj=0&tick=3", tmp_path / "profile")
    assert console == [], f"console output: {console}"
    assert 'data-viewer="ready"' in dom, "the viewer did not finish rendering"
    run = analyzed[0]
    assert _ticks(dom) == [s.step_number for s in run.trajectories[0].steps]
    select = dom.split('id="rg-traj"')[1].split("</select>")[0]
    options = re.findall(r'<option value="(\d+)"[^>]*>([^<]*)</option>', select)
    assert [o[1].split(" · ")[0] for o in options] == [t.trajectory_id for t in run.trajectories]
    detail = dom.split('data-detail="3"')[1]
    assert '<mark class="reasoning">' in detail  # the reasoning of the opened tick is highlighted
    assert "Parsed action" in detail and "Reward" in detail and "tick prompt" in detail


def test_two_runs_errors_filter_and_hostile_text(compare_report, analyzed, tmp_path):
    hostile = analyzed[1].trajectories[0]
    errors = [s.step_number for s in hostile.steps if not s.action.success or s.format_errors]
    dom, console = open_page(compare_report.html, "run=1&traj=0&filter=errors&tick=1", tmp_path / "profile")
    assert console == [], f"console output: {console}"
    assert 'data-viewer="ready"' in dom
    assert 'id="rg-run"' in dom and dom.count("<option", 0, dom.index('id="rg-traj"')) == 2
    assert _ticks(dom) == errors == [1, 2]
    assert f"showing {len(errors)} of {len(hostile.steps)} ticks" in dom
    detail = dom.split('data-detail="1"')[1]
    escaped = HOSTILE.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    assert escaped in detail, "the hostile reply is not shown as text"
    assert "<script>alert(1)" not in dom and "<img src" not in dom
    assert "timed out" in dom  # the episode's error
