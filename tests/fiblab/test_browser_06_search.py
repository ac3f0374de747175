"""Notebook 06 in a real browser (JupyterLab + headless Chromium, tests/browser_support.py): all
cells run (the smoke cell launches a 6-trial search and waits for it); then, with the buttons, a
two-objective search of 8 trials is launched → the trials counter reaches 8 / 8, the best-so-far,
Pareto-front and α figures load (decoded, non-zero size), the leaders' table lists the stagger;
no cell printed an error.  A screenshot of the end lands in $TMPDIR (browser-06-search.png) and
in tests/artifacts/."""

import os
import tempfile

import browser_support as B
import pytest

# ≈ 80 s on 2 loaded cores (a kernel loads torch, two searches run): outside the default suite
pytestmark = [*B.REQUIRES, pytest.mark.slow]
jupyter = B.jupyter_fixture(extra_env={"OMP_NUM_THREADS": "1"})
NOTEBOOK = "06_schedule_search.ipynb"
LONG = 120_000  # ms


def _set(page, cls: str, value: str) -> None:
    box = page.locator(f".fib-search-panel .{cls} input").first
    box.scroll_into_view_if_needed()
    box.fill(value)
    box.press("Tab")  # text boxes sync on blur


def _figures_loaded(page) -> list[tuple[int, int]]:
    """(naturalWidth, naturalHeight) of every shown figure of the panel."""
    return page.evaluate(
        """() => [...document.querySelectorAll('.fib-search-panel img.fib-figure')]
            .filter(i => i.style.display !== 'none' && i.offsetParent !== null)
            .map(i => [i.complete ? i.naturalWidth : 0, i.complete ? i.naturalHeight : 0])"""
    )


def test_a_search_launched_in_the_browser_runs_to_its_trials(jupyter):
    from playwright.sync_api import expect

    with B.notebook(jupyter, NOTEBOOK, viewport=(1500, 2600)) as page:  # the panel fits
        B.run_all(page, ".fib-search-panel", timeout_ms=60_000)
        panel = page.locator(".fib-search-panel").first
        state = panel.locator(".fib-search-status .fib-search-state")
        count = panel.locator(".fib-search-count")
        expect(state).to_have_text("done", timeout=LONG)  # the smoke cell's search
        expect(count).to_contain_text("6 / 6")
        B.wait_idle(page)
        expect(panel.locator(".fib-runlist-row")).to_contain_text("linear-distinct-s0")

        _set(page, "fib-search-trials", "8")
        _set(page, "fib-search-name", "browser")
        panel.locator(".fib-search-objectives select").select_option(["distinct", "band"])
        panel.locator(".fib-search-launch").click()
        expect(count).to_contain_text("8 / 8", timeout=LONG)
        expect(state).to_have_text("done", timeout=LONG)
        expect(panel.locator(".fib-search-best")).to_contain_text("band")
        expect(panel.locator(".fib-search-leaders")).to_contain_text("stagger")
        expect(panel.locator(".fib-search-drawn")).to_contain_text("show 8 completed trials")
        errors = panel.locator(".fib-error")
        for i in range(errors.count()):
            expect(errors.nth(i)).to_have_text("")
        page.wait_for_function(
            """() => [...document.querySelectorAll('.fib-search-panel img.fib-figure')]
                .filter(i => i.offsetParent !== null && i.complete && i.naturalWidth > 0)
                .length >= 3""",
            timeout=30_000,
        )
        sizes = _figures_loaded(page)
        assert len(sizes) == 3 and all(w > 100 and h > 100 for w, h in sizes), sizes
        row = panel.locator(".fib-runlist-row").filter(has_text="browser")
        expect(row).to_contain_text("done", timeout=30_000)
        B.assert_no_error_output(page)
        for where in (os.environ.get("TMPDIR") or tempfile.gettempdir(), str(B.ARTIFACTS)):
            os.makedirs(where, exist_ok=True)
            panel.screenshot(path=os.path.join(where, "browser-06-search.png"))
