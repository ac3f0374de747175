"""Where the lab keeps its runs and its experiment store: one definition for the CLI, the
launcher and the notebooks.

    FIBLAB_RUNS    the runs folder (run directories, probe results)
    FIBLAB_STORE   the experiment store (default: fiblab.db inside the runs folder)

Without them, both live under a *base* directory: ``runs/`` and ``runs/fiblab.db``.  The
command line's base is the working directory (``fiblab demo`` run in ~/exp writes ~/exp/runs).
The notebooks and the launcher use `work_dir`: the source checkout when fiblab runs from one
(JupyterLab opens notebooks in ``notebooks/``, yet their runs belong at the project's top, as
they always did), else the working directory — never the installed package's folder, which
for a wheel is inside site-packages.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "RUNS_ENV",
    "STORE_ENV",
    "STORE_NAME",
    "checkout_root",
    "work_dir",
    "runs_dir",
    "store_path",
]

RUNS_ENV = "FIBLAB_RUNS"
STORE_ENV = "FIBLAB_STORE"
STORE_NAME = "fiblab.db"

_HERE = Path(__file__).resolve().parents[2]  # the folder holding the `lab` package


def checkout_root(here: Path | None = None) -> Path | None:
    """The source checkout this package was imported from (a folder with fiblab's
    pyproject.toml beside `lab/`), or None for an installed (non-editable) package."""
    top = Path(here) if here is not None else _HERE
    project = top / "pyproject.toml"
    try:
        text = project.read_text(encoding="utf-8")
    except OSError:
        return None
    return top if (top / "lab").is_dir() and 'name = "fiblab"' in text else None


def work_dir() -> Path:
    """The notebooks' and the launcher's base: the checkout when running from one, else the
    working directory (absolute)."""
    return checkout_root() or Path.cwd()


def runs_dir(base: str | os.PathLike | None = None) -> str:
    """FIBLAB_RUNS, else ``<base>/runs`` (``base`` None: ``runs`` relative to the working
    directory, what the command line uses)."""
    env = os.environ.get(RUNS_ENV, "").strip()
    if env:
        return env
    return "runs" if base is None else str(Path(base) / "runs")


def store_path(base: str | os.PathLike | None = None) -> str:
    """FIBLAB_STORE, else ``fiblab.db`` in `runs_dir(base)` (so FIBLAB_RUNS alone moves both)."""
    env = os.environ.get(STORE_ENV, "").strip()
    if env:
        return env
    return os.path.join(runs_dir(base), STORE_NAME)
