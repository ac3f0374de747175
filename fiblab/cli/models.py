"""Subcommands that take models out of the lab: export (a run → a save_pretrained or Hugging Face
folder) and sample (text from a run or an exported folder).  Torch is imported inside the
commands only, so `fiblab --help` stays light.

    fiblab export cpu-stagger --out models/cpu-stagger [--hf]
    fiblab sample models/cpu-stagger --prompt "In the beginning" [--max-new-tokens 64]
"""

from __future__ import annotations

import sys

from fiblab.cli.argtypes import (
    DEVICE_HELP,
    device_arg,
    nonneg_float,
    nonneg_int,
    positive_int,
    store_arg,
)
from lab.util import paths


def cmd_export(args) -> int:
    from lab.publish.export import export_run, resolve_run

    run_dir = resolve_run(args.run, args.runs)
    out = export_run(
        run_dir,
        args.out,
        store_path=args.store or None,
        hf=args.hf,
        log=lambda s: print(s, file=sys.stderr),
    )
    print(out)
    return 0


def cmd_sample(args) -> int:
    import time

    import torch

    from fiblab.cli.argtypes import resolve_device
    from lab.lm.generate import generate
    from lab.publish.export import open_model

    if args.top_k < 0:
        raise ValueError(f"--top-k {args.top_k} must be >= 0 (0: no cut)")
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads {args.threads} must be >= 1")
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    model, tok = open_model(args.model, args.runs, device, log=lambda s: print(s, file=sys.stderr))
    prompt = tok.encode(args.prompt) or [tok.eot_id]  # an empty prompt starts a document
    if len(prompt) > model.cfg.seq_len:
        prompt = prompt[-model.cfg.seq_len :]
    ids = torch.tensor([prompt], dtype=torch.long)  # (1, T)
    t_load = time.perf_counter()
    with torch.no_grad():  # the first forward loads the kernel and builds plans (≈ 2 s): not speed
        model(ids.to(next(model.parameters()).device))
    warm = time.perf_counter() - t_load
    t0 = time.perf_counter()
    out = generate(
        model,
        ids,
        args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k or None,
        seed=args.seed,
        stop_at_eot=args.stop_at_eot,
        eot_id=tok.eot_id,
    )
    dt = time.perf_counter() - t0
    new = out.shape[1] - ids.shape[1]
    print(tok.decode(out[0].tolist()))
    print(
        f"{new} tokens in {dt:.2f} s: {new / max(dt, 1e-9):.1f} tokens/s ({device}, "
        f"KV-cache-free; the first forward, {warm:.1f} s, not counted)",
        file=sys.stderr,
    )
    return 0


def add_models(subparsers) -> None:
    """Register `fiblab export` and `fiblab sample` on an argparse subparsers object."""
    s = subparsers.add_parser(
        "export",
        help="write a run's model as a save_pretrained (or Hugging Face) folder",
        description="Export a trained run: config.json, model.safetensors, the run's "
        "tokenizer.json and a model card README.md, from the run's config.json and newest good "
        "checkpoint (the training data is not read). Load it with fiblab.from_pretrained(DIR).",
    )
    s.add_argument("run", help="a run folder (runs/NAME) or a run name under --runs")
    s.add_argument(
        "--out",
        required=True,
        help="the folder to write (created; an earlier export there is replaced)",
    )
    s.add_argument(
        "--runs", default=paths.runs_dir(), help="folder of run directories (FIBLAB_RUNS sets it)"
    )
    s.add_argument(
        "--store",
        type=store_arg,
        default=paths.store_path(),
        help="experiment store (FIBLAB_STORE sets it) with the run's steps and final perplexity for the model card "
        "(default runs/fiblab.db; '' or an absent file: a card without perplexity)",
    )
    s.add_argument(
        "--hf",
        action="store_true",
        help="write a Hugging Face transformers checkpoint instead (LlamaForCausalLM; needs "
        "pip install 'fiblab[hf]')",
    )
    s.set_defaults(fn=cmd_export)

    s = subparsers.add_parser(
        "sample",
        help="generate text from a run or an exported model",
        description="Sample a continuation of --prompt (KV-cache-free; tokens/s on stderr) "
        "from a run folder / run name or a save_pretrained folder, decoded with its tokenizer.",
    )
    s.add_argument(
        "model",
        help="a run folder (runs/NAME), a run name under --runs, or a "
        "folder written by fiblab export / save_pretrained",
    )
    s.add_argument(
        "--prompt", default="", help="the text to continue (default: empty, a new document)"
    )
    s.add_argument(
        "--max-new-tokens", type=positive_int, default=64, help="tokens to generate (default 64)"
    )
    s.add_argument(
        "--temperature",
        type=nonneg_float,
        default=0.8,
        help="softmax temperature (default 0.8; 0: greedy argmax)",
    )
    s.add_argument(
        "--top-k",
        type=nonneg_int,
        default=50,
        help="sample among the k most likely tokens (default 50; 0: no cut)",
    )
    s.add_argument("--seed", type=nonneg_int, default=0, help="sampling seed (default 0)")
    s.add_argument(
        "--stop-at-eot", action="store_true", help="stop at the end-of-text token <|endoftext|>"
    )
    s.add_argument(
        "--runs", default=paths.runs_dir(), help="folder of run directories (FIBLAB_RUNS sets it)"
    )
    s.add_argument("--device", type=device_arg, default="auto", help=DEVICE_HELP)
    s.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="torch CPU threads (default: torch's choice)",
    )
    s.set_defaults(fn=cmd_sample)
