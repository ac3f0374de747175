"""What every real-browser notebook test shares: a JupyterLab on 127.0.0.1 with its own HOME,
store and runs folder serving copies of the notebooks (autosave never touches the committed
files), headless Chromium through Playwright, "Run All" that survives the session-start race, a
check that no cell printed an error, and a screenshot in tests/artifacts/ when a test fails.

    pytestmark = browser_support.REQUIRES          # skip (with the reason) without Chromium
    jupyter = browser_support.jupyter_fixture()     # module-scoped server fixture

    def test_x(jupyter):
        with browser_support.notebook(jupyter, "02_retrieval_probes.ipynb") as page:
            browser_support.run_all(page, ".fib-probe-table")
            ...
            browser_support.assert_no_error_output(page)
"""

from __future__ import annotations

import contextlib
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
NOTEBOOKS = ROOT / "notebooks"
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]


def _have_playwright() -> bool:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return True


# apply with `pytestmark = REQUIRES` in a browser test module
REQUIRES = [
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM),
        reason=f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium); "
        ".ci/run does this when it runs as root",
    ),
    pytest.mark.skipif(
        not _have_playwright(),
        reason="playwright is missing: .venv/bin/pip install playwright",
    ),
]


def torch_extensions_dir() -> str:
    """Where torch keeps this user's compiled extensions (torch's own default rule): the
    server's fresh HOME would otherwise compile the CPU attention kernel again (minutes on two
    loaded cores, and a stderr line that counts as error output)."""
    import torch

    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return os.environ["TORCH_EXTENSIONS_DIR"]
    cu = "cpu" if torch.version.cuda is None else "cu" + torch.version.cuda.replace(".", "")
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    return os.path.join(os.path.expanduser("~"), ".cache", "torch_extensions", f"{py}_{cu}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def jupyter_server(d: Path, extra_env: dict | None = None):
    """JupyterLab on a free port with a token and its own HOME / config / runtime dirs under
    `d`, serving copies of all the notebooks in ``d/root``.  Yields a dict: base, token, log,
    root, env (FIBLAB_STORE / FIBLAB_RUNS point into `d`; FIBLAB_SMOKE=1)."""
    root = d / "root"
    root.mkdir(parents=True, exist_ok=True)
    for nb in sorted(NOTEBOOKS.glob("*.ipynb")):
        shutil.copy(nb, root / nb.name)
    port, token = free_port(), secrets.token_hex(16)
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
        "TORCH_EXTENSIONS_DIR": torch_extensions_dir(),
        **(extra_env or {}),
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
    log_path = d / "server.log"
    log = open(log_path, "wb")
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
                    pytest.fail("JupyterLab did not start:\n" + log_path.read_text()[-3000:])
                time.sleep(0.3)
        yield {"base": base, "token": token, "log": log_path, "root": root, "env": env, "dir": d}
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)  # shuts the kernels down cleanly
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


def jupyter_fixture(extra_env: dict | None = None):
    """A module-scoped pytest fixture running `jupyter_server` in a fresh temp dir."""

    @pytest.fixture(scope="module")
    def jupyter(tmp_path_factory):
        with jupyter_server(tmp_path_factory.mktemp("jlab"), extra_env) as server:
            yield server

    return jupyter


@contextlib.contextmanager
def notebook(jupyter: dict, name: str, viewport=(1500, 1100)):
    """Headless Chromium with `name` open and its kernel idle; yields the Playwright page.  On
    any failure saves ``tests/artifacts/browser-<name>.png`` and prints the server log tail."""
    from playwright import sync_api

    url = f"{jupyter['base']}/lab/tree/{name}?token={jupyter['token']}"
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
        try:
            # a dialog (a restart's confirmation; "Select Kernel" if the settings override is
            # missing) is accepted whenever it shows, before any action or assertion, and its
            # title kept in page.fib_dialogs for the tests that say which may appear
            page.fib_dialogs = []

            def accept(d):
                page.fib_dialogs.append(d.locator(".jp-Dialog-header").inner_text().strip())
                d.locator(".jp-mod-accept").click()

            page.add_locator_handler(page.locator(".jp-Dialog"), accept)
            page.goto(url)
            page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=60_000)
            wait_idle(page)
            yield page
        except Exception:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            shot = ARTIFACTS / f"browser-{Path(name).stem}.png"
            with contextlib.suppress(Exception):
                page.screenshot(path=str(shot), full_page=True)
            print(f"screenshot: {shot}\nserver log tail:\n" + jupyter["log"].read_text()[-3000:])
            raise
        finally:
            browser.close()


def wait_idle(page, timeout_ms: int = 120_000) -> None:
    """Wait until no cell is queued or running and the status bar names a kernel and says Idle
    (the toolbar's execution indicator already says idle while the session has "No Kernel").

    Idle alone is not the end of a Run All: the kernel goes idle after each cell, and the status
    bar says so until the next one starts; every queued cell shows ``[*]`` from the moment Run
    All is pressed, so no ``[*]`` together with Idle is."""
    deadline = time.monotonic() + timeout_ms / 1000
    idle = page.locator(".jp-StatusBar-TextItem").filter(
        has_text=re.compile(r"^(?!No Kernel).+ \| Idle$")
    )
    queued = page.locator(".jp-Notebook .jp-InputPrompt", has_text="[*]")
    while True:
        left = max(1, int(1000 * (deadline - time.monotonic())))
        queued.first.wait_for(state="detached", timeout=left)
        idle.wait_for(timeout=left)
        if queued.count() == 0:
            return


def menu(page, top: str, item: str | re.Pattern) -> None:
    """Click a menu bar item (exact name) and then one of its entries (a name or a pattern)."""
    page.get_by_role("menuitem", name=top, exact=True).click()
    page.get_by_role("menuitem", name=item).click()


def run_all(page, marker: str, timeout_ms: int = 20_000) -> None:
    """Run All Cells and wait until `marker` (a CSS selector the first cell's widget renders)
    is attached; a Run All sent while the session still picks its kernel can be dropped, so it
    is retried (three tries, growing timeouts)."""
    from playwright import sync_api

    target = page.locator(marker).first
    for attempt in range(3):
        menu(page, "Run", re.compile(r"^Run All Cells"))
        try:
            target.wait_for(state="attached", timeout=timeout_ms * (attempt + 1))
            return
        except sync_api.TimeoutError:
            if attempt == 2:
                raise


def restart_kernel(page) -> None:
    """Kernel › Restart Kernel… (the confirmation dialog is accepted by the locator handler
    `notebook` installs) and wait for the new kernel to be idle."""
    # JupyterLab 4 names it "Restart Kernel..." (its shortcut may follow in the accessible name)
    menu(page, "Kernel", re.compile(r"^Restart Kernel(…|\.\.\.)"))
    time.sleep(1.0)
    wait_idle(page)


def error_outputs(page) -> list[str]:
    """Texts of every error or stderr output in the open notebook (tracebacks, warnings)."""
    loc = page.locator(
        ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'], "
        ".jp-OutputArea-output.jp-mod-error, .jp-RenderedText[data-mime-type="
        "'application/vnd.jupyter.error']"
    )
    return [loc.nth(i).inner_text() for i in range(loc.count())]


def assert_no_error_output(page) -> None:
    errs = error_outputs(page)
    assert not errs, "error output in the notebook:\n" + "\n---\n".join(errs)[:3000]
