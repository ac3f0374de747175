"""A real browser on notebook 03 (issue 14, "What the tests must show"): all cells run (the smoke
cell trains `tiny` to the end), then a longer tiny run is launched from the form, stopped (no
ETA left on screen) and resumed (the stopped message gone); the kernel is restarted while it
trains — the run keeps running — and the panel of the re-run first cell lists it, and its
attach button fills the form with the run's settings and follows it, with no broken image.
Screenshots of each stage land in tests/artifacts/ (the last one on failure)."""

import os

import browser_support as B
import pytest

from fiblab.jobs import launch as LA

# ≈ 1–2 min on 2 cores: with the other long tests (pytest -m slow), outside the default suite
pytestmark = [*B.REQUIRES, pytest.mark.slow]
jupyter = B.jupyter_fixture(extra_env={"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""})
NOTEBOOK = "03_train_lm.ipynb"
RUN, STEPS = "browser-run", 20_000  # a tiny run long enough to stop, restart and attach
OVERRIDES = "eval_every=100\neval_light_tokens=1024\nckpt_every=1000\neval_batch=64"


def _broken_images(page) -> int:
    """Images shown in the notebook that failed to load (a broken-image icon)."""
    return page.evaluate(
        "() => [...document.querySelectorAll('.jp-Notebook img')]"
        ".filter(i => i.offsetParent !== null && i.complete && i.naturalWidth === 0).length"
    )


def _shot(page, stage):
    B.ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(B.ARTIFACTS / f"browser-03-{stage}.png"), full_page=True)


def test_launch_stop_resume_and_a_kernel_restart_in_a_real_browser(jupyter, tmp_path_factory):
    from playwright.sync_api import expect

    from lab.data.prepared import prepare

    runs = jupyter["env"]["FIBLAB_RUNS"]
    shared = tmp_path_factory.getbasetemp() / "fiblab-tiny-data"  # tokenised once per session
    prepare("bible", vocab_size=512, cache_dir=str(shared))
    os.makedirs(runs, exist_ok=True)
    if not os.path.exists(os.path.join(runs, "data")):
        os.symlink(shared, os.path.join(runs, "data"))
    try:
        with B.notebook(jupyter, NOTEBOOK) as page:
            B.run_all(page, ".fib-train-panel")
            panel = page.locator(".fib-train-panel")
            state = panel.locator(".fib-run-status .fib-run-state")
            expect(state).to_have_text("done", timeout=300_000)  # the smoke cell's tiny run
            B.wait_idle(page)
            expect(panel.locator(".fib-nproc-note")).to_contain_text("no GPU")

            # launch a longer run from the form, stop it, resume it
            panel.locator(".fib-train-steps input").fill(str(STEPS))
            panel.locator(".fib-train-steps input").press("Tab")
            panel.locator(".fib-train-name input").fill(RUN)
            panel.locator(".fib-train-name input").press("Tab")
            panel.locator(".fib-train-overrides textarea").fill(OVERRIDES)
            panel.locator(".fib-train-overrides textarea").press("Tab")
            panel.locator(".fib-train-launch").click()
            expect(panel.locator(".fib-run-status")).to_contain_text(RUN, timeout=30_000)
            expect(state).to_have_text("running", timeout=240_000)
            expect(panel.locator(".fib-run-eta")).to_contain_text("ETA", timeout=60_000)
            _shot(page, "running")
            panel.locator(".fib-train-stop").click()
            expect(state).to_have_text("stopped", timeout=120_000)
            expect(panel.locator(".fib-run-status")).to_contain_text("stopped by request")
            expect(panel.locator(".fib-run-eta")).to_have_count(0)
            expect(panel.locator(".fib-run-stats")).not_to_contain_text("ETA")
            _shot(page, "stopped")
            panel.locator(".fib-train-resume").click()
            expect(panel.locator(".fib-run-status")).not_to_contain_text(
                "stopped by request", timeout=20_000
            )
            expect(state).to_have_text("running", timeout=240_000)
            expect(panel.locator(".fib-error")).to_have_text(["", ""])  # list's, panel's

            # a kernel restart while it trains: the run goes on
            B.restart_kernel(page)
            h = LA.attach(RUN, runs)
            assert h.is_alive() and LA.state(h) == "running"
            _shot(page, "after-restart")

            # the first cell again: a fresh panel lists the run; attach fills the form
            page.locator(".jp-Notebook .jp-Cell").nth(1).locator(".jp-InputArea-editor").click()
            page.keyboard.press("Shift+Enter")
            row = page.locator(".fib-runlist-row", has_text=RUN)
            expect(row).to_contain_text("running", timeout=60_000)
            fresh = page.locator(".fib-train-panel")
            expect(fresh.locator(".fib-train-name input")).to_have_value("", timeout=10_000)
            row.get_by_role("button", name="attach").click()
            expect(fresh.locator(".fib-train-name input")).to_have_value(RUN, timeout=30_000)
            expect(fresh.locator(".fib-train-steps input")).to_have_value(str(STEPS))
            expect(fresh.locator(".fib-train-preset select")).to_have_value("tiny")
            expect(fresh.locator(".fib-train-overrides textarea")).to_have_value(OVERRIDES)
            expect(fresh.locator(".fib-run-status .fib-run-state")).to_have_text("running")
            expect(fresh.locator(".fib-run-curves")).to_be_visible(timeout=60_000)
            assert _broken_images(page) == 0
            _shot(page, "attached")
            fresh.locator(".fib-train-stop").click()
            expect(fresh.locator(".fib-run-status .fib-run-state")).to_have_text(
                "stopped", timeout=120_000
            )
            B.wait_idle(page)
            B.assert_no_error_output(page)
            assert _broken_images(page) == 0
    finally:
        for h in LA.list_runs(runs):  # no training process outlives the test
            LA.terminate(h, timeout=5)
