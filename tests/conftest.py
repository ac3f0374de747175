"""Session-wide test environment: the lab's caches and choices stay out of the user's home.

* ``FIBLAB_CACHE_DIR`` → a per-session temp folder, so no test reads or writes the user's
  ``~/.cache/fiblab/choices.json`` (the measured implementation choices, `lab.autotune`).
* ``FIBLAB_AUTOTUNE=0`` → ``impl="auto"`` keeps its static order (cpp on CPU, band where it can
  run): results and call counts that never depend on which implementation won a race under
  load.  tests/test_autotune.py turns measuring back on where it tests it.

Set in ``os.environ``, so child processes (notebook kernels, ``run_child``) inherit them.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def fiblab_session_env(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FIBLAB_CACHE_DIR", str(tmp_path_factory.mktemp("fiblab-cache")))
        mp.setenv("FIBLAB_AUTOTUNE", "0")
        yield
