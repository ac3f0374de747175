"""Checkpoints that survive a kill at any moment, and the RNG state that makes resume exact.

A checkpoint is written to a temporary file and renamed, with a SHA-256 sidecar written last; a
checkpoint whose sidecar is missing or does not match is skipped on resume
(`latest_good_checkpoint`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random

import numpy as np
import torch


# --------------------------------------------------------------------------------------------
def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _atomic_write(path: str, write) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_checkpoint(run_dir: str, step: int, state: dict, keep: int) -> str:
    """Write ckpt_<step>.pt atomically, then its checksum sidecar; keep the newest `keep`."""
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, f"ckpt_{step:07d}.pt")
    _atomic_write(path, lambda f: torch.save(state, f))
    meta = json.dumps({"step": step, "sha256": _sha256(path)}).encode()
    _atomic_write(path + ".json", lambda f: f.write(meta))
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
