"""One study run: its name, its TrainConfig, and the runner that trains (or reuses) and evaluates
it — the study's stages (`analysis.experiments.study.study`) ask it for runs and read its rows.

Reuse follows the demo's rules (`analysis.experiments.demo.reuse`): a run trained to its steps
is not trained again, its evaluation is reused under the same key, and a rung starts from the
rung below's final checkpoint.
"""

from __future__ import annotations

import os
import shutil
import time

from analysis.experiments.demo import reuse as demo_reuse
from analysis.experiments.study import plan as SP
from lab.store import Store

__all__ = ["StudyStore", "run_name", "study_config", "Runner"]


class StudyStore(Store):
    """The store, marking every run it starts with ``"scale": "study"`` in its config."""

    def start_run(self, name, config, *args, **kwargs):
        return super().start_run(name, {**dict(config), "scale": "study"}, *args, **kwargs)


def run_name(prefix: str, scheme: str, seed: int, steps: int, seq_len: int) -> str:
    return f"{prefix}-{scheme}-s{seed}-T{seq_len}-{steps}"


def study_config(
    sc: SP.StudyScale,
    prefix: str,
    scheme: str,
    seed: int,
    steps: int,
    runs_dir,
    precision: str = "auto",
):
    """The TrainConfig of one study run (see `analysis.experiments.study.plan` for the recipe), in the
    study's `precision` (`study_precision`)."""
    from lab.training.trainconfig import make_config

    if scheme not in SP.SCHEMES:
        raise ValueError(f"scheme {scheme!r} is unknown: use one of {sorted(SP.SCHEMES)}")
    # a scheme without a cpu preset of its own is the stagger's model with its schedule changed
    own = {"pow2-stagger": "cpu-stagger", "pow2-fixed": "cpu-fixed", "search-best": "cpu-stagger"}
    preset = sc.preset or own.get(scheme, f"cpu-{scheme}")
    over = {
        **SP.SCHEMES[scheme],
        "model.seq_len": sc.seq_len,
        "tokens_per_step": sc.tokens_per_step,
        "micro_batch": min(32, sc.tokens_per_step // sc.seq_len),
        "steps": steps,
        "seed": seed,
        "min_lr_frac": 1.0,  # no decay: a rung continues the one below exactly
        "eval_every": 0,
        "ckpt_every": max(1, min(250, steps)),
        "keep_ckpts": 1,
        "run_dir": runs_dir,
        "name": run_name(prefix, scheme, seed, steps, sc.seq_len),
        "precision": precision,
        **sc.overrides,
    }
    if scheme != "dense":
        over["model.window"] = sc.window
    if scheme == "search-best":  # its α per layer: the preset's depth first
        layers = make_config(preset, over).model.n_layers
        over["model.schedule"] = list(SP.search_best_alphas(layers))
    return make_config(preset, over)


class Runner:
    """Trains and evaluates study runs, reusing finished ones; keeps the step-time estimates."""

    def __init__(self, sc, prefix, runs_dir, store_path, quiet, log, precision="auto"):
        self.sc, self.prefix, self.runs_dir = sc, prefix, runs_dir
        self.precision = precision
        self.store_path, self.quiet, self.log = store_path, quiet, log
        self.times = SP.StepTimes(sc.tokens_per_step, sc.prior_s_per_step, sc.eval_s)
        self.data = None
        self.trained, self.reused, self.evaluated = [], [], []
        self.results = {}  # name -> row

    def _measure(self, scheme: str, name: str) -> None:
        if not self.store_path:
            return
        with Store(self.store_path) as st:
            m = st.metrics(name)
        tps = m[m["name"] == "tokens_per_s"]["value"].dropna()
        if len(tps):
            self.times.add(scheme, self.sc.tokens_per_step / float(tps.median()))

    def done(self, scheme: str, seed: int, steps: int) -> bool:
        """Whether that run is trained already (the demo's rule, `demo_reuse.finished`)."""
        name = run_name(self.prefix, scheme, seed, steps, self.sc.seq_len)
        return demo_reuse.finished(os.path.join(self.runs_dir, name), name, steps, self.store_path)

    def run(self, scheme: str, seed: int, steps: int, below: int | None = None) -> dict:
        """Train (or reuse) and evaluate one run; ``below``: the lower rung to continue from."""
        from lab.training.dataload import load_data
        from lab.training.train import train

        cfg = study_config(self.sc, self.prefix, scheme, seed, steps, self.runs_dir, self.precision)
        if cfg.name in self.results:
            return self.results[cfg.name]
        run_dir = os.path.join(self.runs_dir, cfg.name)
        if demo_reuse.finished(run_dir, cfg.name, steps, self.store_path):
            self.reused.append(cfg.name)
        else:
            if below is not None and not os.path.isdir(run_dir):
                self._start_from(below, cfg, run_dir, scheme, seed)
            if self.data is None:
                self.data = load_data(cfg)  # one tokenised corpus for every run
            store = StudyStore(self.store_path) if self.store_path else None
            train(cfg, resume=True, quiet=self.quiet, data=self.data, store=store)
            self.trained.append(cfg.name)
        self._measure(scheme, cfg.name)
        row = {"name": cfg.name, "scheme": scheme, "seed": seed, "steps": steps}
        row.update(self._evaluate(run_dir, cfg))
        self.results[cfg.name] = row
        ppl = row["ppl"].get(1)
        self.log(
            f"   {cfg.name}: ppl {ppl:.2f}" if ppl is not None else f"   {cfg.name}: no perplexity"
        )
        return row

    def _start_from(self, below: int, cfg, run_dir: str, scheme: str, seed: int) -> None:
        """Copy the lower rung's final checkpoint (and tokenizer) into a new rung's folder."""
        low = os.path.join(
            self.runs_dir, run_name(self.prefix, scheme, seed, below, self.sc.seq_len)
        )
        ck = demo_reuse.checkpoint_id(low)
        if ck is None or ck["step"] != below:
            return
        os.makedirs(run_dir, exist_ok=True)
        for f in (ck["file"], ck["file"] + ".json", "tokenizer.json"):
            if os.path.exists(os.path.join(low, f)):
                shutil.copy2(os.path.join(low, f), os.path.join(run_dir, f))

    def _evaluate(self, run_dir: str, cfg) -> dict:
        from lab.evaluation.evalrun import evaluate_run

        sc = self.sc
        key = {
            **demo_reuse.evaluation_key(run_dir, sc.factors, sc.eval_limit, 0),
            "policies": ["recompute"],
        }
        lengths = [f * cfg.model.seq_len for f in sc.factors]
        saved = demo_reuse.cached(run_dir, key, cfg.name, lengths, self.store_path)
        if saved is None:
            t0 = time.perf_counter()
            ev = evaluate_run(
                run_dir,
                factors=sc.factors,
                policies=("recompute",),
                store_path=self.store_path,
                limit_windows=sc.eval_limit,
                log=(lambda *a: None),
            )
            ev["eval_s"] = time.perf_counter() - t0
            demo_reuse.save(run_dir, key, ev, {"skipped": "the study runs no battery"})
            self.evaluated.append(cfg.name)
        else:
            ev = saved[0]
        if ev.get("eval_s"):
            self.times.evals.append(float(ev["eval_s"]))
        ds = next(iter(ev["datasets"].values()))
        ppl = {
            int(c["factor"]): c["ppl"]
            for c in ds.get("cells", [])
            if c["policy"] == "recompute" and not c.get("skipped") and c.get("ppl") is not None
        }
        top = max(sc.factors)
        return {
            "ppl": ppl,
            "degradation": SP.degradation(ppl, top),
            "block_change": _block_change(ds, top),
            "alphas": ev.get("alphas"),
        }


def _block_change(ds: dict, factor: int) -> float | None:
    """The last block of the factor× windows against the same tokens in training-length windows
    (ppl ratio − 1): extrapolation without the window-averaging confound (SPEC §10.2)."""
    for c in ds.get("cells", []):
        if c["factor"] == factor and c["policy"] == "recompute" and not c.get("skipped"):
            b, t = c.get("blocks") or [], c.get("same_tokens") or []
            if len(b) > 1 and len(t) == len(b) and b[-1].get("ppl") and t[-1].get("ppl"):
                return b[-1]["ppl"] / t[-1]["ppl"] - 1
    return None
