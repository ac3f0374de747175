"""A real browser: JupyterLab on 127.0.0.1, the coverage explorer opened in headless Chromium
(Playwright), all cells run, one α slider moved with the keyboard, and the displayed union count
changes to the value `fiblab.ui.coverage.explore` computes for the new α.  A screenshot lands in
tests/artifacts/ when it fails.  Skipped (with the reason) only without Chromium or Playwright."""

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "tests" / "artifacts"
NOTEBOOK = ROOT / "notebooks" / "01_coverage_explorer.ipynb"
LAYER = 3  # the slider the test moves
STEP = 0.01  # fiblab.ui.coverage.ALPHA_STEP

if not os.path.exists(CHROMIUM):
    pytest.skip(
        f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium); "
        f".ci/run does this when it runs as root",
        allow_module_level=True,
    )
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is missing: .venv/bin/pip install playwright"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def jupyter(tmp_path_factory):
    """JupyterLab on a free port with a token and its own HOME / config / runtime dirs, serving
    a copy of the notebook (so autosave never writes outputs into the committed file)."""
    d = tmp_path_factory.mktemp("jlab")
    root = d / "root"
    root.mkdir()
    shutil.copy(NOTEBOOK, root / NOTEBOOK.name)
    port, token = _free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        "HOME": str(d / "home"),
        "JUPYTER_CONFIG_DIR": str(d / "config"),
        "JUPYTER_RUNTIME_DIR": str(d / "runtime"),
        "JUPYTER_DATA_DIR": str(d / "data"),
        "IPYTHONDIR": str(d / "ipython"),
        "FIBLAB_SMOKE": "1",
        "FIBLAB_STORE": str(d / "store.db"),
        "FIBLAB_RUNS": str(d / "runs"),
        "MPLBACKEND": "Agg",
    }
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.token={token}",
        f"--ServerApp.root_dir={root}",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log = open(d / "server.log", "wb")
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(
                        "JupyterLab did not start:\n" + (d / "server.log").read_text()[-3000:]
                    )
                time.sleep(0.3)
        yield {"base": base, "token": token, "log": d / "server.log"}
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)  # shuts the kernels down cleanly
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


def _expected_union(presses: int) -> tuple[float, int]:
    from fiblab.ui.coverage_explore import explore
    from lab.schedules import layer_alphas

    alphas = layer_alphas("stagger", 16)
    alphas[LAYER] = round(alphas[LAYER] + presses * STEP, 2)
    return alphas[LAYER], explore(alphas)["union"]


def test_slider_changes_the_union_count_in_a_real_browser(jupyter):
    start = _expected_union(0)[1]
    presses = next(k for k in range(1, 20) if _expected_union(k)[1] != start)
    alpha, want = _expected_union(presses)
    expect = sync_api.expect
    url = f"{jupyter['base']}/lab/tree/{NOTEBOOK.name}?token={jupyter['token']}"
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--disable-dev-shm-usage",
            ],
        )
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        try:
            # a "Select Kernel" dialog may still appear (session start race): accept it
            # whenever it shows, before any action or assertion
            page.add_locator_handler(
                page.locator(".jp-Dialog"), lambda d: d.locator(".jp-mod-accept").click()
            )
            page.goto(url)
            page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=60_000)
            # kernel ready: the status bar names the kernel and says Idle (the toolbar's
            # execution indicator already says idle while the session has "No Kernel")
            page.locator(".jp-StatusBar-TextItem").filter(
                has_text=re.compile(r"^(?!No Kernel).+ \| Idle$")
            ).wait_for(timeout=60_000)
            count = page.locator(".fib-union .fib-union-count")
            for attempt in range(3):  # a Run All sent while the session
                page.get_by_role("menuitem", name="Run", exact=True).click()  # still picks
                page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()
                try:  # its kernel can be dropped
                    count.wait_for(state="attached", timeout=20_000 * (attempt + 1))
                    print(f"run all: attempt {attempt + 1}")
                    break
                except sync_api.TimeoutError:
                    if attempt == 2:
                        raise
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
        except Exception:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            shot = ARTIFACTS / "browser-coverage-explorer.png"
            page.screenshot(path=str(shot), full_page=True)
            print(f"screenshot: {shot}\nserver log tail:\n" + jupyter["log"].read_text()[-3000:])
            raise
        finally:
            browser.close()
