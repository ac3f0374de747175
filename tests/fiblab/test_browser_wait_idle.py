"""The browser helper's `wait_idle` (tests/browser_support.py) in a real JupyterLab: it returns
only when every cell of a Run All has run.  A server of its own: a server another test used
restores that test's notebook beside this one (its outputs then matched this test's locators)."""

import browser_support as B

pytestmark = B.REQUIRES
jupyter = B.jupyter_fixture()


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
