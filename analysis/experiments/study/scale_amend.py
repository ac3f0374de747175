"""Amendments to the scale study: a cell its registered plan lacks, registered apart — its own
table in claims.toml (``[amendment.<name>]``), its own hash, folder and rows, frozen before its
runs — that decides only the claims it names, so nothing decided before it is looked at again.

    python -m analysis.experiments.study.scale --register-amendment w8   # freeze it (once)
    python -m analysis.experiments.study.scale --stage L8-T128-W8         # train what it lacks
    python -m analysis.experiments.study.scale --decide                  # [scale] and amendments

Its stage is named for its cell and window (``L8-T128-W8``); its rows go to
``benchmarks/results/scale/amendment-<name>/runs.jsonl``.  Its hash covers its table, the tests
of the claims it decides, and the [scale] protocol it amends (a changed [scale] changes it too).
The scale module wraps this one (stages, training, the ledger); this module never imports it.
"""

from __future__ import annotations

import datetime
import os

from analysis.experiments.study import confirm
from lab.util import jsonio
from lab.util.files import atomic_write

__all__ = [
    "load_amendments",
    "folder",
    "stage_name",
    "stage_runs",
    "protocol_hash",
    "register",
    "check_registered",
    "read_rows",
]

REGISTRATION = "registration.json"
ROWS = "runs.jsonl"


def load_amendments(path: str | None = None) -> dict[str, dict]:
    """claims.toml's ``[amendment.*]`` tables, by name."""
    import tomllib

    from analysis.ledger.ledger import CLAIMS_PATH

    with open(path or CLAIMS_PATH, "rb") as f:
        return {k: dict(v) for k, v in tomllib.load(f).get("amendment", {}).items()}


def folder(name: str, scale_dir: str) -> str:
    """Where an amendment's registration and rows live: beside [scale]'s, a folder of its own."""
    return os.path.join(scale_dir, f"amendment-{name}")


def stage_name(am: dict) -> str:
    L, T = am["cell"]
    return f"L{L}-T{T}-W{am['window']}"


def stage_runs(am: dict) -> tuple[tuple[str, int], ...]:
    """(scheme, seed), seed by seed, each scheme in turn (as [scale]'s stages)."""
    seeds = {k: range(v[0], v[1] + 1) for k, v in am["schemes"].items()}
    top = max(len(s) for s in seeds.values())
    return tuple((k, s[i]) for i in range(top) for k, s in seeds.items() if i < len(s))


def protocol_hash(name: str, scale_hash: str, amendments: dict | None = None) -> str:
    """SHA-256 of the amendment's table, the tests of the claims it decides and the hash of the
    [scale] protocol it amends."""
    from analysis.ledger import ledger

    am = (amendments or load_amendments())[name]
    paper, lab = ledger.load_claims()
    mine = [c for c in paper + lab if c["id"] in am["claims"]]
    proto = ledger.protocol(mine, ledger.load_rules())
    proto["amendment"] = {"name": name, **am, "amends_sha256": scale_hash}
    return ledger.protocol_sha256(proto)


def register(name: str, scale_dir: str, scale_hash: str) -> dict:
    """Freeze the amendment before any of its runs (its folder must hold neither a registration
    nor a row); ``scale_hash``: the [scale] registration it amends, already checked."""
    ams = load_amendments()
    if name not in ams:
        raise ValueError(f"amendment {name!r} is unknown: use one of {sorted(ams)}")
    out = folder(name, scale_dir)
    if read_rows(out) or os.path.exists(os.path.join(out, REGISTRATION)):
        raise ValueError(
            f"{out} holds a registration or rows already: an amendment is frozen once, before "
            f"its runs (a changed one is a new amendment under a new name)"
        )
    doc = {
        "protocol_sha256": protocol_hash(name, scale_hash, ams),
        "amends_sha256": scale_hash,
        "registered_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit_before": confirm._commit(),
        "stage": {"name": stage_name(ams[name]), "runs": stage_runs(ams[name])},
        "amendment": ams[name],
        "note": "frozen before any of its runs; decides only the claims it names",
    }
    os.makedirs(out, exist_ok=True)
    atomic_write(os.path.join(out, REGISTRATION), jsonio.dumps(doc, indent=1))
    return doc


def check_registered(name: str, scale_dir: str, scale_hash: str) -> dict:
    """The amendment's registration, when today's table (and [scale]) are what it froze."""
    return confirm.frozen(
        os.path.join(folder(name, scale_dir), REGISTRATION),
        protocol_hash(name, scale_hash),
        f"python -m analysis.experiments.study.scale --register-amendment {name}",
        f"restore claims.toml's [amendment.{name}] table, its claims and [scale]",
    )


def read_rows(out: str) -> list[dict]:
    """An amendment folder's committed rows, one a finished run."""
    return jsonio.read_rows(os.path.join(out, ROWS))
