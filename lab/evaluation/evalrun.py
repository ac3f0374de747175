"""A trained run's evaluations, end to end: load a run folder (`open_run`, `load_run`), run every
measurement of `lab.evaluation.evaluate` on its held-out data (`evaluate_run`) and log the results to the
store (`log_extrapolation`, `log_position_bins`).

Store conventions (``Store.log_eval(run, step, dataset, context_len, loss, tokens, kind)``;
the kind is a `lab.store.evalkind.EvalKind`, stored as its text)
    kind "recompute"         whole windows at context_len, rung set recomputed (what training
                             logs at the training length)
    kind "freeze"            whole windows at context_len, rung set frozen at the training length
    kind "recompute:block{j}" position-matched block j of windows of length context_len
    kind "freeze:block{j}"   the same under the frozen rung set
    kind "bin{b}"            b = 0…7, context_len = training length: mean NLL in position bin b,
                             tokens = tokens in the bin
    A row is not replaced by one scored on fewer tokens (a ``--limit`` run never overwrites the
    full evaluation).

    fiblab eval runs/cpu-stagger --factors 1 2 4 8 [--policies recompute freeze] [--no-bins]
                [--limit N] [--store PATH] [--json]
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from lab.evaluation.evaluate import (
    ExtrapolationResult,
    Perplexity,
    PositionBins,
    heldout_splits,
    length_extrapolation,
    position_bins,
    position_resolved,
    train_len,
)
from lab.lm.model import FibLM
from lab.lm.modelconfig import RUNG_POLICIES
from lab.machine.precision import autocast, resolve_precision
from lab.store.evalkind import EvalKind


# --------------------------------------------------------------------------------------------
# the experiment store
# --------------------------------------------------------------------------------------------
def _existing_tokens(store, run: str) -> dict[tuple, int]:
    """{(step, dataset, context_len, kind): tokens} of the run's logged evaluations."""
    df = store.evals(run)
    return {
        (int(s), d, int(c), k): int(t)
        for s, d, c, k, t in zip(
            df["step"], df["dataset"], df["context_len"], df["kind"], df["tokens"]
        )
    }


def _log_rows(
    store, run: str, step: int, dataset: str, rows: list[tuple[int, EvalKind, Perplexity]]
) -> int:
    """Write (context_len, kind, Perplexity) rows, never replacing a row with more tokens."""
    have = _existing_tokens(store, run)
    written = 0
    for ctx, kind, p in rows:
        if have.get((int(step), dataset, int(ctx), str(kind)), -1) > p.tokens:
            continue
        store.log_eval(run, step, dataset, ctx, p.loss, p.tokens, kind=str(kind))
        written += 1
    return written


def log_extrapolation(store, run: str, step: int, dataset: str, result: ExtrapolationResult) -> int:
    """Log every evaluated cell: kind "recompute"/"freeze" for the whole windows and
    "recompute:block{j}"/"freeze:block{j}" for the position-matched blocks, at context_len = the
    cell's window length.  Returns the number of rows written."""
    rows = []
    for c in result.cells:
        if c.skipped or c.whole is None:
            continue
        rows.append((c.context_len, EvalKind.of_policy(c.policy), c.whole))
        rows += [
            (c.context_len, EvalKind.of_policy(c.policy, j), b) for j, b in enumerate(c.blocks)
        ]
    return _log_rows(store, run, step, dataset, rows)


def log_position_bins(store, run: str, step: int, dataset: str, bins: PositionBins) -> int:
    """Log kind "bin{b}" rows at context_len = the training length (loss = mean NLL in the bin,
    tokens = tokens in the bin).  Returns the number of rows written."""
    rows = [
        (bins.seq_len, EvalKind.of_bin(b), Perplexity(loss, tok))
        for b, (loss, tok) in enumerate(zip(bins.loss, bins.tokens))
    ]
    return _log_rows(store, run, step, dataset, rows)


# --------------------------------------------------------------------------------------------
# trained runs
# --------------------------------------------------------------------------------------------
@dataclass
class LoadedRun:
    model: FibLM
    config: object  # lab.training.trainconfig.TrainConfig
    data: object  # PreparedData or Mixture
    step: int
    name: str
    run_dir: str
    precision: str | None = None  # what it trained in; its evaluations compute in the same


def open_run(
    run_dir: str, data_dir: str | None = None, device="cpu", log: Callable[[str], None] = print
) -> LoadedRun:
    """Load a run folder: config.json, the newest checkpoint that passes its checksum, and the
    prepared data (cached in data_dir, default <run folder's parent>/data, the training layout;
    prepared from the run's source if absent)."""
    from lab.publish.export import run_model
    from lab.training.dataload import load_data

    r = run_model(run_dir, device, log)  # config.json + the newest good checkpoint
    model, cfg, step = r.model, r.config, r.step
    if data_dir is None:  # runs/<name>/ beside runs/data/, else as trained
        root = os.path.dirname(os.path.abspath(run_dir))
        if not os.path.isdir(os.path.join(root, "data")) and os.path.isdir(
            os.path.join(cfg.run_dir, "data")
        ):
            root = cfg.run_dir
    else:
        data_dir = os.path.abspath(data_dir.rstrip("/"))
        if os.path.basename(data_dir) != "data":
            raise ValueError(
                f"data_dir {data_dir!r} must be a training cache folder, named 'data' (runs/data)"
            )
        root = os.path.dirname(data_dir)
    cfg = replace(cfg, run_dir=root)
    data = load_data(cfg)
    tok_file = os.path.join(run_dir, "tokenizer.json")
    tok = getattr(data, "tokenizer", None)
    if tok is not None and os.path.isfile(tok_file):
        from lab.data.tokenizer import BPETokenizer

        if BPETokenizer.load(tok_file).sha256() != tok.sha256():
            raise ValueError(
                f"the prepared data's tokenizer differs from {tok_file}: the "
                f"held-out tokens would not be the ones the run was trained on; "
                f"pass the run's data cache as data_dir"
            )
    name = cfg.name or os.path.basename(os.path.abspath(run_dir))
    return LoadedRun(model, cfg, data, step, name, run_dir, r.precision)


def load_run(run_dir: str, data_dir: str | None = None, device="cpu"):
    """(model, TrainConfig, data) of a trained run folder; see `open_run`."""
    r = open_run(run_dir, data_dir, device)
    return r.model, r.config, r.data


def _ensure_run(store, r: LoadedRun) -> None:
    from lab.store.connection import UnknownRunError

    try:
        store.config(r.name)
    except UnknownRunError:
        store.start_run(
            r.name,
            r.config.to_dict(),
            kind="lm",
            preset=getattr(r.config, "preset", "") or None,
            seed=r.config.seed,
            run_dir=r.run_dir,
        )
        done = r.step >= r.config.steps
        store.set_status(
            r.name,
            "done" if done else "pending",
            None if done else f"registered by fiblab eval at step {r.step} of {r.config.steps}",
        )


def evaluate_run(
    run_dir: str,
    factors: Sequence[int] = (1, 2, 4),
    policies: Sequence[str] = RUNG_POLICIES,
    bins: bool = True,
    store_path: str | None = None,
    limit_windows: int | None = None,
    batch_size: int = 8,
    device="cpu",
    data_dir: str | None = None,
    log: Callable[[str], None] = print,
    precision: str | None = None,
) -> dict:
    """Every evaluation of a trained run, per held-out domain: perplexity at the training length,
    length extrapolation (factors × policies, position-matched blocks, new rungs) and position
    bins; logged to the store at `store_path` under the run's name and checkpoint step.
    Returns a JSON-ready dict.

    ``precision`` None: the precision the run trained in (its checkpoint's), so a run trained
    in fp32 on an AVX2 machine is not evaluated in bf16 on an AMX one (`auto` answers
    differently there) and its numbers stay comparable with its training's; a checkpoint that
    predates the field is evaluated in this machine's `auto`."""
    r = open_run(run_dir, data_dir, device, log)
    prec = resolve_precision(precision or r.precision, device)
    with autocast(device, prec):
        out, results = _evaluate_loaded(
            r, factors, policies, bins, limit_windows, batch_size, device
        )
    out["precision"] = prec
    if store_path:
        from lab.store import Store

        with Store(store_path) as st:
            _ensure_run(st, r)
            for ds, (ext, pb) in results.items():
                log_extrapolation(st, r.name, r.step, ds, ext)
                if pb is not None:
                    log_position_bins(st, r.name, r.step, ds, pb)
    return out


def _evaluate_loaded(r: LoadedRun, factors, policies, bins, limit_windows, batch_size, device):
    """(the JSON-ready dict, {dataset: (extrapolation, bins)}) of `evaluate_run`."""
    from lab.training.train import dataset_name

    T = train_len(r.model)
    factors = list(factors)
    out = {
        "run": r.name,
        "run_dir": r.run_dir,
        "step": r.step,
        "train_len": T,
        "attention": r.model.cfg.attention,
        "schedule": _jsonable(r.model.cfg.schedule),
        "alphas": r.model.alphas(),
        "datasets": {},
    }
    results = {}
    for ds, toks in heldout_splits(r.data, dataset_name(r.config.data)).items():
        ext = length_extrapolation(
            r.model, toks, factors, policies, batch_size, limit_windows, device, ds
        )
        pb = None
        if bins:
            one = next(
                (c.positions for c in ext.cells if c.factor == 1 and c.positions is not None), None
            )
            pb = (
                position_bins(one)
                if one is not None
                else position_resolved(r.model, toks, batch_size, limit_windows, device)
            )
        base = next((c.whole for c in ext.cells if c.factor == 1 and c.whole), None)
        out["datasets"][ds] = {
            "perplexity": base.to_dict() if base else None,
            **ext.to_dict(),
            "bins": pb.to_dict() if pb else None,
        }
        results[ds] = (ext, pb)
    return out, results


def _jsonable(x):
    return list(x) if isinstance(x, tuple) else x
