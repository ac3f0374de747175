"""Checkpoints that survive a kill at any moment, and the RNG state that makes resume exact.

A checkpoint is written to a temporary file, its SHA-256 sidecar written beside it, and only then
renamed to its listed name: a kill at any moment leaves a whole checkpoint or none under that name
(a sidecar written last let a kill between the two leave a listed checkpoint without one, which
resume refused as damage).  A checkpoint whose sidecar is missing or does not match — damage, or a
file copied by hand — is skipped on resume (`latest_good_checkpoint`).  `resume_point` decides where a run starts: a new run at step 0, a
resumed one at its newest good checkpoint; a run whose every checkpoint is unreadable is refused
unless the user asks to restart it (the bad files are then set aside, not deleted).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random

import numpy as np
import torch

from lab.util.files import atomic_path, atomic_write


# --------------------------------------------------------------------------------------------
def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def save_checkpoint(run_dir: str, step: int, state: dict, keep: int) -> str:
    """Write ckpt_<step>.pt and its checksum sidecar, the sidecar first and the checkpoint's
    rename last (whole or absent under its name, whenever a kill comes); keep the newest
    `keep`."""
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, f"ckpt_{step:07d}.pt")
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            torch.save(state, f)
        atomic_write(path + ".json", json.dumps({"step": step, "sha256": _sha256(tmp)}))
    for old in list_checkpoints(run_dir)[:-keep]:
        for p in (old, old + ".json"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(p)
    return path


def list_checkpoints(run_dir: str) -> list[str]:
    if not os.path.isdir(run_dir):
        return []
    return sorted(
        os.path.join(run_dir, f)
        for f in os.listdir(run_dir)
        if f.startswith("ckpt_") and f.endswith(".pt")
    )


class CorruptCheckpoint(ValueError):
    pass


def load_checkpoint(path: str) -> dict:
    """Load a checkpoint after checking its SHA-256 sidecar."""
    side = path + ".json"
    if not os.path.exists(side):
        raise CorruptCheckpoint(
            f"checkpoint {path} has no checksum sidecar {side}: it was not "
            f"completely written; resume from an earlier one"
        )
    with open(side) as f:
        want = json.load(f)["sha256"]
    got = _sha256(path)
    if got != want:
        raise CorruptCheckpoint(
            f"checkpoint {path} is corrupt (sha256 {got[:12]}… != "
            f"{want[:12]}…): delete it to resume from an earlier one"
        )
    return torch.load(path, map_location="cpu", weights_only=False)


def latest_good_checkpoint(run_dir: str, log=print) -> dict | None:
    """The newest checkpoint that passes its checksum; corrupt ones are reported and skipped."""
    for path in reversed(list_checkpoints(run_dir)):
        try:
            return load_checkpoint(path)
        except (CorruptCheckpoint, OSError, RuntimeError, EOFError) as e:
            log(f"skipping {path}: {e}")
    return None


CORRUPT_SUFFIX = ".corrupt"  # a set-aside checkpoint: no longer listed, kept for inspection


def check_resume_precision(ckpt: dict, precision: str, name: str, asked: str) -> None:
    """Refuse to continue run `name` in another precision than it was trained in (a checkpoint
    without the field predates it: its run computed in its device's default, not checked)."""
    was = ckpt.get("precision")
    if was is not None and was != precision:
        raise ValueError(
            f"run {name!r} was trained in {was} and would continue in {precision} "
            f"(precision={asked!r} on this machine): pass --override precision={was} "
            f"to continue it as it was, or --name to start another run"
        )


def resume_point(
    run_dir: str, name: str, *, resume: bool, restart: bool = False, log=print
) -> dict | None:
    """The checkpoint run `name` continues from, or None to start at step 0.

    No checkpoints: None.  Checkpoints and neither flag: refused (nothing is overwritten).
    ``resume``: the newest good one.  Every one unreadable: refused unless ``restart``, which
    renames them to ``*.corrupt`` and starts again (a silent restart would hide the damage)."""
    paths = list_checkpoints(run_dir)
    if not paths:
        return None
    ckpt = latest_good_checkpoint(run_dir, log) if (resume or restart) else None
    if ckpt is not None and resume:
        return ckpt
    if ckpt is None and (resume or restart):
        names = ", ".join(os.path.basename(p) for p in paths)
        if not restart:
            raise ValueError(
                f"run {name!r}: every checkpoint in {run_dir} is corrupt or incomplete "
                f"({names}): pass --restart to set them aside and train it again from step 0, "
                f"or restore a good one"
            )
        for p in paths:
            for f in (p, p + ".json"):
                if os.path.exists(f):
                    os.replace(f, f + CORRUPT_SUFFIX)
        log(f"restarting {name} from step 0: set aside the unreadable {names} as *{CORRUPT_SUFFIX}")
        return None
    raise ValueError(
        f"run {name!r} already has checkpoints in {run_dir}: pass --resume "
        f"to continue it, or --name to start another"
    )


def rng_state() -> dict:
    state = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
