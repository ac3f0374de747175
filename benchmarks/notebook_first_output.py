"""How long a user waits for the first useful output of each notebook (issue 28), in a real
browser: JupyterLab on 127.0.0.1 serving copies of the notebooks, headless Chromium opening each
as a researcher would (not the tests' smoke scale), Run All, and the clock stopped when the
notebook's first widget shows its content.  For 03 the wait from "launch" (the form's defaults)
to the first training step on screen is measured too, then the run is stopped.

    .venv/bin/python benchmarks/notebook_first_output.py [--store PATH] [--json OUT]

Printed per notebook: open → kernel idle, Run All → first output, their sum, and every dialog
that appeared (a "Select Kernel" dialog on first open is issue 28's item 8: none is expected).
--store: a store to open 04 and 05 on (a copy is used; default: an empty one).  Measure on a quiet
machine: the figures are wall-clock seconds, not ratios.  Screenshots go to --shots.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the browser harness the notebook tests use

import browser_support as B  # noqa: E402

from benchmarks.header import machine_header  # noqa: E402

#: notebook → the CSS selector of its first useful output (the widget with its content drawn)
FIRST = {
    "01_coverage_explorer.ipynb": ".fib-union .fib-union-count",
    "02_retrieval_probes.ipynb": ".fib-probe-panel",
    "03_train_lm.ipynb": ".fib-train-panel .fib-train-launch",
    "04_alpha_trajectories.ipynb": ".fib-alpha-explorer",
    "05_results.ipynb": ".fib-results-panel",
    "06_schedule_search.ipynb": ".fib-search-panel",
}


def _open(pw, server: dict, name: str, shots: Path) -> dict:
    """One notebook opened, Run All, the first output awaited; its times and dialogs."""
    browser = pw.chromium.launch(executable_path=B.CHROMIUM, headless=True, args=B.CHROMIUM_ARGS)
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    dialogs: list[str] = []

    def accept(d):
        dialogs.append(d.locator(".jp-Dialog-header").inner_text().strip())
        d.locator(".jp-mod-accept").click()

    page.add_locator_handler(page.locator(".jp-Dialog"), accept)
    try:
        t0 = time.perf_counter()
        # a workspace of its own: the notebook opens alone, as on a first visit
        ws = Path(name).stem.replace("_", "-")
        page.goto(f"{server['base']}/lab/workspaces/{ws}/tree/{name}?reset&token={server['token']}")
        page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=120_000)
        B.wait_idle(page, 180_000)
        t_kernel = time.perf_counter() - t0
        t1 = time.perf_counter()
        clicks = _run_all(page)
        page.locator(FIRST[name]).first.wait_for(state="visible", timeout=300_000)
        t_first = time.perf_counter() - t1
        out = {
            "open_s": t_kernel,
            "first_output_s": t_first,
            "total_s": t_kernel + t_first,
            "run_all_clicks": clicks,
        }
        if name.startswith("03"):
            out["launch_to_first_step_s"] = _first_step(page)
        B.wait_idle(page, 300_000)
        page.screenshot(path=str(shots / f"first-output-{Path(name).stem}.png"), full_page=True)
        out["dialogs"] = dialogs
        out["errors"] = B.error_outputs(page)
        return out
    except Exception:
        page.screenshot(path=str(shots / f"first-output-{Path(name).stem}-failed.png"))
        raise
    finally:
        browser.close()


def _run_all(page) -> int:
    """Run › Run All Cells until a cell has started (its prompt shows * or a number): a click
    sent while the page still settles can be dropped, and a user would click again. Returns
    the clicks it took (the time is counted from the first)."""
    started = page.locator(".jp-InputPrompt").filter(has_text=re.compile(r"\[(\*|\d+)\]"))
    for clicks in range(1, 6):
        B.menu(page, "Run", re.compile(r"^Run All Cells"))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if started.count():
                return clicks
            time.sleep(0.1)
    raise RuntimeError("Run All started no cell after 5 clicks")


def _first_step(page) -> float:
    """Launch with the form's defaults; seconds until the run's status line shows a step ≥ 1
    (the first step builds the attention kernel when it is not cached); then stop it."""
    panel = page.locator(".fib-train-panel")
    t0 = time.perf_counter()
    panel.locator(".fib-train-launch").click()
    status = panel.locator(".fib-run-status")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        m = re.search(r"step (\d+)", status.inner_text() if status.count() else "")
        if m and int(m.group(1)) >= 1:
            break
        time.sleep(0.2)
    else:
        raise RuntimeError("no step shown 600 s after launch")
    dt = time.perf_counter() - t0
    stop = panel.locator(".fib-train-stop")
    if stop.is_enabled():
        stop.click()
        panel.locator(".fib-run-state").filter(has_text=re.compile("stopped|done|failed")).wait_for(
            timeout=120_000
        )
    return dt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", default=None, help="a store for 04 and 05 (copied)")
    ap.add_argument("--json", default="benchmarks/results/notebook-first-output.json")
    ap.add_argument("--shots", default="tests/artifacts")
    args = ap.parse_args(argv)
    from playwright import sync_api

    info = machine_header()
    shots = Path(args.shots)
    shots.mkdir(parents=True, exist_ok=True)
    rows = {}
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        env = {"FIBLAB_SMOKE": "0", "FIBLAB_STORE": str(d / "store.db")}
        if args.store:
            shutil.copy(args.store, d / "store.db")
        with B.jupyter_server(d, env) as server, sync_api.sync_playwright() as pw:
            for name in FIRST:
                rows[name] = _open(pw, server, name, shots)
                r = rows[name]
                print(
                    f"{name:30s} open {r['open_s']:5.1f} s · Run All → first output "
                    f"{r['first_output_s']:5.1f} s · total {r['total_s']:5.1f} s"
                    + (
                        f" · launch → step 1 {r['launch_to_first_step_s']:.1f} s"
                        if "launch_to_first_step_s" in r
                        else ""
                    )
                    + f" · Run All clicks {r['run_all_clicks']}"
                    + f" · dialogs {r['dialogs'] or 'none'}"
                    + (f" · {len(r['errors'])} error output(s)" if r["errors"] else ""),
                    flush=True,
                )
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"machine": info, "store": bool(args.store), "notebooks": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
