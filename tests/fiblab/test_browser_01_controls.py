"""A real browser on notebook 01: the controls that used to mislead (issue 14, item 8).

At L=8, K=25 the linear stagger attends 75 distinct distances (the paper's "19 → about 75").
Choosing "custom" in the dropdown keeps 75 (the α typed into the box are rounded to 4 digits,
which gives 74: the explorer keeps the exact values); pressing → on a slider switches the
dropdown to "custom" and "reset to schedule" brings back "linear stagger" and 75; the power-of-2
base disables the K box and says why beside it.  The counts are `fiblab.ui.coverage_explore.explore`'s
for the same α (tests/fiblab/test_coverage_controls.py checks them by brute force).
"""

import browser_support as B
import pytest

pytestmark = B.REQUIRES
jupyter = B.jupyter_fixture()
NOTEBOOK = "01_coverage_explorer.ipynb"
STEP = 0.01  # fiblab.ui.coverage.ALPHA_STEP


def _set_int(page, cls: str, value: int) -> None:
    box = page.locator(f".fib-coverage-explorer .{cls} input")
    box.fill(str(value))
    box.press("Enter")


@pytest.mark.slow  # 20 s; notebook 01 in a real browser stays in the default suite (test_browser.py)
def test_custom_keeps_75_a_moved_slider_says_custom_and_pow2_disables_k(jupyter):
    from playwright.sync_api import expect

    from fiblab.ui.coverage_explore import explore
    from lab.ladder.schedules import layer_alphas

    moved = layer_alphas("stagger", 8)
    moved[2] = round(moved[2] + STEP, 2)
    want_moved = explore(moved, rungs=25)["union"]
    assert want_moved != 75

    with B.notebook(jupyter, NOTEBOOK) as page:
        B.run_all(page, ".fib-union .fib-union-count")
        count = page.locator(".fib-union .fib-union-count")
        expect(count).to_have_text("133", timeout=30_000)
        schedule = page.locator(".fib-coverage-explorer .fib-schedule select")
        shown = schedule.locator("option:checked")
        _set_int(page, "fib-layers", 8)
        expect(page.locator(".fib-alpha")).to_have_count(8, timeout=30_000)
        _set_int(page, "fib-rungs", 25)
        expect(count).to_have_text("75", timeout=30_000)

        schedule.select_option(label="custom")
        custom = page.locator(".fib-coverage-explorer .fib-custom-alphas input")
        expect(custom).to_be_enabled(timeout=20_000)
        expect(custom).to_have_value("0.5, 0.6429, 0.7857, 0.9286, 1.071, 1.214, 1.357, 1.5")
        B.wait_idle(page)
        expect(count).to_have_text("75")  # not 74

        schedule.select_option(label="linear stagger")
        expect(custom).to_be_disabled(timeout=20_000)
        B.wait_idle(page)
        handle = page.locator(".fib-alpha .noUi-handle").nth(2)
        handle.scroll_into_view_if_needed()
        handle.focus()
        handle.press("ArrowRight")
        expect(count).to_have_text(str(want_moved), timeout=30_000)
        expect(shown).to_have_text("custom")
        page.locator(".fib-coverage-explorer button").filter(has_text="reset to schedule").click()
        expect(shown).to_have_text("linear stagger", timeout=20_000)
        expect(count).to_have_text("75", timeout=30_000)

        rungs = page.locator(".fib-coverage-explorer .fib-rungs input")
        expect(rungs).to_be_enabled()
        page.locator(".fib-coverage-explorer .fib-base select").select_option(label="power of 2")
        expect(rungs).to_be_disabled(timeout=20_000)
        note = page.locator(".fib-coverage-explorer .fib-rungs-note")
        expect(note).to_contain_text("K not used")
        expect(note).to_contain_text("the power-of-2 base is 1, 2, 4, … < T (10 rungs)")
        expect(page.locator(".fib-error")).to_have_text("")
        B.wait_idle(page)
        B.assert_no_error_output(page)
