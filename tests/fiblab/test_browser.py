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


def test_wait_idle_waits_for_every_cell_of_a_run_all(jupyter):
    """`wait_idle` returns only when no cell is queued or running.  The status bar says Idle for
    a moment between two cells of a Run All (the kernel goes idle after each); a test that took
    that for the end clicked a panel while a later cell still ran (notebook 02's flake check,
    2026-12-06).  The first cell here says idle itself, then keeps the kernel for 6 s: the
    status bar shows Idle while both cells still run, deterministically."""
    import json
    import re
    import time

    from playwright.sync_api import expect

    cells = [
        "k = get_ipython().kernel\n"
        "k._publish_status('idle', 'shell', k.get_parent('shell'))  # as between two cells\n"
        "import time; time.sleep(6); print('first cell done')",
        "print('second cell done')",
    ]
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "source": s,
                "metadata": {},
                "outputs": [],
                "execution_count": None,
            }
            for s in cells
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (jupyter["root"] / "idle_between_cells.ipynb").write_text(json.dumps(nb))
    with B.notebook(jupyter, "idle_between_cells.ipynb") as page:
        B.run_all(page, ".jp-InputPrompt:has-text('[*]')")  # retried if the kernel dropped it
        idle = page.locator(".jp-StatusBar-TextItem").filter(has_text=re.compile(r"\| Idle$"))
        expect(page.locator(".jp-InputPrompt", has_text="[*]")).to_have_count(2)  # both queued
        expect(idle).to_be_visible(timeout=5_000)  # Idle shown while the first cell runs …
        started = time.monotonic()
        B.wait_idle(page)  # … and not taken for the end
        outputs = page.locator(".jp-OutputArea-output")
        expect(outputs).to_have_text(["first cell done", "second cell done"], timeout=2_000)
        assert time.monotonic() - started > 2, "returned while the first cell still slept"
