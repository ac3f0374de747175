"""What a second `fiblab demo` reuses of a language-model run: its training, once finished, and its
evaluations (extrapolation, position bins, the battery), so that a re-run only rebuilds the report.

A run is *finished* when its newest checkpoint is at the configured last step and passes its
checksum, and the store (when there is one) records the run as done. Its evaluations are kept in
the run folder (``demo-eval.json``) beside the key they were computed under: the checkpoint (file,
step, SHA-256), the length factors, the window limit and the battery size. They are reused only
under the same key and when the store still holds the run's evaluations at every length; anything
else (no file, another key, an unreadable file, a fresh store) evaluates again.
"""

from __future__ import annotations

import hashlib
import json
import os

from lab.training.checkpoint import list_checkpoints
from lab.util.files import atomic_write

__all__ = ["CACHE", "checkpoint_id", "finished", "evaluation_key", "cached", "save"]

#: The file in a run folder that keeps the demo's evaluations of that run.
CACHE = "demo-eval.json"


def checkpoint_id(run_dir: str) -> dict | None:
    """``{"file", "step", "sha256"}`` of the run's newest checkpoint when its checksum sidecar
    matches it; None without one (or when it is incomplete or corrupt: training then decides)."""
    paths = list_checkpoints(run_dir)
    if not paths:
        return None
    path = paths[-1]
    try:
        with open(path + ".json") as f:
            meta = json.load(f)
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    except (OSError, ValueError):  # no sidecar, or not JSON: not written completely
        return None
    step = meta.get("step") if isinstance(meta, dict) else None
    if not isinstance(step, int) or digest.hexdigest() != meta.get("sha256"):
        return None
    return {"file": os.path.basename(path), "step": step, "sha256": meta["sha256"]}


def _store_run(store_path: str, name: str):
    """(status, evaluations frame) of run ``name`` in the store; (None, None) when unknown."""
    from lab.store import Store

    with Store(store_path) as st:
        runs = st.runs()
        row = runs[runs["name"] == name]
        if row.empty:
            return None, None
        return str(row["status"].iloc[0]), st.evals(name)


def finished(run_dir: str, name: str, steps: int, store_path: str | None) -> bool:
    """Whether run ``name`` in ``run_dir`` was trained to ``steps`` (its newest checkpoint, intact)
    and, with a store, is recorded there as done: training it again would do nothing."""
    ckpt = checkpoint_id(run_dir)
    if ckpt is None or ckpt["step"] != steps:
        return False
    return store_path is None or _store_run(store_path, name)[0] == "done"


def evaluation_key(run_dir: str, factors, eval_limit: int | None, battery_n: int) -> dict:
    """What the run's evaluations depend on: its newest checkpoint and the demo's settings."""
    return {
        "checkpoint": checkpoint_id(run_dir),
        "factors": [int(f) for f in factors],
        "eval_limit": eval_limit,
        "battery_n": int(battery_n),
    }


def cached(
    run_dir: str, key: dict, name: str, lengths, store_path: str | None
) -> tuple[dict, dict] | None:
    """(evaluation, battery) saved under ``key`` in ``run_dir``, when the store (if any) still
    holds the run's whole-window evaluations at the checkpoint's step for every one of
    ``lengths``; None otherwise."""
    if key["checkpoint"] is None:
        return None
    try:
        with open(os.path.join(run_dir, CACHE)) as f:
            saved = json.load(f)
    except FileNotFoundError:
        return None
    except ValueError:  # half-written or not ours: evaluate again and overwrite it
        return None
    if not isinstance(saved, dict) or saved.get("key") != key:
        return None
    if store_path is not None:
        status, ev = _store_run(store_path, name)
        if status is None:
            return None
        at = ev[(ev["step"] == key["checkpoint"]["step"]) & (ev["kind"] == "recompute")]
        if not set(int(L) for L in lengths) <= set(int(c) for c in at["context_len"]):
            return None
    return saved["eval"], saved["battery"]


def save(run_dir: str, key: dict, evaluation: dict, battery: dict) -> str:
    """Write the run's evaluations under ``key`` (atomically: a killed demo leaves the old file
    or none); returns the path. NaN and infinities are kept (Python's JSON reads them back)."""
    path = os.path.join(run_dir, CACHE)
    return atomic_write(path, json.dumps({"key": key, "eval": evaluation, "battery": battery}))
