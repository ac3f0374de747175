"""What a training process is doing right now, in words, in a small file beside its checkpoints.

The store learns of a run only once its data is loaded and its model built (`lab.training.train` starts
the store's row with the data's provenance), so the first seconds to minutes of a launched run
— importing torch, tokenising the corpus, loading a checkpoint, building the attention kernel in
the first step — and its evaluations are invisible there.  The training process (rank 0) writes
``<run_dir>/phase.json`` at each such phase; a launcher (`fiblab.jobs.launch.snapshot`) reads it and
shows the phase instead of a silent bar.  The file also carries what an ETA needs and only the
process knows: the step it started from (so a resumed run's speed is measured on its own steps)
and how many tokens its light and final evaluations score.

    write_phase(run_dir, "tokenising the corpus", start_step=0)
    read_phase(run_dir)   # {"phase": "tokenising the corpus", "since": 1767000000.0, "pid": …}

A "training" phase also keeps ``training_since``, when this process first began training: the
loop writes "training" again after each mid-run evaluation, and a view attached later (another
tab, a restarted kernel) still says how long the run has trained, not since the last evaluation.
"""

from __future__ import annotations

import json
import os
import socket
import time

from lab.machine.procs import process_id
from lab.util.files import atomic_write

PHASE_FILE = "phase.json"

# the phases, as users read them (lab.training.train writes these; "evaluating …" and "final …" get the
# step and the tokens appended)
STARTING = "starting the process"  # the launcher's word for a process that wrote nothing yet
CHECKPOINT = "loading the checkpoint"
DATA = "preparing the data (tokenising the corpus, or reading it from the cache)"
MODEL = "building the model"
FIRST_STEP = "first step (building the attention kernel)"
TRAINING = "training"
EVALUATING = "evaluating"
FINAL_EVAL = "final evaluation"
EXITING = "exiting"  # the loop is over (``status`` says how); the process is shutting down

# the store events a loop logs as it begins (`lab.training.watch`): the last one's time is when
# the run's latest attempt began (a resume keeps the row's first ``started_at``), which a
# launcher needs to tell this attempt's final status from an earlier one's
START_EVENT, RESUME_EVENT = "start", "resume"

__all__ = [
    "PHASE_FILE",
    "STARTING",
    "CHECKPOINT",
    "DATA",
    "MODEL",
    "FIRST_STEP",
    "TRAINING",
    "EVALUATING",
    "FINAL_EVAL",
    "EXITING",
    "START_EVENT",
    "RESUME_EVENT",
    "write_phase",
    "beat",
    "read_phase",
    "clear_phase",
    "eval_tokens",
]


def write_phase(run_dir: str, phase: str, **extra) -> None:
    """Record ``phase`` (and ``extra`` facts, merged into what the file already holds) with the
    time and this process's id (its PID, and its host and start time, which tell a launcher on
    another machine, or after the PID was taken, that this is no process of its own); written atomically, never raises (a full disk must not stop a
    training run over a progress note).  Only into a folder that exists (a launched run's, made
    by the launcher; the loop makes its own when the run really starts): a run refused while its
    data loads must leave no folder behind."""
    if os.path.isdir(run_dir):
        now = time.time()
        facts = {**extra, "phase": phase, "since": now, "pid": os.getpid()}
        facts.update(host=socket.gethostname(), process=process_id())
        if phase == TRAINING:  # back to training after an evaluation: the first start stays
            old = read_phase(run_dir) or {}
            mine = old.get("pid") == os.getpid() and "training_since" in old
            facts["training_since"] = old["training_since"] if mine else now
        _merge(run_dir, facts, only_ours=False)


#: Seconds between heartbeats of a training loop (`beat`): a live view moves at least this often
#: although the store hears of a step only every ``log_every`` steps.
BEAT_S = 2.0


def beat(run_dir: str, step: int) -> None:
    """Record the step the loop has reached, keeping the phase and its start time: a live view
    shows step and ETA between the logged steps (`lab.training.train` calls it at most every `BEAT_S`)."""
    _merge(run_dir, {"step": int(step), "step_at": time.time()}, only_ours=True)


def _merge(run_dir: str, facts: dict, only_ours: bool) -> None:
    """Write ``facts`` over what this process's phase file holds, atomically; never raises.
    An earlier process's facts are not this one's: they are dropped, or with ``only_ours``
    (a heartbeat before any phase of this process) nothing is written."""
    try:
        old = read_phase(run_dir) or {}
        if old.get("pid") != os.getpid():
            if only_ours:
                return
            old = {}
        atomic_write(os.path.join(run_dir, PHASE_FILE), json.dumps({**old, **facts}))
    except OSError:
        pass


def read_phase(run_dir: str) -> dict | None:
    """The last phase written under ``run_dir``, or None (no file, or an unreadable one)."""
    try:
        with open(os.path.join(run_dir, PHASE_FILE)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("phase"), str) else None


def clear_phase(run_dir: str) -> None:
    """Remove an earlier process's phase file (a launcher does this before it starts one)."""
    try:
        os.remove(os.path.join(run_dir, PHASE_FILE))
    except OSError:
        pass


def eval_tokens(data, seq_len: int, light_limit: int) -> tuple[int | None, int | None]:
    """Tokens a light evaluation (at most ``light_limit`` per held-out split) and the final one
    score: complete windows of every split (`lab.data.prepared`); (None, None) where ``data`` cannot
    tell."""
    parts = data.domains.values() if hasattr(data, "domains") else [data]
    try:
        windows = [max(0, (len(p.tokens("val")) - 1) // seq_len) for p in parts]
    except (AttributeError, TypeError, KeyError, ValueError):
        return None, None
    limit = max(1, light_limit // seq_len)
    return sum(min(w, limit) for w in windows) * seq_len, sum(windows) * seq_len
