"""The page in a real browser: headless chromium renders it, and the pictures are there.

Debian's chromium (``.ci/run`` installs it; ``HERON_CHROMIUM`` may name
another) takes a screenshot of each page and dumps the DOM after rendering.
The screenshots are kept under ``$HERON_TEST_ARTEFACTS/report`` (else the
test's temporary folder); the test prints where. Without chromium the test
skips and says why.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

#: Where Debian puts its chromium, then what PATH finds.
_CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser")
_PNG = b"\x89PNG\r\n\x1a\n"


def _chromium() -> str | None:
    named = os.environ.get("HERON_CHROMIUM")
    if named:
        return named
    for candidate in _CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    return None


def _run(chromium: str, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            chromium,
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            "--disable-dev-shm-usage",
            *arguments,
        ],
        capture_output=True,
        timeout=180,
        check=False,
    )


def test_the_page_renders_in_headless_chromium(built, request, tmp_path):
    chromium = _chromium()
    if chromium is None:
        pytest.skip(
            "chromium not found (/usr/bin/chromium, or HERON_CHROMIUM): the headless-browser"
            " test of heron report needs Debian's chromium (.ci/run installs it as root)"
        )
    name = request.node.callspec.id
    folder = Path(os.environ.get("HERON_TEST_ARTEFACTS") or tmp_path) / "report"
    folder.mkdir(parents=True, exist_ok=True)
    page = folder / f"{name}.html"
    page.write_text(built.html)
    screenshot = folder / f"{name}.png"
    screenshot.unlink(missing_ok=True)
    shot = _run(chromium, f"--screenshot={screenshot}", "--window-size=1400,2000", page.as_uri())
    assert shot.returncode == 0, shot.stderr.decode(errors="replace")[-2000:]
    data = screenshot.read_bytes()
    assert data.startswith(_PNG)
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1400, 2000)
    # A rendered page, not a blank one: a screenshot of a white page compresses to
    # a few kilobytes.
    assert len(data) > 40_000

    dom = _run(chromium, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr.decode(errors="replace")[-2000:]
    rendered = dom.stdout.decode()
    graph = re.search(r'<div class="graph" id="graph">\s*<svg\b[^>]*>', rendered)
    assert graph is not None, "the graph's SVG is not in the rendered page"
    # The page's script ran: it sized the graph in pixels (dot writes points, "pt").
    assert re.search(r'\swidth="[\d.]+"', graph.group(0)), graph.group(0)
    assert 'width="' in built.html and re.search(r'<svg width="[\d.]+pt"', built.html)
    nodes = re.findall(r'class="node fusion', rendered)
    assert len(nodes) == len(built.report.fusion_nodes)
    memory = re.search(r'<svg id="memory-picture"[^>]*data-peak-bytes="(\d+)"', rendered)
    assert memory is not None, "the memory picture is not in the rendered page"
    assert int(memory.group(1)) == built.gathered.compiled.assignment.total_bytes
    assert rendered.count('class="buffer"') == len(built.report.memory.blocks)
    with request.config.pluginmanager.get_plugin("capturemanager").global_and_fixture_disabled():
        print(f"\nheron report screenshot: {screenshot}")
