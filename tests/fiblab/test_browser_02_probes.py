"""Notebook 02 in a real browser (JupyterLab + headless Chromium, tests/browser_support.py): all
cells run (the smoke cell launches a one-cell grid and waits for it); then, with the buttons:
a tiny grid launched → its progress shows, then its row in the results table; a second grid
stopped while a cell trains → "stopped" within seconds with its finished cell kept, and resume
finishes it; a third grid survives a kernel restart → the fresh panel lists it as running,
attach fills the form with its settings, and stop stops it.  Screenshots of each stage land in
tests/artifacts/ (browser-02-*.png; on failure browser-02_retrieval_probes.png)."""

import re
import time

import browser_support as B
import pytest

# ≈ 1–2 min on 2 cores: with the other long tests (pytest -m slow), outside the default suite
pytestmark = [*B.REQUIRES, pytest.mark.slow]
jupyter = B.jupyter_fixture(extra_env={"OMP_NUM_THREADS": "1"})  # one thread per process
NOTEBOOK = "02_retrieval_probes.ipynb"
LONG = 120_000  # ms: cells of a tiny grid on a loaded 2-core machine
# Steps a cell of stages 1 and 2: its training must outlast the panel's 2 s refresh (stage 1
# sees its progress) and a stop's round trip (stage 2 stops its second cell mid-training).  150
# and 400 did not on a Xeon with AMX: a tiny step there takes ≈ 7.5 ms under load, so 150 steps
# trained in ≈ 1.1 s and the progress line went from "building" to "done" between two refreshes
# (1 of 2 flake-check runs).  2000 steps: ≈ 6 s at 3 ms a step, ≈ 60 s at 30 ms.
STEPS = 2000


def _shot(page, stage: str) -> None:
    B.ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(B.ARTIFACTS / f"browser-02-{stage}.png"), full_page=True)


def _set(page, cls: str, value: str) -> None:
    box = page.locator(f".fib-probe-panel .{cls} input").first
    box.scroll_into_view_if_needed()
    box.fill(value)
    box.press("Tab")  # number boxes sync on submit / blur


def _grid(page, seeds: str, steps: int) -> None:
    _set(page, "fib-probe-seeds", seeds)
    _set(page, "fib-probe-steps", str(steps))
    _set(page, "fib-probe-name", "")


def test_launch_stop_resume_and_a_kernel_restart_in_a_real_browser(jupyter):
    from playwright.sync_api import expect

    from fiblab.jobs import probe_launch as PL

    try:
        with B.notebook(jupyter, NOTEBOOK) as page:
            B.run_all(page, ".fib-probe-panel", timeout_ms=60_000)  # torch loads in the first cell
            panel = page.locator(".fib-probe-panel").first
            status = panel.locator(".fib-probe-status")
            state = status.locator(".fib-probe-state")  # the state word alone
            expect(state).to_have_text("done", timeout=LONG)  # the smoke cell's grid
            B.wait_idle(page)
            acc = panel.locator(".fib-probe-acc")
            activity = panel.locator(".fib-probe-activity")
            launch = panel.locator(".fib-probe-launch")
            stop = panel.locator(".fib-probe-stop")
            resume = panel.locator(".fib-probe-resume")
            expect(acc).to_contain_text("/s0/n10/")
            expect(panel.locator(".fib-probe-legend")).to_contain_text("cell names")

            # 1. launch a tiny grid: progress, then its row in the table
            _grid(page, "1", STEPS)
            expect(panel.locator(".fib-probe-plan")).to_contain_text(f"1 cell × {STEPS} steps")
            launch.click()
            expect(state).to_have_text(re.compile("starting|running"), timeout=30_000)
            expect(activity).to_contain_text(re.compile(rf"step \d+ / {STEPS}"), timeout=LONG)
            _shot(page, "1-running")
            expect(acc).to_contain_text(f"/s1/n{STEPS}/", timeout=LONG)
            expect(state).to_have_text("done", timeout=LONG)
            expect(status).not_to_contain_text("left")

            # 2. a second grid, stopped while its second cell trains, then resumed
            _grid(page, "2, 3", STEPS)
            launch.click()
            expect(acc).to_contain_text(f"/s2/n{STEPS}/", timeout=LONG)  # the first cell is kept
            expect(activity).to_contain_text("seed 3", timeout=LONG)
            expect(stop).to_be_enabled()
            asked = time.monotonic()
            stop.click()
            expect(state).to_have_text("stopped", timeout=30_000)
            took = time.monotonic() - asked
            assert took < 20, f"the stop took {took:.1f} s"
            expect(status).to_contain_text("1 of 2 cells done")
            expect(status).to_contain_text("resume trains the 1 unfinished cell")
            expect(status).not_to_contain_text("left")  # no ETA on a stopped grid
            expect(acc).not_to_contain_text(f"/s3/n{STEPS}/")
            _shot(page, "2-stopped")
            expect(resume).to_be_enabled()
            resume.click()
            expect(status).not_to_contain_text("stopped", timeout=30_000)  # nothing stale
            expect(state).to_have_text("done", timeout=LONG)
            expect(acc).to_contain_text(f"/s3/n{STEPS}/")
            expect(status).to_contain_text("2 of 2 cells done")
            _shot(page, "3-resumed")

            # 3. a long grid survives a kernel restart; the fresh panel lists and attaches it
            _grid(page, "5", 50_000)
            launch.click()
            expect(activity).to_contain_text(re.compile(r"step \d+ / 50000"), timeout=LONG)
            B.restart_kernel(page)
            B.run_all(page, ".fib-probe-panel .fib-runlist", timeout_ms=60_000)
            B.wait_idle(page)
            panel = page.locator(".fib-probe-panel").first
            row = panel.locator(".fib-runlist-row").filter(has_text="marked-tiny-4")
            expect(row).to_contain_text("running", timeout=30_000)
            row.locator("button", has_text="attach").click()
            expect(panel.locator(".fib-probe-name input")).to_have_value("marked-tiny-4")
            expect(panel.locator(".fib-probe-steps input")).to_have_value("50000")
            expect(panel.locator(".fib-probe-seeds input")).to_have_value("5")
            state = panel.locator(".fib-probe-status .fib-probe-state")
            expect(state).to_have_text("running", timeout=30_000)
            expect(panel.locator(".fib-probe-activity")).to_contain_text(
                re.compile(r"step \d+ / 50000"), timeout=30_000
            )
            _shot(page, "4-attached-after-restart")
            panel.locator(".fib-probe-stop").click()
            expect(state).to_have_text("stopped", timeout=30_000)
            expect(page.locator(".fib-error").first).to_have_text("")
            B.wait_idle(page)
            B.assert_no_error_output(page)
            _shot(page, "5-end")
    finally:  # a failed stage must not leave its grid training beside the next tests
        for h in PL.list_grids(jupyter["env"]["FIBLAB_RUNS"]):
            PL.terminate(h, timeout=5)
