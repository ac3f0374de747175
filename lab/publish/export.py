"""A run folder's model without its data: `run_model` (config.json + the newest good
checkpoint), `run_card` (steps and final perplexity from the store), `export_run` (a
`lab.publish.pretrained` folder, or with ``hf=True`` a Hugging Face one through `lab.publish.hf.save_hf`) and
`open_model` (a run folder or a save_pretrained folder, with its tokenizer, for sampling).

    fiblab export runs/cpu-stagger --out models/cpu-stagger [--hf]
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lab.data.tokenizer import BPETokenizer
from lab.lm.model import FibLM
from lab.publish.pretrained import ModelCard, from_pretrained, is_pretrained, save_pretrained


@dataclass
class RunModel:
    """A trained run's model at its newest good checkpoint (no data loaded)."""

    model: FibLM
    config: object  # lab.training.trainconfig.TrainConfig
    step: int
    name: str
    run_dir: str
    precision: str | None = None  # what it trained in (its checkpoint's); None: not recorded

    @property
    def tokenizer_file(self) -> str | None:
        """The run's tokenizer.json (None: trained on token files, no tokenizer)."""
        path = os.path.join(self.run_dir, "tokenizer.json")
        return path if os.path.isfile(path) else None


def run_model(run_dir: str, device="cpu", log: Callable[[str], None] = print) -> RunModel:
    """The model of a run folder: config.json and the newest checkpoint that passes its
    checksum, loaded on `device` in eval mode.  Reads no training data."""
    from lab.lm.typedconfig import config_from_dict
    from lab.training.checkpoint import latest_good_checkpoint, list_checkpoints
    from lab.training.trainconfig import TrainConfig

    _not_a_file(run_dir)
    if not os.path.isdir(run_dir):
        raise ValueError(f"run folder {run_dir!r} does not exist; give runs/<name>")
    cfg_file = os.path.join(run_dir, "config.json")
    try:
        with open(cfg_file) as f:
            raw = json.load(f)
    except FileNotFoundError:
        raise ValueError(
            f"{cfg_file} is missing: {run_dir!r} is not a training run folder "
            f"(fiblab train writes config.json first)"
        ) from None
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(
            f"{cfg_file} is unreadable ({e}); restore it from the store "
            f"(Store.config(run)) or retrain"
        ) from None
    cfg = config_from_dict(raw, TrainConfig, source=cfg_file)
    ckpts = list_checkpoints(run_dir)
    if not ckpts:
        raise ValueError(
            f"no checkpoint (ckpt_<step>.pt) in {run_dir!r}: train the run first, "
            f"or resume it with fiblab train --resume"
        )
    ckpt = latest_good_checkpoint(run_dir, log)
    if ckpt is None:
        raise ValueError(
            f"every checkpoint in {run_dir!r} is corrupt or incomplete "
            f"({', '.join(os.path.basename(p) for p in ckpts)}); retrain or "
            f"restore one"
        )
    model = FibLM(cfg.model)
    try:
        model.load_state_dict(ckpt["model"])
    except (KeyError, RuntimeError) as e:
        raise ValueError(
            f"the checkpoint in {run_dir!r} does not fit the model of its config.json: {e}"
        ) from None
    model.to(device).eval()
    name = cfg.name or os.path.basename(os.path.abspath(run_dir))
    return RunModel(model, cfg, int(ckpt["step"]), name, run_dir, ckpt.get("precision"))


def _not_a_file(run: str) -> None:
    if os.path.isfile(run):  # e.g. runs/<name>/config.json: "does not exist" misled
        raise ValueError(f"{run!r} is a file, not a run folder: give the folder holding it")


def resolve_run(run: str, runs_dir: str = "runs") -> str:
    """RUN as given: a folder (runs/NAME), else a run name under runs_dir."""
    _not_a_file(run)
    if os.path.isdir(run):
        return run
    under = os.path.join(runs_dir, run)
    if os.sep not in run and os.path.isdir(under):
        return under
    raise ValueError(
        f"run {run!r} is neither a folder nor a run under {runs_dir!r}: give runs/NAME, "
        f"a run name with --runs DIR, or a save_pretrained folder"
    )


def run_card(r: RunModel, store_path: str | None) -> ModelCard:
    """The card of a run: its data and steps, and the held-out perplexity the store has for
    the checkpoint's step (kind "recompute" at the training length); none without a store."""
    ppl: dict[str, float] = {}
    if store_path and os.path.isfile(store_path):
        from lab.store import Store
        from lab.store.evalkind import EvalKind

        with Store(store_path) as st:
            df = st.evals(r.name)
        T = r.model.cfg.seq_len
        rows = df[
            (df["step"] == r.step)
            & (df["kind"] == str(EvalKind.recompute()))
            & (df["context_len"] == T)
        ]
        ppl = {str(d): float(math.exp(loss)) for d, loss in zip(rows["dataset"], rows["loss"])}
    return ModelCard(
        name=r.name,
        data=str(r.config.data),
        steps=r.step,
        total_steps=int(r.config.steps),
        perplexity=ppl,
        context_len=r.model.cfg.seq_len if ppl else None,
    )


def export_run(
    run_dir: str,
    out_dir: str,
    store_path: str | None = None,
    *,
    hf: bool = False,
    log: Callable[[str], None] = print,
) -> Path:
    """Write a run's newest good checkpoint as a save_pretrained folder (or, ``hf``, as a
    Hugging Face transformers checkpoint); returns out_dir."""
    from lab.training.checkpoint import list_checkpoints

    if os.path.abspath(out_dir) == os.path.abspath(run_dir):
        raise ValueError(f"--out {out_dir!r} is the run folder itself: give another folder")
    if list_checkpoints(out_dir):
        raise ValueError(f"--out {out_dir!r} is a run folder (it holds checkpoints): give another")
    r = run_model(run_dir, log=log)
    if hf:
        try:
            from lab.publish.hf import save_hf
        except ModuleNotFoundError as e:
            if e.name != "lab.publish.hf":
                raise
            raise ValueError(
                "--hf needs lab.publish.hf (the Hugging Face export), absent in this fiblab"
            ) from None
        return Path(save_hf(r.model, out_dir, tokenizer_file=r.tokenizer_file))
    return save_pretrained(
        r.model, out_dir, tokenizer=r.tokenizer_file, card=run_card(r, store_path)
    )


def open_model(
    path: str, runs_dir: str = "runs", device="cpu", log: Callable[[str], None] = print
) -> tuple[FibLM, BPETokenizer]:
    """(model, tokenizer) of a save_pretrained folder or a run (folder or name under runs_dir)."""
    from lab.publish.pretrained import load_tokenizer

    if is_pretrained(path):
        return from_pretrained(path, device), load_tokenizer(path)
    r = run_model(resolve_run(path, runs_dir), device, log)
    if r.tokenizer_file is None:
        raise ValueError(
            f"run {r.run_dir!r} has no tokenizer.json (trained on token files): sampling "
            f"needs text in and out; train it on text, or export it with a tokenizer"
        )
    return r.model, BPETokenizer.load(r.tokenizer_file)
