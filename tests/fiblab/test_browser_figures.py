"""A real browser shows the notebooks' figures at the size they were drawn: in notebooks 01 (the
coverage explorer) and 02 (the probe panel's α plot), run top to bottom in headless Chromium,
every figure image (CSS class ``fib-figure``) is displayed at exactly its PNG's pixel size — the
α plot used to be a 208×168 px PNG stretched 4.6× by its box — and no cell printed an error.
A screenshot lands in tests/artifacts/ when it fails (tests/browser_support.py)."""

import browser_support as B
import pytest

# ≈ 1–2 min on 2 cores: with the other long tests (pytest -m slow), outside the default suite
pytestmark = [*B.REQUIRES, pytest.mark.slow]


jupyter = B.jupyter_fixture()

SIZES = """els => els.map(e => {
    const r = e.getBoundingClientRect();
    return [e.naturalWidth, e.naturalHeight, r.width, r.height];
})"""


@pytest.mark.parametrize(
    "notebook, marker",
    [
        ("01_coverage_explorer.ipynb", ".fib-coverage-explorer img.fib-figure"),
        ("02_retrieval_probes.ipynb", ".fib-probe-panel img.fib-figure"),
    ],
)
def test_figures_are_shown_at_their_pixel_size(jupyter, notebook, marker):
    from playwright.sync_api import expect

    with B.notebook(jupyter, notebook) as page:
        B.run_all(page, ".jp-OutputArea-output")
        figure = page.locator(marker).first
        expect(figure).to_be_visible(timeout=120_000)
        B.wait_idle(page)
        figure.scroll_into_view_if_needed()
        sizes = page.locator("img.fib-figure").evaluate_all(SIZES)
        shown = [s for s in sizes if s[2] > 0]
        assert shown, "no figure is displayed"
        for nat_w, nat_h, w, h in shown:
            assert nat_w >= 600 and nat_h >= 250  # drawn large enough to read
            assert (w, h) == pytest.approx((nat_w, nat_h), abs=0.5)  # shown 1:1, not stretched
        B.assert_no_error_output(page)
