"""The paper's training recipe, exactly resumable, on one process or under torchrun.

    AdamW β=(0.9, 0.95), eps 1e-8, weight decay 0.1 on ≥2-D tensors only (norm gains and θ
    excluded); peak LR 3e-4, 300 linear warm-up steps, cosine decay to 10 % of peak at the last
    step; global grad-norm clip 1.0; gradient accumulation to 32,768 tokens per optimizer step;
    bf16 autocast on CUDA (float32 on CPU); seed 42; 13,000 steps.

Exact resume: the batch of (step, micro-batch) is a pure function of the seed (`lab.data`), and a
checkpoint holds the model, the optimizer, the step and every RNG state, so a run killed at any
moment and resumed from its last good checkpoint reproduces the uninterrupted loss curve bit for
bit on CPU.  Checkpoints are written atomically with a SHA-256 sidecar (`lab.training.checkpoint`); the
config and its presets are `lab.training.trainconfig`, the optimizer's groups and LR schedule
`lab.training.optim`, the process group `lab.training.distributed`, stop requests
`lab.training.stop`.

Under ``torchrun --nproc_per_node=N`` the same entry point runs DistributedDataParallel (gloo on
CPU, NCCL on GPUs); each rank takes every N-th micro-batch of the global step, so N processes see
exactly the samples one process would.

Stop requests: a file named ``STOP`` in the run folder (``request_stop(run_dir)``, or
``touch runs/<name>/STOP``) ends the run after the step in progress: a checkpoint of that step is
written, the request file is removed, the store records a ``stopped`` event and the run's status,
and `train` returns normally (``summary["status"] == "stopped"``).  ``resume=True`` continues it.

For a launcher's progress line and ETA, rank 0 writes what it is doing to ``<run_dir>/phase.json``
(`lab.training.phases`) and logs ``tokens_per_s`` over the steps since the last log (evaluations left
out) and ``eval_s`` (the seconds each light evaluation took).

A run on the CPU registers with the machine's other lab jobs for the loop's duration and sets its
torch threads to its share of the cores at step boundaries (`lab.machine.cpu_share`: side by side, jobs
that each took every core ran 5–17× slower; ``FIBLAB_THREADS=N`` pins a run's threads).

The loop reads on one screen: the step (batch, forward, backward, clip, optimizer), then the
light evaluation, the stop request and the checkpoint as named steps below it.  What watches the
run — the store, the live sink, the bar, the phase file, the CPU share — is `lab.training.watch`'s
`RunWatch`, called at named moments.
"""

from __future__ import annotations

import contextlib
import math
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from lab.lm.model import FibLM
from lab.machine.precision import autocast, resolve_precision, workload_class
from lab.store.evalkind import EvalKind
from lab.training import phases
from lab.training.checkpoint import (
    check_resume_precision,
    latest_good_checkpoint,
    resume_point,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from lab.training.dataload import load_data
from lab.training.distributed import init_distributed
from lab.training.optim import lr_at, param_groups
from lab.training.phases import eval_tokens
from lab.training.sinks import LogSpec
from lab.training.stop import stop_requested
from lab.training.trainconfig import TrainConfig
from lab.training.watch import RunWatch

__all__ = ["TrainingDiverged", "dataset_name", "eval_sets", "mean_nll", "train"]


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite: the run stops with a message naming the step."""


# --------------------------------------------------------------------------------------------
# evaluation
# --------------------------------------------------------------------------------------------
@torch.no_grad()
def mean_nll(
    model: FibLM, batches, device: torch.device = torch.device("cpu"), precision: str | None = None
) -> tuple[float, int]:
    """Mean NLL per scored token over (x, y) batches, and the number of tokens actually scored."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        with autocast(device, precision):
            logits, _ = model(x)
        total += torch.nn.functional.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum"
        ).item()
        count += y.numel()
    model.train(was_training)
    if count == 0:
        raise ValueError(
            "no complete evaluation window: the held-out split is shorter than "
            "seq_len + 1 tokens; lower seq_len or raise val_tokens"
        )
    return total / count, count


# --------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------
def eval_sets(data, seq_len: int, batch: int, device, name: str = "val") -> dict:
    """{dataset name: fn(limit_windows) -> iterator of (x, y) batches} for every held-out split
    (one per mixture domain, else one called `name`)."""
    if hasattr(data, "domains"):
        return {
            n: (lambda lim, n=n: data.eval_windows(n, seq_len, "val", batch, lim, device))
            for n in data.names
        }
    return {name: lambda lim: data.eval_windows("val", seq_len, batch, lim, device)}


def dataset_name(spec: str) -> str:
    """Short name of a single-source spec: 'bible', or the file / folder name without suffix."""
    base = os.path.basename(spec.rstrip("/").split(":")[0]) or spec
    return os.path.splitext(base)[0] or base


# --------------------------------------------------------------------------------------------
# the loop
# --------------------------------------------------------------------------------------------
def train(
    cfg: TrainConfig,
    *,
    resume: bool = False,
    store_path: str | None = None,
    quiet: bool = False,
    data=None,
    restart: bool = False,
    log_to: LogSpec | None = None,
    store=None,
) -> dict:
    """Train (or resume) one run; returns a summary dict.  See the module docstring.
    ``restart``: when every checkpoint of the run is unreadable, set them aside and start again
    from step 0 (without it such a run is refused; `lab.training.checkpoint.resume_point`).
    ``log_to``: also send every metric, evaluation and α the store gets to a live sink
    (`lab.training.sinks`, e.g. TensorBoard); not part of the run's configuration or identity.
    ``store``: instead of opening ``store_path``, log into this store-shaped writer (a
    `lab.store.journal.StoreJournal` in the run folder, for a run on another machine whose
    driver alone writes the store; `fiblab.cluster.ray_run`)."""
    di = init_distributed()
    local_accum = _local_accum(cfg, di)
    run_dir = os.path.join(cfg.run_dir, cfg.name)
    watch = RunWatch(cfg, run_dir, di, quiet)
    ckpt = _checkpoint_to_resume(cfg, run_dir, di, watch, resume, restart)
    if data is None:
        data = _load_data(cfg, di, watch, resumed=run_dir if ckpt is not None else None)
    model, opt, precision, start = _build(cfg, di, watch, ckpt)
    ids = [di.device] if di.device.type == "cuda" else None
    ddp = DistributedDataParallel(model, device_ids=ids) if di.world > 1 else model
    watch.open(data, precision, start, store_path=store_path, store=store, log_to=log_to)
    tokens = eval_tokens(data, cfg.model.seq_len, cfg.eval_light_tokens)  # (light, final)
    evaluate = _evaluator(cfg, data, model, di, precision, watch, tokens)
    watch.begin(start, *tokens)
    losses: dict[int, float] = {}
    status, stopped_at, final = "failed", None, {}
    model.train()
    try:
        watch.take_share()
        for step in range(start + 1, cfg.steps + 1):
            watch.step()
            lr = lr_at(step, cfg)
            for group in opt.param_groups:
                group["lr"] = lr
            loss_sum = torch.zeros((), device=di.device)
            for m in range(local_accum):  # micro-batches; DDP syncs gradients on the last
                # the global micro-batch index carries the rank, so N ranks see one process's data
                x, y = data.get_batch(
                    "train", cfg.micro_batch, cfg.model.seq_len, cfg.seed, step,
                    micro=m * di.world + di.rank, rank=0, device=di.device,
                )  # fmt: skip
                last_micro = di.world == 1 or m == local_accum - 1
                with contextlib.nullcontext() if last_micro else ddp.no_sync():
                    with autocast(di.device, precision):
                        _, micro_loss = ddp(x, y)
                        (micro_loss / local_accum).backward()
                loss_sum += micro_loss.detach()
            if di.world > 1:
                dist.all_reduce(loss_sum)
            loss = (loss_sum / cfg.accum).item()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip).item()
            _check_finite(step, loss, gnorm, run_dir)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses[step] = loss
            watch.stepped(step, loss, lr, gnorm, model)

            if di.main and cfg.eval_every and step % cfg.eval_every == 0 and step < cfg.steps:
                with watch.paused():  # tokens/s counts training only
                    evaluate(step, EvalKind.light(), cfg.eval_light_tokens)
            stop = step < cfg.steps and stop_requested(run_dir, di)
            if di.main and (step % cfg.ckpt_every == 0 or step == cfg.steps or stop):
                _save(cfg, run_dir, step, model, opt, precision)
            if di.world > 1 and (step % cfg.ckpt_every == 0 or stop):
                dist.barrier()
            if stop:
                stopped_at = step
                break
        if stopped_at is None:
            final = evaluate(cfg.steps, EvalKind.recompute(), None) if di.main else {}
            status = "done"
        else:
            status = "stopped"
            watch.log(
                f"{cfg.name}: stopped by request at step {stopped_at} (checkpoint kept; "
                f"resume to continue)"
            )
    except BaseException as e:
        watch.failed(e, diverged=isinstance(e, TrainingDiverged))
        raise
    finally:
        watch.close(status, stopped_at)
    return {
        "name": cfg.name,
        "losses": losses,
        "final_ppl": final,
        "run_dir": run_dir,
        "alphas": model.alphas(),
        "status": status,
        "stopped_at": stopped_at,
    }


# --------------------------------------------------------------------------------------------
# the loop's named steps
# --------------------------------------------------------------------------------------------
def _local_accum(cfg: TrainConfig, di) -> int:
    """Micro-batches this rank runs per optimizer step."""
    if cfg.accum % di.world:
        raise ValueError(
            f"{cfg.accum} micro-batches per step do not split over {di.world} ranks: "
            f"choose tokens_per_step / (micro_batch × seq_len) divisible by "
            f"--nproc_per_node"
        )
    return cfg.accum // di.world


def _checkpoint_to_resume(cfg, run_dir, di, watch, resume: bool, restart: bool) -> dict | None:
    """The checkpoint to continue from (None: start at step 0).  Rank 0 decides and refuses
    before any work (checkpoints without ``resume``, or all unreadable without ``restart``)."""
    if resume and os.path.isdir(run_dir):
        watch.phase(phases.CHECKPOINT)
    if di.main:
        return resume_point(run_dir, cfg.name, resume=resume, restart=restart, log=watch.log)
    return latest_good_checkpoint(run_dir, watch.log) if resume else None  # what rank 0 left


def _load_data(cfg, di, watch, resumed: str | None):
    """The run's data; under torchrun rank 0 tokenises first and the others reuse its cache.
    ``resumed``: the run folder whose tokenizer.json the data must match."""
    if di.world > 1 and not di.main:
        dist.barrier()
    watch.phase(phases.DATA)
    data = load_data(cfg, progress=di.main and not watch.quiet, log=watch.log, resumed=resumed)
    if di.world > 1 and di.main:
        dist.barrier()
    return data


def _build(cfg: TrainConfig, di, watch, ckpt: dict | None):
    """The model, its optimizer, the precision it computes in, and the step to start after
    (from the checkpoint, whose precision must be this run's)."""
    watch.phase(phases.MODEL)
    torch.manual_seed(cfg.seed)
    model = FibLM(cfg.model).to(di.device)
    opt = torch.optim.AdamW(
        param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=cfg.betas, eps=cfg.eps
    )
    m = cfg.model  # auto: bf16 only where this CPU measured it faster for this shape
    workload = workload_class(
        "lm-train", m.n_layers, m.d_model, m.seq_len, cfg.micro_batch, m.attention
    )
    precision = resolve_precision(cfg.precision, di.device, workload)
    start = 0
    if ckpt is not None:
        check_resume_precision(ckpt, precision, cfg.name, cfg.precision)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        set_rng_state(ckpt["rng"])
        start = ckpt["step"]
        watch.log(f"resuming {cfg.name} from step {start}")
    return model, opt, precision, start


def _check_finite(step: int, loss: float, gnorm: float, run_dir: str) -> None:
    if not (math.isfinite(loss) and math.isfinite(gnorm)):
        raise TrainingDiverged(
            f"step {step}: loss {loss} / grad norm {gnorm} is not finite; "
            f"the last good checkpoint in {run_dir} is kept: lower the LR or resume "
            f"from it"
        )


def _save(cfg: TrainConfig, run_dir: str, step: int, model, opt, precision: str) -> None:
    """A checkpoint of this step: model, optimizer, step, every RNG state, config, precision."""
    state = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "step": step,
        "rng": rng_state(),
        "config": cfg.to_dict(),
        "precision": precision,
    }
    save_checkpoint(run_dir, step, state, cfg.keep_ckpts)


def _evaluator(cfg: TrainConfig, data, model, di, precision: str, watch, tokens):
    """``evaluate(step, kind, limit_tokens) -> {dataset: ppl}`` over every held-out set: a light
    evaluation on ``limit_tokens`` of each, or (None) the final one on all of it.  ``tokens``:
    (light, final) tokens scored, for the phase line."""
    sets = eval_sets(data, cfg.model.seq_len, cfg.eval_batch, di.device, dataset_name(cfg.data))
    light_tokens, full_tokens = tokens

    def evaluate(step: int, kind: EvalKind, limit_tokens: int | None) -> dict:
        final = limit_tokens is None
        limit = None if final else max(1, limit_tokens // cfg.model.seq_len)
        watch.evaluating(step, final, full_tokens if final else light_tokens)
        t0 = time.perf_counter()
        out = {}
        for name, batches in sets.items():
            loss, tokens = mean_nll(model, batches(limit), di.device, precision)
            out[name] = math.exp(loss)
            watch.evaluated_set(step, name, str(kind), loss, tokens, out[name])
        watch.evaluated(step, str(kind), out, time.perf_counter() - t0, final)
        return out

    return evaluate
