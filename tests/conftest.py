"""Session-wide test environment: the lab's caches and choices stay out of the user's home.

* ``FIBLAB_CACHE_DIR`` → a per-session temp folder, so no test reads or writes the user's
  ``~/.cache/fiblab/choices.json`` (the measured implementation choices, `lab.machine.autotune`).
* ``FIBLAB_AUTOTUNE=0`` → ``impl="auto"`` keeps its static order (cpp on CPU, band where it can
  run): results and call counts that never depend on which implementation won a race under
  load.  tests/lab/test_autotune.py turns measuring back on where it tests it.
* ``FIBLAB_JOBS_DIR`` → a per-session registry of lab jobs (`lab.machine.cpu_share`), so the suite's
  jobs share the cores among themselves, not with lab jobs outside it.

Set in ``os.environ``, so child processes (notebook kernels, ``run_child``) inherit them.  The
suite runs in two xdist workers (pyproject's addopts); each is a session with its own folders, so
a bit-exact test's thread count depends only on the jobs of its own worker.

* ``OMP_NUM_THREADS`` and torch's threads → each worker's share of the cores (cores ÷ workers),
  unless the user set ``OMP_NUM_THREADS``: the lab's own rule (`lab.machine.cpu_share`: together
  no more threads than cores) for the workers, whose registries do not see each other.  Two
  workers of two spinning threads each on two cores ran tests/probes/test_retrieval.py and
  tests/analysis/test_study.py in 103 s; one thread each, 57 s.

The lab runs on two CPUs (an AVX2 AMD EPYC without bf16 units, an Intel Xeon with
AVX512-BF16 / AMX), and CI on whichever the session has.  A test whose outcome could depend on
which asks for the ``cpu_profile`` fixture: it then runs twice, as on each CPU
(``FIBLAB_CPU_BF16=0`` and ``=1``, which `lab.machine.hardware` reads in place of the CPU's own
answer), is marked ``hardware`` (``pytest -m hardware`` runs just those), and so either
machine catches what the other would hit.
"""

from __future__ import annotations

import os

import pytest
import torch

from lab.machine.cpu_share import cores
from lab.machine.hardware import BF16_ENV

CPU_PROFILES = {"avx2": "0", "bf16cpu": "1"}  # id → FIBLAB_CPU_BF16


@pytest.fixture(scope="session", autouse=True)
def fiblab_session_env(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FIBLAB_CACHE_DIR", str(tmp_path_factory.mktemp("fiblab-cache")))
        mp.setenv("FIBLAB_AUTOTUNE", "0")
        # the suite's lab jobs share the cores among themselves only (lab.machine.cpu_share): a bit-exact
        # test's thread count never depends on lab jobs running outside the suite
        mp.setenv("FIBLAB_JOBS_DIR", str(tmp_path_factory.mktemp("fiblab-jobs")))
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        threads = torch.get_num_threads()
        if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
            share = max(1, cores() // workers)
            mp.setenv("OMP_NUM_THREADS", str(share))
            torch.set_num_threads(share)
        try:
            yield
        finally:
            torch.set_num_threads(threads)


@pytest.fixture(params=list(CPU_PROFILES.values()), ids=list(CPU_PROFILES))
def cpu_profile(request, monkeypatch) -> bool:
    """Run the test as on each of the lab's CPUs; True on the one with native bf16."""
    monkeypatch.setenv(BF16_ENV, request.param)
    return request.param == "1"


def pytest_collection_modifyitems(config, items):
    for item in items:  # the marker follows the fixture, so `-m hardware` finds every such test
        if "cpu_profile" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.hardware)
