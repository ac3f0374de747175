"""One registration file for every registered study (the confirmation, the scale study, each
amendment): `freeze` writes ``registration.json`` — the protocol's hash, when and at which commit
it was frozen, and its plan — and `frozen` reads it back, refusing a protocol that changed since.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess

from lab.util import jsonio
from lab.util.checks import positive_int
from lab.util.files import atomic_write

__all__ = ["REGISTRATION", "check_limit", "commit", "freeze", "frozen"]

REGISTRATION = "registration.json"
#: the repository (its HEAD is the commit a protocol is frozen at)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def freeze(out_dir: str, sha: str, **fields) -> dict:
    """Write ``registration.json`` in ``out_dir``: the protocol's hash, when and at which commit
    it was frozen, and ``fields`` (its plan, a note) — the confirmation's, the scale study's and
    each amendment's one writer; `frozen` reads it back."""
    doc = {
        "protocol_sha256": sha,
        "registered_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit_before": commit(),
        **fields,
    }
    os.makedirs(out_dir, exist_ok=True)
    atomic_write(os.path.join(out_dir, REGISTRATION), jsonio.dumps(doc, indent=1))
    return doc


def frozen(path: str, now: str, register_cmd: str, fix: str) -> dict:
    """A registration file's content when its hash is ``now``; else a ValueError naming the
    fix (the confirmation's and the scale study's one check)."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError:
        raise ValueError(
            f"no registration at {path}: freeze the protocol first ({register_cmd})"
        ) from None
    if doc.get("protocol_sha256") != now:
        raise ValueError(
            f"the protocol changed since it was frozen ({doc.get('protocol_sha256', '?')[:12]}… "
            f"registered, {now[:12]}… now): {fix}"
        )
    return doc


def check_limit(limit: int | None) -> None:
    """A registered study's ``--limit`` (runs this call trains or scores), checked before
    anything runs: 0 or a negative one would slice the plan silently (-1 drops its last run)."""
    if limit is not None:
        positive_int(limit, "--limit", "runs this call: pass 1 or more")
