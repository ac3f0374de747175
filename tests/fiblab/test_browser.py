"""A real browser: JupyterLab on 127.0.0.1, the coverage explorer opened in headless Chromium
(Playwright) on its own kernel with no "Select Kernel" dialog (issue 28 item 8), all cells run, one α slider moved with the keyboard, and the displayed union count
changes to the value `fiblab.ui.coverage_explore.explore` computes for the new α.  A screenshot lands in
tests/artifacts/ when it fails.  Skipped (with the reason) only without Chromium or Playwright.
The server, the browser and the checks are shared with the other notebooks' browser tests
(tests/browser_support.py)."""

import browser_support as B

pytestmark = B.REQUIRES
jupyter = B.jupyter_fixture()
NOTEBOOK = "01_coverage_explorer.ipynb"
LAYER = 3  # the slider the test moves
STEP = 0.01  # fiblab.ui.coverage.ALPHA_STEP


def _expected_union(presses: int) -> tuple[float, int]:
    from fiblab.ui.coverage_explore import explore
    from lab.ladder.schedules import layer_alphas

    alphas = layer_alphas("stagger", 16)
    alphas[LAYER] = round(alphas[LAYER] + presses * STEP, 2)
    return alphas[LAYER], explore(alphas)["union"]


def test_slider_changes_the_union_count_in_a_real_browser(jupyter):
    from playwright.sync_api import expect

    start = _expected_union(0)[1]
    presses = next(k for k in range(1, 20) if _expected_union(k)[1] != start)
    alpha, want = _expected_union(presses)
    with B.notebook(jupyter, NOTEBOOK) as page:
        B.run_all(page, ".fib-union .fib-union-count")
        assert page.fib_dialogs == [], page.fib_dialogs  # first open: the kernel starts itself
        count = page.locator(".fib-union .fib-union-count")
        expect(count).to_have_text(str(start), timeout=30_000)
        handle = page.locator(".fib-alpha .noUi-handle").nth(LAYER)
        handle.scroll_into_view_if_needed()
        handle.focus()
        for _ in range(presses):
            handle.press("ArrowRight")
        readout = page.locator(".fib-alpha .widget-readout").nth(LAYER)
        expect(readout).to_have_text(f"{alpha:.3f}", timeout=20_000)
        expect(count).to_have_text(str(want), timeout=30_000)
        expect(page.locator(".fib-error")).to_have_text("")
        B.wait_idle(page)
        B.assert_no_error_output(page)
