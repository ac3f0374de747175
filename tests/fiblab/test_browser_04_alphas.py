"""A real browser on notebook 04 (learned-α trajectories), and a proof that the shared error check
sees errors.

Notebook 04 reads a fixture store (tests/fixture_store.py, as tests/fiblab/test_notebooks.py seeds it):
smoke-learned-s0 (an LM run, 4 layers) and two marked probes (2 layers each).  All cells run with
no error output; the caption under the α plot counts 4 + 2 + 2 = 8 lines for the three runs; a
plain click on the LM run in the list shows it alone (4 lines) and the figure is redrawn; the
multi-select hint and the tolerance readout are visible inside the output area, even at 1100 px.

`browser_support.assert_no_error_output` is what every notebook's browser test relies on, so a
throwaway notebook whose cells write to stderr and raise must make it fail, naming both.
"""

import json

import browser_support as B
import pytest
from fixture_store import smoke_store

pytestmark = [*B.REQUIRES, pytest.mark.slow]  # ≈ 46 s: the default suite keeps 01's
NOTEBOOK = "04_alpha_trajectories.ipynb"
LM = "smoke-learned-s0"


@pytest.fixture(scope="module")
def jupyter(tmp_path_factory):
    d = tmp_path_factory.mktemp("jlab04")
    store = smoke_store(str(d / "alphas.db"))  # written before the server (and its kernels) start
    with B.jupyter_server(d, {"FIBLAB_STORE": store}) as server:
        yield server


def _inside(inner: dict, outer: dict) -> bool:
    return (
        inner["x"] >= outer["x"] - 1
        and inner["x"] + inner["width"] <= outer["x"] + outer["width"] + 1
    )


def test_picking_a_run_changes_the_lines_plotted(jupyter):
    from playwright.sync_api import expect

    with B.notebook(jupyter, NOTEBOOK, viewport=(1100, 1100)) as page:
        B.run_all(page, ".fib-alpha-explorer .fib-alpha-lines")
        lines = page.locator(".fib-alpha-explorer .fib-alpha-lines")
        expect(lines).to_have_attribute("data-lines", "8", timeout=30_000)  # 4 + 2 + 2
        expect(lines).to_have_attribute("data-runs", "3")
        expect(lines).to_contain_text("plotted: 3 runs, 8 α lines")
        image = page.locator(".fib-alpha-explorer img").first
        expect(image).to_be_visible()
        before = image.get_attribute("src")

        hint = page.locator(".fib-alpha-explorer .fib-runs-hint")
        expect(hint).to_be_visible()
        expect(hint).to_contain_text("Ctrl-click")
        area = page.locator(".fib-alpha-explorer").bounding_box()
        readout = page.locator(".fib-alpha-explorer .fib-tolerance .widget-readout")
        expect(readout).to_be_visible()
        expect(readout).to_have_text("0.050")
        assert _inside(readout.bounding_box(), area), (readout.bounding_box(), area)

        option = page.locator(".fib-alpha-explorer select option").filter(has_text=LM)
        option.click()  # a plain click: this run alone
        expect(lines).to_have_attribute("data-lines", "4", timeout=30_000)
        expect(lines).to_have_attribute("data-runs", "1")
        expect(lines).to_contain_text("plotted: 1 run, 4 α lines")
        expect(page.locator(".fib-alpha-explorer .fib-inert-sentence")).to_contain_text(
            "0 of 1 learned-α run stays within 0.05 of its init"
        )
        assert image.get_attribute("src") != before  # the figure was redrawn
        expect(page.locator(".fib-alpha-explorer .fib-error")).to_have_text("")
        B.wait_idle(page)
        B.assert_no_error_output(page)


def _throwaway(path) -> None:
    """A notebook whose second cell writes to stderr and whose third raises."""
    cells = [
        "print('all fine here')",
        "import sys\nprint('planted warning on stderr', file=sys.stderr)",
        "raise ValueError('planted error for the check')",
    ]
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {},
                "source": c,
                "outputs": [],
                "execution_count": None,
            }
            for c in cells
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(nb), encoding="utf-8")


def test_the_error_check_catches_a_cell_that_raises(jupyter):
    from playwright.sync_api import expect

    name = "zz_raises.ipynb"
    _throwaway(jupyter["root"] / name)
    with B.notebook(jupyter, name) as page:
        B.run_all(page, ".jp-OutputArea-output:has-text('planted error for the check')")
        expect(
            page.locator(".jp-OutputArea-output").filter(has_text="all fine here")
        ).to_be_visible()
        B.wait_idle(page)
        errs = B.error_outputs(page)
        assert any("planted error for the check" in e for e in errs), errs
        assert any("planted warning on stderr" in e for e in errs), errs
        assert not any("all fine here" in e for e in errs), errs  # stdout is not an error
        with pytest.raises(AssertionError, match="planted error for the check") as caught:
            B.assert_no_error_output(page)
        assert "planted warning on stderr" in str(caught.value)
