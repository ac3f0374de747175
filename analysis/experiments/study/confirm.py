"""The confirmatory runs (protocol rule R7, claims.toml): seeds no analysis has seen, trained
after the protocol was frozen, and the paper's LM claims decided from them alone.

    python -m analysis.experiments.study.confirm --register   # freeze: hash, date, commit
    python -m analysis.experiments.study.confirm              # train what is missing (resumable)
    python -m analysis.experiments.study.confirm --decide     # the confirmatory claims.json

Every planned run (claims.toml ``[protocol] confirmation``: schemes, seeds, steps, precision)
is the study's recipe (`analysis.experiments.study.runner`) under the prefix ``confirm``.  As each
run finishes, its row — the `analysis.ledger.evidence.LMRun` the ledger reads (perplexity at
1×/2×/4×, position bins, the later blocks against the same tokens, learned α's drift) and its
tier's setup — is appended to ``benchmarks/results/confirm/runs.jsonl``; that file, committed
after each session, *is* the evidence: a session on another machine trains only the rows it
lacks, and a reader re-derives every verdict from it (`evidence_from_rows`).  Checkpoints stay
in the runs folder and are never committed.  Training refuses unless the registration's hash is
today's protocol: rules changed after the freeze would decide runs they were not frozen for.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from analysis.experiments.study import registration as REG
from lab.util import jsonio
from lab.util.files import atomic_write

__all__ = [
    "RESULTS_DIR",
    "plan",
    "protocol_hash",
    "register",
    "check_registered",
    "read_rows",
    "evidence_from_rows",
    "run_confirmation",
    "decide",
    "report",
]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
RESULTS_DIR = os.path.join(ROOT, "benchmarks", "results", "confirm")
ROWS = "runs.jsonl"
REGISTRATION = "registration.json"


def _rules() -> dict:
    from analysis.ledger.ledger import load_rules

    return load_rules()


def plan(rules: dict | None = None) -> list[tuple[str, int]]:
    """The planned runs, (scheme, seed), in the order they are trained: seed by seed, each
    scheme in turn, so a session cut short leaves balanced sides."""
    conf = (rules or _rules())["confirmation"]
    seeds = {k: list(range(v[0], v[1] + 1)) for k, v in conf.items() if isinstance(v, list)}
    out, i = [], 0
    while any(i < len(s) for s in seeds.values()):
        out += [(k, s[i]) for k, s in seeds.items() if i < len(s)]
        i += 1
    return out


def protocol_hash() -> str:
    """The SHA-256 of the protocol this confirmation froze: every claim's test and the
    ``[protocol]`` rules — less the claims a later registration froze (``registration = "scale"``:
    `analysis.experiments.study.scale`), which post-date it and carry their own hash."""
    from analysis.ledger import ledger

    paper, lab = ledger.load_claims()
    own = [c for c in paper + lab if "registration" not in c]
    return ledger.protocol_sha256(ledger.protocol(own, ledger.load_rules()))


def register(out_dir: str = RESULTS_DIR) -> dict:
    """Freeze the protocol before any confirmatory run: its hash, the date, the commit and the
    plan, in ``registration.json``.  Refused once a run exists (a registration after results
    would be no registration)."""
    if read_rows(out_dir):
        raise ValueError(
            f"{os.path.join(out_dir, ROWS)} holds confirmatory runs already: the protocol was "
            f"frozen before them ({os.path.join(out_dir, REGISTRATION)}); it cannot be again"
        )
    return REG.freeze(
        out_dir,
        protocol_hash(),
        plan=[list(p) for p in plan()],
        rules=_rules(),
        note="frozen before any confirmatory run was trained; the runs are decided by this "
        "protocol alone (claims.toml rule R7)",
    )


def check_registered(out_dir: str = RESULTS_DIR) -> dict:
    """The registration, when today's protocol is the one it froze; ValueError otherwise."""
    return REG.frozen(
        os.path.join(out_dir, REGISTRATION),
        protocol_hash(),
        "python -m analysis.experiments.study.confirm --register",
        "the confirmatory runs are decided by the frozen one; restore claims.toml's rules, or "
        "register a new confirmation with fresh seeds",
    )


def read_rows(out_dir: str = RESULTS_DIR) -> list[dict]:
    """The committed rows, one a finished confirmatory run."""
    return jsonio.read_rows(os.path.join(out_dir, ROWS))


def _row(run, scale: str, setup: dict, scheme: str, seed: int) -> dict:
    d = dataclasses.asdict(run)
    d["ext"] = {str(k): v for k, v in run.ext.items()}
    d["frozen"] = {str(k): v for k, v in run.frozen.items()}
    return {"scheme": scheme, "seed": seed, "scale": scale, "setup": setup, "run": d}


def evidence_from_rows(rows: list[dict], source: str = "confirmatory runs"):
    """The ledger's `Evidence` from committed rows (`read_rows`): one LM tier per setup."""
    from analysis.ledger.evidence import Evidence, LMRun, group_lms

    triples = []
    for r in rows:
        d = dict(r["run"])
        d["ext"] = {int(k): v for k, v in (d.get("ext") or {}).items()}
        d["frozen"] = {int(k): v for k, v in (d.get("frozen") or {}).items()}
        d["bins"] = None if d.get("bins") is None else tuple(d["bins"])
        d["ppl"] = float("nan") if d.get("ppl") is None else d["ppl"]
        triples.append((LMRun(**d), r["scale"], r["setup"]))
    return Evidence(tiers=group_lms(triples), sources=[source])


STUDY_JSON = os.path.join(ROOT, "benchmarks", "results", "study", "study.json")


def evidence_from_study_json(path: str = STUDY_JSON):
    """The committed study's runs (``study.json``: every rung, comparison, longer and lab run)
    as the ledger's `Evidence`, so the exploratory verdicts are re-derived under today's rules
    from the committed file alone.  study.json keeps each run's perplexity at 1×/2×/4× (the
    ledger's basis: every held-out window) and the later blocks against the same tokens, but
    neither position bins nor learned α's logged path: the claims that read those are not
    tested from it, and say so through the ledger's usual "not tested here"."""
    from analysis.ledger.evidence import Evidence, LMRun, group_lms, run_label
    from lab.ladder.schemes import SCHEMES

    with open(path) as f:
        res = json.load(f)
    from analysis.experiments.study.plan import StudyScale
    from analysis.experiments.study.runner import study_config

    labels = {s.short: s.paper for s in SCHEMES} | {"search-best": "fib/custom"}
    seq_len, window = res["settings"]["seq_len"], res["settings"]["window"]
    sc = StudyScale(**res["settings"])
    model = study_config(sc, "study", "stagger", 1, 500, "runs").model  # every scheme's shape
    rows = list(res["calibration"]["rows"])
    for block in (res.get("comparison"), res.get("longer"), res.get("lab")):
        for rs in ((block or {}).get("runs") or {}).values():
            rows += rs
    seen, triples = set(), []
    for r in rows:
        if r["name"] in seen:
            continue
        seen.add(r["name"])
        ppl = {int(k): float(v) for k, v in (r.get("ppl") or {}).items() if v is not None}
        label = labels[r["scheme"]]
        if r["scheme"] == "coprime":  # at L=4 the coprime schedule is the stagger
            label = run_label(label, {"n_layers": 4, "schedule": "coprime"})
        bc = r.get("block_change")
        run = LMRun(
            name=r["name"], label=label, W=None if r["scheme"] == "dense" else window,
            seed=r["seed"], ppl=ppl.get(1, float("nan")), ext=ppl,
            same_tokens=None if bc is None else 100.0 * float(bc),
        )  # fmt: skip
        setup = {"steps": r["steps"], "seq_len": seq_len, "d_model": model.d_model,
                 "n_layers": model.n_layers}  # fmt: skip
        triples.append((run, "study", setup))
    return Evidence(tiers=group_lms(triples), sources=[os.path.relpath(path, ROOT)])


def _lmrun(store_path: str, name: str, block_change):
    """The ledger's reading of one finished run from the store (`evidence.store_lms`), with
    the later blocks' cost against the same tokens (`runner._block_change`, in %)."""
    from analysis.ledger.evidence import store_lms
    from lab.store import Store

    with Store(store_path) as st:
        (got,) = store_lms(st, runs=[name])
    run, scale, setup = got
    if block_change is not None:
        run = dataclasses.replace(run, same_tokens=100.0 * float(block_change))
    return run, scale, setup


def run_confirmation(
    runs_dir: str = "runs/confirm",
    store_path: str = "runs/confirm/fiblab.db",
    out_dir: str = RESULTS_DIR,
    limit: int | None = None,
    log=print,
    settings=None,
    rules: dict | None = None,
) -> list[dict]:
    """Train the planned runs the rows lack (at most ``limit``), appending each row as it
    finishes; returns the rows.  Refuses unless the registration holds (`check_registered`).
    ``settings`` (a `StudyScale`, default the study's) and ``rules`` (default claims.toml's
    ``[protocol]``) let the test suite run a smoke-sized plan."""
    from analysis.experiments.study import plan as SP
    from analysis.experiments.study.runner import Runner

    check_registered(out_dir)
    rules = rules or _rules()
    conf = rules["confirmation"]
    rows = read_rows(out_dir)
    have = {(r["scheme"], r["seed"]) for r in rows}
    planned = plan(rules)
    todo = [p for p in planned if p not in have][: limit if limit is not None else None]
    sc = dataclasses.replace(settings or SP.STUDY_SCALES["study"], seq_len=conf["seq_len"])
    log(
        f"confirmation: {len(have)} of {len(planned)} runs committed; training {len(todo)} "
        f"({conf['steps']} steps, T={conf['seq_len']}, {conf['precision']})"
    )
    os.makedirs(runs_dir, exist_ok=True)
    r = Runner(sc, conf["prefix"], runs_dir, store_path, True, log, conf["precision"])
    path = os.path.join(out_dir, ROWS)
    for scheme, seed in todo:
        res = r.run(scheme, seed, conf["steps"])
        run, scale, setup = _lmrun(store_path, res["name"], res.get("block_change"))
        row = _row(run, scale, setup, scheme, seed)
        jsonio.append_row(path, row)  # one line a run: a cut leaves whole rows
        rows.append(row)
    return rows


#: how far a retrained run's held-out ln ppl may sit from its committed row's (0.1 %): the
#: study's learned seed 1 retrained on another CPU came within 0.001 ppl of ≈ 42
RESTORE_TOLERANCE = 1e-3


def finished_folder(row: dict, runs_dir: str = "runs/confirm") -> str | None:
    """The checkpoint folder of a confirmation row when it holds the finished run (its newest
    intact checkpoint at the row's registered steps), else None.  A folder alone is not enough:
    a restore killed part-way leaves one whose checkpoint is an earlier step — a model the row
    does not describe, which no side study may score (`restore` finishes it first)."""
    from analysis.experiments.demo.reuse import finished

    name = row["run"]["name"]
    folder = os.path.join(runs_dir, name)
    return folder if finished(folder, name, row["setup"]["steps"], None) else None


def restore(
    schemes=None,
    runs_dir: str = "runs/confirm",
    store_path: str = "runs/confirm/fiblab.db",
    out_dir: str = RESULTS_DIR,
    log=print,
    limit: int | None = None,
    settings=None,
    rules: dict | None = None,
    names: set[str] | None = None,
) -> list[str]:
    """Retrain the committed confirmation runs (of ``schemes``, named in ``names``; all by
    default) whose finished checkpoint is missing here (no folder, or one a killed restore left
    part-trained: it resumes) — the side studies that read them (`scale_probes`) run where the
    checkpoints are, and they are not committed.  Each retrained run must reproduce its
    committed row (held-out ln ppl within `RESTORE_TOLERANCE`) or ValueError says which did
    not: a model that is not the one the rows describe never enters a verdict.  Returns the
    names retrained."""
    import math

    from analysis.experiments.study import plan as SP
    from analysis.experiments.study.runner import Runner

    check_registered(out_dir)
    conf = (rules or _rules())["confirmation"]
    rows = [r for r in read_rows(out_dir) if schemes is None or r["scheme"] in schemes]
    rows = [r for r in rows if names is None or r["run"]["name"] in names]
    todo = [r for r in rows if finished_folder(r, runs_dir) is None]  # missing or part-trained
    todo = todo[: limit if limit is not None else None]
    if not todo:
        return []
    sc = dataclasses.replace(settings or SP.STUDY_SCALES["study"], seq_len=conf["seq_len"])
    os.makedirs(runs_dir, exist_ok=True)
    r = Runner(sc, conf["prefix"], runs_dir, store_path, True, log, conf["precision"])
    done = []
    for row in todo:
        res = r.run(row["scheme"], row["seed"], conf["steps"])
        if res["name"] != row["run"]["name"]:
            raise ValueError(f"retrained {res['name']} for the row of {row['run']['name']}")
        run, *_ = _lmrun(store_path, res["name"], res.get("block_change"))
        got, want = math.log(run.ppl), math.log(row["run"]["ppl"])
        if not abs(got - want) <= RESTORE_TOLERANCE:
            raise ValueError(
                f"{res['name']} retrained to ppl {run.ppl:.4f}, its committed row says "
                f"{row['run']['ppl']:.4f} (ln ppl off by {got - want:+.4f} > {RESTORE_TOLERANCE}): "
                f"not the model the rows describe; check the precision and torch version"
            )
        log(f"   {res['name']}: reproduced (ppl {run.ppl:.4f}, row {row['run']['ppl']:.4f})")
        done.append(res["name"])
    return done


def decide(out_dir: str = RESULTS_DIR, study_json: str = STUDY_JSON):
    """The verdicts of R7, written as ``claims.json`` beside the rows: each claim decided on the
    confirmatory rows alone (with the lab's stored probe grids and timings for the claims that
    are not LM claims), and beside it, as ``exploratory``, the committed study re-decided under
    the same frozen protocol.  A paper claim's verdict is the confirmatory one: "held" only when
    the fresh seeds hold it.  Also returns the registration."""
    from analysis.ledger import evidence as le
    from analysis.ledger import ledger

    doc = check_registered(out_dir)
    rows = read_rows(out_dir)
    ev = evidence_from_rows(rows)
    ev.tiers += le.probe_tiers([], None, le.stored_grids())[0]
    le.add_timings(ev, le.stored_timings())
    led = ledger.build(ev)
    explore = {e.id: e for e in ledger.build(evidence_from_study_json(study_json)).entries}
    for e in led.entries:
        x = explore.get(e.id)
        if x is not None:
            e.exploratory = {"verdict": x.verdict, "label": x.label, "here": x.here,
                             "tier": x.evidence.get("tier")}  # fmt: skip
    out = led.document()
    out["confirmation"] = {
        "registration": {k: doc[k] for k in ("protocol_sha256", "registered_at", "commit_before")},
        "runs": len(rows),
        "planned": len(plan()),
        "complete": len(rows) >= len(plan()),
    }
    atomic_write(os.path.join(out_dir, "claims.json"), jsonio.dumps(out, indent=1))
    atomic_write(os.path.join(out_dir, "report.md"), report(out))
    return led, doc


def _cell(v) -> str:
    return "" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v)


def _table_row(c: dict) -> str:
    """One claim's line: verdicts, the test (a vs b, or a vs its threshold), the effect in its
    unit with its 95 % CI (positive: the claim's direction), Holm p, seeds, power."""
    from analysis.ledger import verdict_words

    s = c.get("stats") or {}
    x = c.get("exploratory") or {}
    v = c["verdict"] + (f" ({c['label']})" if c.get("label") else "")
    xv = x.get("verdict", "") + (f" ({x['label']})" if x.get("label") else "")
    ci, eff = s.get("ci"), s.get("effect")
    tested = ci is not None and eff is not None
    test = f"{s['a']} vs {s['b']}" if tested and s.get("a") else ""
    gap = f"{eff:+.4f} [{ci[0]:+.4f}, {ci[1]:+.4f}]" if tested else ""
    unit = verdict_words.unit(s.get("metric")) if tested else ""
    power = _cell(s.get("power"))
    if s.get("seeds_needed"):
        power += f" (0.8 needs {s['seeds_needed']} a side)"
    who = "" if c["source"] == "paper" else " (lab)"
    return (
        f"| `{c['id']}`{who} | **{v}** | {xv} | {test} | {gap} | {unit} | "
        f"{_cell(s.get('p_adjusted'))} | {verdict_words.seeds(s)} | {power} |"
    )


def report(doc: dict) -> str:
    """The confirmation in one table (``report.md`` beside claims.json): each LM claim's
    confirmatory verdict, the committed study's beside it, the registered test's numbers on the
    fresh seeds, and the power the seeds had for the paper's size — so "not shown" reads as
    "no effect" or "too few seeds" at a glance."""
    conf = doc["confirmation"]
    reg = conf["registration"]
    rows = [c for c in doc["claims"] if str(c.get("kind", "")).startswith("lm")]
    counts: dict[str, int] = {}
    for c in rows:
        if c["source"] == "paper":
            counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
    lines = [
        "# The confirmation: the paper's LM claims on seeds no analysis had seen",
        "",
        f"Protocol SHA-256 `{reg['protocol_sha256'][:12]}…`, frozen {reg['registered_at']} "
        f"(before commit `{reg['commit_before'][:7]}`); {conf['runs']} of {conf['planned']} "
        f"planned runs committed (`runs.jsonl`){'' if conf['complete'] else ' — INCOMPLETE'}. "
        "Written by `python -m analysis.experiments.study.confirm --decide` from the committed "
        "rows; every number re-derives from them (claims.json holds each test's statistics).",
        "",
        "The paper's claims, confirmatory: "
        + ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        + ". A claim is held only when these runs hold it (rule R7); the exploratory column is "
        "the committed study (`study.json`) re-decided under the same protocol.",
        "",
        "*Effect*: the registered test's estimate, positive in the claim's direction — a gap "
        "between two arms (a vs b), or a threshold rule's distance past its threshold (a vs a "
        "number: one-sample t); for a claim of several tests, the first that did not hold, "
        "else its first (claims.json lists every test). *n*: runs a side (one number: a "
        "one-sample test). *Power*: as a lone test (no Holm over the family, which lowers it) "
        "— for the paper's size, where it states one; for a tie, the power of its equivalence "
        "test to show a true tie within its margin at α/2, the level a lone tie faces.",
        "",
        "| claim | confirmatory | exploratory | test | effect, 95 % CI | unit | Holm p | n | "
        "power |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [_table_row(c) for c in rows]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--register", action="store_true", help="freeze the protocol (once)")
    ap.add_argument("--decide", action="store_true", help="decide from the committed rows")
    ap.add_argument("--limit", type=int, default=None, help="train at most this many runs")
    ap.add_argument("--runs", default="runs/confirm", help="runs folder (checkpoints)")
    ap.add_argument("--store", default=None, help="store (default: RUNS/fiblab.db)")
    args = ap.parse_args(argv)
    try:
        REG.check_limit(args.limit)
        if args.register:
            doc = register()
            print(f"registered protocol {doc['protocol_sha256'][:12]}… at {doc['registered_at']}")
        elif args.decide:
            led, _ = decide()
            print(led.summary())
        else:
            run_confirmation(args.runs, args.store or os.path.join(args.runs, "fiblab.db"),
                             limit=args.limit)  # fmt: skip
    except ValueError as e:
        print(f"confirm: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
