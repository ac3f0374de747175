"""`fiblab train`: one language-model run (a preset or a config.json, overrides), here or on Ray."""

from __future__ import annotations

import os
import sys

from fiblab.cli.argtypes import STORE_HELP, positive_int, store_arg
from fiblab.cli.exports import add_log_options, log_spec
from fiblab.cli.sweep import add_ray_options
from lab.util import paths


def add_train(sub) -> None:
    """`fiblab train`: the preset or config, data, overrides, resume, precision."""
    s = sub.add_parser("train", help="train a language model (paper recipe or a CPU preset)")
    s.add_argument(
        "--preset",
        metavar="TRAIN_PRESET",
        default=None,
        help="training preset, e.g. fib-stagger-w12, dense, cpu-stagger (default: none; give "
        "--preset or --config)",
    )
    s.add_argument(
        "--config",
        default=None,
        metavar="CONFIG_JSON",
        help="instead of --preset: a run's config.json (runs/NAME/config.json) to re-run or "
        "vary (default: none)",
    )
    s.add_argument(
        "--data",
        default=None,
        help="bible (default), a file/folder/.jsonl(.gz)/.parquet/"
        ".bin, a folder or quoted glob of shards, a save_to_disk folder, or a mixture "
        "name=source@weight,...",
    )
    s.add_argument(
        "--tokenizer",
        default=None,
        metavar="TOKENIZER_JSON",
        help="a Hugging Face tokenizer.json (e.g. a Llama tokenizer) to tokenise the text with "
        "and to read .bin ids against; the model's vocab_size becomes its size (default: a "
        "BPE trained on the text at the model's vocab_size)",
    )
    s.add_argument(
        "--steps", type=positive_int, default=None, help="optimizer steps (default: the preset's)"
    )
    s.add_argument("--seed", type=int, default=None, help="seed (default: the preset's)")
    s.add_argument("--name", default=None, help="run name (default: the preset)")
    s.add_argument(
        "--override",
        nargs="*",
        action="extend",
        metavar="KEY=VALUE",
        help="any TrainConfig field, or model.<ModelConfig field> (betas=0.9,0.95, "
        "model.schedule=stagger or a comma list of alphas, model.train_seq_len=none); "
        "run_dir defaults to FIBLAB_RUNS or runs/",
    )
    s.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16"],
        default=None,
        help="auto (default): bf16 autocast on CUDA; on a CPU bf16 only where `fiblab doctor` "
        "measured it faster for this workload with the loss unchanged, else fp32",
    )
    s.add_argument("--resume", action="store_true", help="continue from the last good checkpoint")
    s.add_argument(
        "--restart",
        action="store_true",
        help="when every checkpoint of the run is corrupt: set them aside (*.corrupt) and train "
        "it again from step 0 (without it such a run is refused)",
    )
    s.add_argument("--store", type=store_arg, default=paths.store_path(), help=STORE_HELP)
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    add_log_options(s)
    add_ray_options(s)  # the run as one Ray task (fiblab.cluster.ray_run.train_on_ray)
    s.set_defaults(fn=cmd_train)


def cmd_train(args) -> int:
    from lab.lm.typedconfig import split_overrides, with_fields
    from lab.training.train import TrainingDiverged, train
    from lab.training.trainconfig import config_from_file, make_config

    keys = ("steps", "data", "tokenizer", "name", "seed", "precision")
    overrides = with_fields(split_overrides(args.override), {k: getattr(args, k) for k in keys})
    if args.config and args.preset:
        raise ValueError(
            f"--preset {args.preset} and --config {args.config}: give one (the config file "
            f"already holds the whole configuration; vary it with --override)"
        )
    if args.config:
        cfg = config_from_file(args.config, overrides)
    elif args.preset:
        from lab.util.paths import runs_dir

        overrides.setdefault("run_dir", runs_dir())  # FIBLAB_RUNS, else runs/
        cfg = make_config(args.preset, overrides)
    else:
        raise ValueError(
            "fiblab train needs --preset NAME (e.g. cpu-stagger) or --config "
            "runs/NAME/config.json (a run's configuration, to re-run or vary it)"
        )
    if cfg.steps < 1:
        raise ValueError(f"steps={cfg.steps} must be an integer >= 1 (optimizer steps)")
    folder = os.path.join(cfg.run_dir, cfg.name)
    if args.resume and not os.path.isdir(folder):  # a mistyped name started a new run
        raise ValueError(
            f"--resume: run {cfg.name!r} has no folder {folder}, so nothing to continue: check "
            f"the name (and FIBLAB_RUNS), or drop --resume to start it"
        )
    if getattr(args, "ray", None):
        return _train_on_ray(args, cfg)
    try:
        out = train(
            cfg,
            resume=args.resume,
            restart=args.restart,
            store_path=args.store or None,
            quiet=args.quiet,
            log_to=log_spec(args),
        )
    except TrainingDiverged as e:
        print(f"fiblab: training stopped: {e}", file=sys.stderr)
        return 3
    if out.get("status") == "stopped":
        print(
            f"{out['name']}: stopped at step {out.get('stopped_at')} by request; continue it "
            f"with the same command and --resume"
        )
        return 0
    if out["final_ppl"]:
        print(
            f"{out['name']}: final held-out perplexity "
            + ", ".join(f"{k} {v:.3f}" for k, v in out["final_ppl"].items())
            + f"  (run dir {out['run_dir']})"
        )
    return 0


def _train_on_ray(args, cfg) -> int:
    """``fiblab train … --ray ADDRESS``: the run as one Ray task (`fiblab.cluster.ray_run.train_on_ray`),
    this process the store's one writer; prints what a local run prints."""
    from fiblab.cli.sweep import ray_kwargs
    from fiblab.cluster.ray_cluster import check_reachable
    from lab.training.train import TrainingDiverged

    check_reachable(args.ray)
    if args.restart or log_spec(args) is not None:
        raise ValueError(
            f"--restart and --log/--tensorboard are for a run here, not with --ray {args.ray}: "
            f"drop them (on Ray, a run's checkpoints and journal are in its run folder)"
        )
    from fiblab.cluster.ray_run import train_on_ray

    try:
        r = train_on_ray(
            cfg, args.store or None, resume=args.resume, progress=not args.quiet, **ray_kwargs(args)
        )
    except TrainingDiverged as e:
        print(f"fiblab: training stopped: {e}", file=sys.stderr)
        return 3
    if r.outcome == "stopped":
        print(
            f"{r.name}: stopped at step {r.stopped_at} by request; continue it with the same "
            f"command and --resume"
        )
        return 0
    if r.final_ppl:
        print(
            f"{r.name}: final held-out perplexity "
            + ", ".join(f"{k} {v:.3f}" for k, v in r.final_ppl.items())
            + f"  (run dir {os.path.join(cfg.run_dir, cfg.name)}; on Ray: {r.outcome})"
        )
    return 0
