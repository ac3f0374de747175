"""The scale study's registered plan (claims.toml ``[scale]`` and its ``[amendment.*]``
tables): the stages, the settings of a cell, the hashes frozen before any run, and the committed
rows.  What trains (`analysis.experiments.study.scale`) and what decides
(`analysis.experiments.study.scale_verdicts`) both read it; it imports neither.

An **amendment** is a cell the registered plan lacks, registered apart — its own table, hash,
folder (``benchmarks/results/scale/amendment-<name>/``) and rows, frozen before its runs — that
decides only the claims it names, so nothing decided before it is looked at again.  Its hash
covers its table, the tests of its claims and the [scale] hash it amends.
"""

from __future__ import annotations

import dataclasses
import os

from analysis.experiments.study import confirm
from analysis.experiments.study import registration as REG
from lab.util import jsonio

__all__ = [
    "RESULTS_DIR",
    "Stage",
    "load_scale",
    "stages",
    "amendment_stages",
    "cell_settings",
    "run_prefix",
    "protocol_hash",
    "register",
    "check_registered",
    "read_rows",
    "missing",
    "load_amendments",
    "amendment_folder",
    "amendment_stage_name",
    "amendment_runs",
    "amendment_hash",
    "register_amendment",
    "is_registered",
    "check_amendment",
    "amendment_rows",
]

RESULTS_DIR = os.path.join(confirm.ROOT, "benchmarks", "results", "scale")
ROWS = "runs.jsonl"
REGISTRATION = "registration.json"


@dataclasses.dataclass(frozen=True)
class Stage:
    """One resumable stage: a cell (L, T) and the (scheme, seed) runs it trains; ``amendment``
    names the registered amendment it belongs to (below), whose window it trains at."""

    name: str
    cell: tuple[int, int]
    runs: tuple[tuple[str, int], ...]
    amendment: str | None = None


def load_scale(path: str | None = None) -> dict:
    """claims.toml's ``[scale]`` table."""
    import tomllib

    from analysis.ledger.ledger import CLAIMS_PATH

    with open(path or CLAIMS_PATH, "rb") as f:
        return dict(tomllib.load(f)["scale"])


def _seeds(spec: dict) -> list[tuple[str, int]]:
    """Seed by seed, each scheme in turn: a stage cut short leaves balanced sides."""
    seeds = {k: list(range(v[0], v[1] + 1)) for k, v in spec.items()}
    out, i = [], 0
    while any(i < len(s) for s in seeds.values()):
        out += [(k, s[i]) for k, s in seeds.items() if i < len(s)]
        i += 1
    return out


def stages(scale: dict | None = None) -> list[Stage]:
    """The registered stages, in ``[scale] order``."""
    sc = scale or load_scale()
    by_name = {}
    for L, T in sc["cells"]:
        if [L, T] != list(sc["from_confirmation"]):
            by_name[f"L{L}-T{T}"] = Stage(f"L{L}-T{T}", (L, T), tuple(_seeds(sc["schemes"])))
    L, T = sc["depth"]["cell"]
    by_name[f"L{L}-T{T}-depth"] = Stage(
        f"L{L}-T{T}-depth", (L, T), tuple(_seeds(sc["depth"]["schemes"]))
    )
    return [by_name[n] for n in sc["order"]]


def amendment_stages(amendments: dict | None = None) -> list[Stage]:
    """Each registered amendment's stage (claims.toml ``[amendment.*]``)."""
    ams = load_amendments() if amendments is None else amendments
    return [
        Stage(amendment_stage_name(am), tuple(am["cell"]), amendment_runs(am), name)
        for name, am in ams.items()
    ]


def cell_settings(cell: tuple[int, int], base=None, window: int | None = None):
    """The study's `StudyScale` (or ``base``) at a cell: its length, and its depth as a model
    override; ``window``: an amendment's W (else the study's)."""
    from analysis.experiments.study import plan as SP

    L, T = cell
    base = base or SP.STUDY_SCALES["study"]
    if window is not None:
        base = dataclasses.replace(base, window=window)
    return dataclasses.replace(base, seq_len=T, overrides={**base.overrides, "model.n_layers": L})


def run_prefix(scale: dict, cell) -> str:
    return f"{scale['prefix']}-L{cell[0]}"  # run_name adds the scheme, seed, T and steps


# ------------------------------------------------------------------------------- registration
def protocol_hash(scale: dict | None = None) -> str:
    """The SHA-256 of the scale protocol: the ``[scale]`` table, the tests of the claims it
    registered (``registration = "scale"``) and of the depth claims it decides."""
    from analysis.ledger import ledger

    sc = scale or load_scale()
    paper, lab = ledger.load_claims()
    mine = [
        c
        for c in paper + lab
        if c.get("registration") == "scale" or c["id"] in sc["depth"]["claims"]
    ]
    proto = ledger.protocol(mine, ledger.load_rules())
    proto["scale"] = sc
    return ledger.protocol_sha256(proto)


def register(out_dir: str = RESULTS_DIR) -> dict:
    """Freeze the scale protocol before any of its runs: hash, date, commit, stages."""
    _refuse_if_frozen(out_dir, "a changed study is a new registration in a new folder")
    return REG.freeze(
        out_dir,
        protocol_hash(),
        stages=[dataclasses.asdict(s) for s in stages()],
        scale=load_scale(),
        note="frozen before any scale run was trained; decided by this protocol alone "
        "(claims.toml, the scale study's section)",
    )


def _refuse_if_frozen(out_dir: str, instead: str) -> None:
    """A protocol is frozen once, before its runs: refuse a folder that holds a registration
    or rows already, saying what to do ``instead``."""
    if read_rows(out_dir) or os.path.exists(os.path.join(out_dir, REGISTRATION)):
        raise ValueError(
            f"{out_dir} holds a registration or rows already: a protocol is frozen once, before "
            f"its runs ({instead})"
        )


def check_registered(out_dir: str = RESULTS_DIR) -> dict:
    """The registration, when today's ``[scale]`` protocol is the one it froze; else ValueError
    naming the fix (`registration.frozen`, the confirmation's same check)."""
    return REG.frozen(
        os.path.join(out_dir, REGISTRATION),
        protocol_hash(),
        "python -m analysis.experiments.study.scale --register",
        "restore claims.toml's [scale] section and its claims",
    )


def read_rows(out_dir: str = RESULTS_DIR) -> list[dict]:
    """The committed rows, one a finished scale run."""
    return jsonio.read_rows(os.path.join(out_dir, ROWS))


def missing(rows: list[dict], scale: dict | None = None) -> dict[str, int]:
    """Per registered stage, its planned runs without a committed row."""
    have = {(r["stage"], r["scheme"], r["seed"]) for r in rows}
    return {
        st.name: sum((st.name, k, seed) not in have for k, seed in st.runs)
        for st in stages(scale or load_scale())
    }


# --------------------------------------------------------------------------------- amendments
def load_amendments(path: str | None = None) -> dict[str, dict]:
    """claims.toml's ``[amendment.*]`` tables, by name."""
    import tomllib

    from analysis.ledger.ledger import CLAIMS_PATH

    with open(path or CLAIMS_PATH, "rb") as f:
        return {k: dict(v) for k, v in tomllib.load(f).get("amendment", {}).items()}


def amendment_folder(name: str, scale_dir: str) -> str:
    """Where an amendment's registration and rows live: beside [scale]'s, a folder of its own."""
    return os.path.join(scale_dir, f"amendment-{name}")


def amendment_stage_name(am: dict) -> str:
    L, T = am["cell"]
    return f"L{L}-T{T}-W{am['window']}"


def amendment_runs(am: dict) -> tuple[tuple[str, int], ...]:
    """(scheme, seed), seed by seed, each scheme in turn (as [scale]'s stages)."""
    return tuple(_seeds(am["schemes"]))


def amendment_hash(name: str, scale_hash: str, amendments: dict | None = None) -> str:
    """SHA-256 of the amendment's table, the tests of the claims it decides and the hash of the
    [scale] protocol it amends."""
    from analysis.ledger import ledger

    am = (load_amendments() if amendments is None else amendments)[name]
    paper, lab = ledger.load_claims()
    mine = [c for c in paper + lab if c["id"] in am["claims"]]
    proto = ledger.protocol(mine, ledger.load_rules())
    proto["amendment"] = {"name": name, **am, "amends_sha256": scale_hash}
    return ledger.protocol_sha256(proto)


def register_amendment(name: str, scale_dir: str, scale_hash: str) -> dict:
    """Freeze the amendment before any of its runs (its folder must hold neither a registration
    nor a row); ``scale_hash``: the [scale] registration it amends, already checked.  It may
    only name claims [scale] left undecided ("not tested here" or "pending" in the committed
    claims.json): deciding a claim again on new runs would be a second look."""
    ams = load_amendments()
    if name not in ams:
        raise ValueError(f"amendment {name!r} is unknown: use one of {sorted(ams)}")
    decided = _decided(scale_dir)
    seen = [c for c in ams[name]["claims"] if c in decided]
    if seen:
        raise ValueError(
            f"amendment {name!r} names {seen}, which [scale] decided already "
            f"({', '.join(decided[c] for c in seen)}): an amendment decides only what was left "
            f"undecided"
        )
    out = amendment_folder(name, scale_dir)
    _refuse_if_frozen(out, "a changed amendment is a new one under a new name")
    return REG.freeze(
        out,
        amendment_hash(name, scale_hash, ams),
        amends_sha256=scale_hash,
        stage={"name": amendment_stage_name(ams[name]), "runs": amendment_runs(ams[name])},
        amendment=ams[name],
        note="frozen before any of its runs; decides only the claims it names",
    )


def _decided(scale_dir: str) -> dict[str, str]:
    """{claim: verdict} of the claims the committed claims.json decides (none without one)."""
    import json

    try:
        with open(os.path.join(scale_dir, "claims.json"), encoding="utf-8") as f:
            doc = json.load(f)
    except OSError:
        return {}
    parts = [doc.get("depth", {}), doc.get("battery", {}), {"trend": doc.get("trend", {})}]
    return {
        c: v["verdict"]
        for part in parts
        for c, v in part.items()
        if v.get("verdict") not in (None, "pending", "not tested here")
    }


def is_registered(name: str, scale_dir: str) -> bool:
    """Whether the amendment's folder holds a registration (`check_amendment` says if it is
    still today's)."""
    return os.path.exists(os.path.join(amendment_folder(name, scale_dir), REGISTRATION))


def check_amendment(name: str, scale_dir: str, scale_hash: str) -> dict:
    """The amendment's registration, when today's table (and [scale]) are what it froze."""
    return REG.frozen(
        os.path.join(amendment_folder(name, scale_dir), REGISTRATION),
        amendment_hash(name, scale_hash),
        f"python -m analysis.experiments.study.scale --register-amendment {name}",
        f"restore claims.toml's [amendment.{name}] table, its claims and [scale]",
    )


def amendment_rows(out: str) -> list[dict]:
    """An amendment folder's committed rows, one a finished run."""
    return jsonio.read_rows(os.path.join(out, ROWS))
