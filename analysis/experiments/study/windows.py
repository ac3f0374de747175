"""The study's evaluation noise: each compared run's per-window held-out NLL at its training
length, and the paired window bootstrap (`analysis.statistics.eval_noise`) of every perplexity comparison
the study decides, so its report shows evaluation noise beside seed noise.

A run's per-window NLL is scored once (all held-out windows, the run's own precision) and kept
beside its checkpoint as ``window-nll-<step>.npy``; its exp(mean) is the run's perplexity at 1×,
which the tests check against the study's evaluation.
"""

from __future__ import annotations

import math
import os

import numpy as np

from analysis.statistics.eval_noise import seed_se, window_bootstrap
from lab.util.files import atomic_path

__all__ = ["window_nll", "comparison_noise"]


def window_nll(run_dir: str) -> np.ndarray:
    """(W,) mean NLL per token of every held-out window of the run's training length, from its
    newest checkpoint, in the precision it trained in (cached in the run folder)."""
    from lab.evaluation.evalrun import open_run
    from lab.evaluation.evaluate import heldout_splits, position_nll
    from lab.machine.precision import autocast, resolve_precision
    from lab.training.train import dataset_name

    r = open_run(run_dir, log=lambda *a: None)
    path = os.path.join(run_dir, f"window-nll-{r.step}.npy")
    if os.path.exists(path):
        return np.load(path)
    T = r.model.cfg.seq_len
    toks = next(iter(heldout_splits(r.data, dataset_name(r.config.data)).values()))
    with autocast("cpu", resolve_precision(r.precision or "auto", "cpu")):
        pn = position_nll(r.model, toks, T, per_window=True)
    per = pn.window_sums / T  # (W,)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, per)
    return per


def comparison_noise(runs: dict, pairs, runs_dir: str) -> dict:
    """{claim: {"eval": EvalNoise as JSON, "seed_se": …}} for each (claim, a, b) of ``pairs``
    whose sides both have runs in ``runs`` ({scheme: [row with "name"]}); the gap in ln ppl."""
    cache: dict[str, np.ndarray] = {}

    def side(scheme):
        rows = runs.get(scheme) or []
        out = []
        for row in rows:
            if row["name"] not in cache:
                cache[row["name"]] = window_nll(os.path.join(runs_dir, row["name"]))
            out.append(cache[row["name"]])
        return np.stack(out) if out else None

    noise = {}
    for claim, a, b in pairs:
        xa, xb = side(a), side(b)
        if xa is None or xb is None:
            continue
        ev = window_bootstrap(xa, xb)
        noise[claim] = {
            "eval": ev.to_json(),
            "seed_se": seed_se(xa.mean(axis=1), xb.mean(axis=1)),
        }
        if not math.isfinite(noise[claim]["seed_se"]):
            noise[claim]["seed_se"] = None
    return noise
