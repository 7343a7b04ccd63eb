"""The web page in a real browser: Debian's chromium driven by playwright, against `semworld serve`.

Upload a clip, watch the job finish, check the observed and predicted frames, edit a predicted state and
re-roll the future from it. Saves a screenshot (into $SEMWORLD_SCREENSHOT_DIR when set, else tmp_path).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.api.conftest import REAL_CLIP

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


@pytest.fixture
def browser_page():
    if not CHROMIUM.exists():
        pytest.skip("no Chromium at /usr/bin/chromium (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            yield page
        finally:
            browser.close()


def test_upload_predict_and_reroll_in_the_browser(start_server, browser_page, tmp_path):
    server = start_server(FAKE_RENDER_DELAY="0.1")
    page = browser_page
    page.set_default_timeout(30_000)
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))

    page.goto(server.url + "/")
    assert page.title().startswith("semworld")
    # Every status line the page shows, in order (to see "running" while the job runs).
    page.evaluate("""() => { window.statuses = [];
      new MutationObserver(() => window.statuses.push(document.querySelector('#status').textContent))
        .observe(document.querySelector('#status'), {childList: true, characterData: true, subtree: true}); }""")
    page.wait_for_selector(f"#sample option[value='/v1/samples/{REAL_CLIP.name}']", state="attached")

    page.set_input_files("#file", str(REAL_CLIP))
    page.fill("#horizon", "3")
    page.fill("#stride", "4")
    page.click("#predict-btn")

    page.wait_for_function("document.querySelectorAll('#predicted .frame img').length === 3")
    assert page.is_visible("#progress")
    assert page.locator("#stages .stage").count() == 5
    assert page.locator("#job-state").inner_text() == "(succeeded)"
    assert page.locator("#observed .frame").count() == 4
    # every frame is a decoded image, not a broken link
    page.wait_for_function(
        "[...document.querySelectorAll('.frame img')].every(i => i.complete && i.naturalWidth > 0)"
    )
    assert page.locator("#predicted .frame img").first.evaluate("i => [i.naturalWidth, i.naturalHeight]") == [
        32,
        24,
    ]
    observed = page.locator("#observed .frame p.state").all_inner_texts()
    predicted = page.locator("#predicted textarea.state").evaluate_all("els => els.map(e => e.value)")
    assert predicted == [f"next {i} after {observed[-1]}" for i in range(3)]
    assert "predicted 3 states" in page.inner_text("#status")
    statuses = page.evaluate("window.statuses")
    assert any(" running: " in t for t in statuses), statuses  # not "queued" while it runs
    # Cards wrap into rows (no horizontal scrolling); whole states show in the edit boxes.
    assert page.locator("#observed").evaluate("e => e.scrollWidth <= e.clientWidth")
    assert page.locator("#predicted textarea.state").evaluate_all(
        "els => els.every(e => e.scrollHeight <= e.clientHeight + 2)"
    )
    # The forecast plays in a video player, and the outputs download.
    page.wait_for_function("document.querySelector('#video').readyState >= 1")
    assert page.locator("#dl-zip").get_attribute("href").startswith("blob:")
    assert page.locator("#dl-mp4").get_attribute("download").endswith("predicted.mp4")
    icon = page.evaluate("async () => { const r = await fetch('/favicon.ico'); return [r.status, r.headers.get('content-type')]; }")
    assert icon == [200, "image/svg+xml"]

    # What if: edit the second predicted state and re-roll the future from it.
    page.locator("#predicted textarea.state").nth(1).fill("a red ball at the left.")
    page.locator("#predicted button.reroll").nth(1).click()
    page.wait_for_function("document.querySelector('#status').textContent.startsWith('re-rolled')")
    predicted = page.locator("#predicted textarea.state").evaluate_all("els => els.map(e => e.value)")
    assert predicted == [
        f"next 0 after {observed[-1]}",
        "a red ball at the left.",
        "next 0 after a red ball at the left.",
    ]
    assert page.locator("#predicted .frame img").count() == 3
    assert page.locator("#predicted .frame.edited").count() == 1  # the edited state is marked
    assert "edited" in page.locator("#predicted .frame").nth(1).inner_text()

    shots = Path(os.environ.get("SEMWORLD_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / "web-page.png"), full_page=True)
    assert (shots / "web-page.png").stat().st_size > 10_000
    page.set_viewport_size({"width": 390, "height": 844})  # a phone
    assert page.locator("#predicted").evaluate("e => e.scrollWidth <= e.clientWidth")
    page.screenshot(path=str(shots / "web-page-phone.png"), full_page=True)
    assert errors == []
