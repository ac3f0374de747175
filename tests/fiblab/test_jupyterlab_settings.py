"""A notebook opens on its own kernel without a "Select Kernel" dialog (issue 28 item 8): the set-up
puts JupyterLab's settings overrides into the environment, and a JupyterLab server started from
it reports the setting in force (its settings API: what the browser loads)."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OVERRIDES = Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
TRACKER = "@jupyterlab/notebook-extension:tracker"
NOTIFY = "@jupyterlab/apputils-extension:notification"


def test_the_environment_carries_the_override_and_the_wheel_ships_it():
    want = json.loads((ROOT / "notebooks" / "jupyterlab" / "overrides.json").read_text())
    assert want[TRACKER]["autoStartDefaultKernel"] is True
    assert json.loads(OVERRIDES.read_text()) == want  # scripts/setup.sh copied it
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert data["data-files"]["share/jupyter/lab/settings"] == [
        "notebooks/jupyterlab/overrides.json"
    ]


def test_a_jupyterlab_server_reports_the_setting_in_force(tmp_path):
    pytest.importorskip("jupyterlab")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(8)
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip=127.0.0.1",
         f"--port={port}", f"--ServerApp.token={token}", f"--ServerApp.root_dir={tmp_path}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/lab/api/settings/{TRACKER}?token={token}"
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    got = json.loads(r.read())
                break
            except OSError:
                assert proc.poll() is None, "jupyter lab exited"
                assert time.monotonic() < deadline, "jupyter lab did not answer in 90 s"
                time.sleep(0.5)
        # overrides change the schema's default (what the browser applies when the user set
        # nothing): True here, the schema's own False without the override
        assert got["schema"]["properties"]["autoStartDefaultKernel"]["default"] is True
        assert "autoStartDefaultKernel" not in got["settings"]  # no user setting involved
        # no "get notified about Jupyter news?" toast over the widgets, no request to the web
        url = url.replace(TRACKER, NOTIFY)
        with urllib.request.urlopen(url, timeout=10) as r:
            props = json.loads(r.read())["schema"]["properties"]
        assert props["fetchNews"]["default"] == "false"  # the schema's own: "none" (ask)
        assert props["checkForUpdates"]["default"] is False
    finally:
        proc.terminate()
        proc.wait(timeout=30)
