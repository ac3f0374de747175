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
(`lab.training.runphase`) and logs ``tokens_per_s`` over the steps since the last log (evaluations left
out) and ``eval_s`` (the seconds each light evaluation took).

A run on the CPU registers with the machine's other lab jobs for the loop's duration and sets its
torch threads to its share of the cores at step boundaries (`lab.machine.cpu_share`: side by side, jobs
that each took every core ran 5–17× slower; ``FIBLAB_THREADS=N`` pins a run's threads).

The loop, its evaluation and its store logging share the run's state step by step, so they stay
one module.
"""

from __future__ import annotations

import contextlib
import math
import os
import time

import torch
import torch.distributed as dist

from lab.evaluation.evalkind import EvalKind
from lab.lm.model import FibLM
from lab.machine.cpu_share import Share
from lab.machine.precision import autocast, resolve_precision, workload_class
from lab.store.variant import provenance
from lab.training import runphase
from lab.training.checkpoint import (
    check_resume_precision,
    latest_good_checkpoint,
    resume_point,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from lab.training.distributed import init_distributed
from lab.training.optim import lr_at, param_groups
from lab.training.rundata import load_data
from lab.training.runlog import LogSpec, alpha_scalars, eval_tag, open_sink
from lab.training.runphase import eval_tokens, write_phase
from lab.training.stop import STOP_FILE, mark_stopped, stop_requested
from lab.training.trainconfig import TrainConfig
from lab.util import jsonio
from lab.util.progress import bar as progress_bar

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
    (`lab.training.runlog`, e.g. TensorBoard); not part of the run's configuration or identity.
    ``store``: instead of opening ``store_path``, log into this store-shaped writer (a
    `lab.store.journal.StoreJournal` in the run folder, for a run on another machine whose
    driver alone writes the store; `fiblab.cluster.ray_run`)."""
    di = init_distributed()
    accum = cfg.accum
    if accum % di.world:
        raise ValueError(
            f"{accum} micro-batches per step do not split over {di.world} ranks: "
            f"choose tokens_per_step / (micro_batch × seq_len) divisible by "
            f"--nproc_per_node"
        )
    local_accum = accum // di.world
    run_dir = os.path.join(cfg.run_dir, cfg.name)
    log = (lambda *a: None) if (quiet or not di.main) else print
    phase = (lambda *a, **k: write_phase(run_dir, *a, **k)) if di.main else (lambda *a, **k: None)
    if resume and os.path.isdir(run_dir):
        phase(runphase.CHECKPOINT)
    if di.main:  # refuses before any work: checkpoints without --resume, or all unreadable
        ckpt = resume_point(run_dir, cfg.name, resume=resume, restart=restart, log=log)
    else:  # rank 0 decides (and sets unreadable ones aside); the others read what is left
        ckpt = latest_good_checkpoint(run_dir, log) if resume else None
    if data is None:
        if di.world > 1 and not di.main:
            dist.barrier()  # rank 0 tokenises first, the others reuse
        resumed = run_dir if ckpt is not None else None  # its tokenizer.json must be ours
        phase(runphase.DATA)
        data = load_data(cfg, progress=di.main and not quiet, log=log, resumed=resumed)
        if di.world > 1 and di.main:
            dist.barrier()

    phase(runphase.MODEL)
    torch.manual_seed(cfg.seed)
    model = FibLM(cfg.model).to(di.device)
    opt = torch.optim.AdamW(
        param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=cfg.betas, eps=cfg.eps
    )
    start = 0
    m = cfg.model  # auto: bf16 only where this CPU measured it faster for this shape
    workload = workload_class(
        "lm-train", m.n_layers, m.d_model, m.seq_len, cfg.micro_batch, m.attention
    )
    precision = resolve_precision(cfg.precision, di.device, workload)  # what this run computes in
    if ckpt is not None:
        check_resume_precision(ckpt, precision, cfg.name, cfg.precision)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        set_rng_state(ckpt["rng"])
        start = ckpt["step"]
        log(f"resuming {cfg.name} from step {start}")
    ddp = (
        torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[di.device] if di.device.type == "cuda" else None
        )
        if di.world > 1
        else model
    )

    writer, store = store, None
    if di.main and (store_path or writer is not None):
        from lab.store import Store

        store = writer if writer is not None else Store(store_path)
        stored = {**cfg.to_dict(), "provenance": provenance(data, precision)}
        store.start_run(
            cfg.name,
            stored,  # lab.store.variant reads the provenance: data hash and precision
            kind="lm",
            preset=cfg.preset or None,
            seed=cfg.seed,
            run_dir=run_dir,
            resume=start > 0,  # a resumed run keeps its first started_at
        )
        store.log_event(cfg.name, "resume" if start else "start", f"step {start}")
    if di.main:
        os.makedirs(run_dir, exist_ok=True)
        with open(os.path.join(run_dir, "config.json"), "w") as f:
            jsonio.dump(cfg.to_dict(), f, indent=1, default=str)
        if getattr(data, "tokenizer", None) is not None:  # the run's artefacts together
            data.tokenizer.save(os.path.join(run_dir, "tokenizer.json"))
    sets = eval_sets(data, cfg.model.seq_len, cfg.eval_batch, di.device, dataset_name(cfg.data))
    sink = open_sink(log_to, cfg.name, resume_step=start) if di.main else None

    light_tokens, full_tokens = eval_tokens(data, cfg.model.seq_len, cfg.eval_light_tokens)

    def run_eval(step: int, kind: EvalKind, limit_tokens: int | None) -> dict:
        out = {}
        limit = None if limit_tokens is None else max(1, limit_tokens // cfg.model.seq_len)
        n = full_tokens if limit is None else light_tokens
        what = runphase.FINAL_EVAL if limit is None else f"{runphase.EVALUATING} at step {step}"
        phase(what + (f" ({n:,} tokens)" if n else ""))
        t0 = time.perf_counter()
        for name, batches in sets.items():
            loss, tokens = mean_nll(model, batches(limit), di.device, precision)
            out[name] = math.exp(loss)
            if store:
                store.log_eval(
                    cfg.name, step, name, cfg.model.seq_len, loss, tokens, kind=str(kind)
                )
            if sink:
                T = cfg.model.seq_len
                sink.scalars(step, {eval_tag(name, str(kind), T, T): out[name]})
        log(f"step {step} {kind} eval: " + ", ".join(f"{k} ppl {v:.2f}" for k, v in out.items()))
        took = {"eval_s": time.perf_counter() - t0}  # what a light evaluation costs: for ETAs
        if store and limit is not None:
            store.log_metrics(cfg.name, step, took)
        if sink and limit is not None:
            sink.scalars(step, took)
        phase(runphase.TRAINING)
        return out

    losses: dict[int, float] = {}
    tokens_per_step = cfg.tokens_per_step
    bar = None
    if di.main and not quiet:
        bar = progress_bar(desc=cfg.name, total=cfg.steps, initial=start, unit="step")
    phase(runphase.FIRST_STEP, start_step=start, steps=cfg.steps, eval_every=cfg.eval_every)
    phase(runphase.FIRST_STEP, light_eval_tokens=light_tokens, full_eval_tokens=full_tokens)
    t_last = time.perf_counter()
    t_logged, steps_logged = t_last, 0  # tokens/s averages the steps since the last log
    t_beat, last = t_last, None  # the last heartbeat; the last step completed
    model.train()
    status = "failed"
    stopped_at = None
    # the machine's cores shared with the other lab jobs, step by step (lab.machine.cpu_share)
    rank = f" rank {di.rank}" if di.world > 1 else ""
    share = Share("train", cfg.name + rank, log=bar.write if bar else log)
    try:
        if di.device.type == "cpu":
            share.join()
        for step in range(start + 1, cfg.steps + 1):
            share.step()
            lr = lr_at(step, cfg)
            for group in opt.param_groups:
                group["lr"] = lr
            loss_sum = torch.zeros((), device=di.device)
            for m in range(local_accum):
                g = m * di.world + di.rank  # global micro-batch index
                x, y = data.get_batch(
                    "train",
                    cfg.micro_batch,
                    cfg.model.seq_len,
                    cfg.seed,
                    step,
                    micro=g,
                    rank=0,
                    device=di.device,
                )
                sync = (
                    contextlib.nullcontext()
                    if (di.world == 1 or m == local_accum - 1)
                    else ddp.no_sync()
                )
                with sync, autocast(di.device, precision):
                    _, loss = ddp(x, y)
                    (loss / local_accum).backward()
                loss_sum += loss.detach()
            if di.world > 1:
                dist.all_reduce(loss_sum)
            step_loss = (loss_sum / accum).item()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            if not (math.isfinite(step_loss) and math.isfinite(gnorm.item())):
                raise TrainingDiverged(
                    f"step {step}: loss {step_loss} / grad norm {gnorm.item()} is not finite; "
                    f"the last good checkpoint in {run_dir} is kept: lower the LR or resume "
                    f"from it"
                )
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses[step] = step_loss
            last = step
            now = time.perf_counter()
            tok_s = tokens_per_step / max(now - t_last, 1e-9)
            t_last = now
            steps_logged += 1
            if step == start + 1:
                phase(runphase.TRAINING)
            if di.main and now - t_beat >= runphase.BEAT_S:  # the live view's step between logs
                runphase.beat(run_dir, step)
                t_beat = now
            if step % cfg.log_every == 0 or step == cfg.steps:
                row = {
                    "loss": step_loss,
                    "lr": lr,
                    "grad_norm": gnorm.item(),
                    # over the steps since the last log (checkpoint saves included, evaluations
                    # not): the rate an ETA can multiply by the steps left
                    "tokens_per_s": tokens_per_step * steps_logged / max(now - t_logged, 1e-9),
                }
                t_logged, steps_logged = now, 0
                if store:
                    store.log_metrics(cfg.name, step, row)
                if sink:
                    sink.scalars(step, row)
            if cfg.model.learned and (step % cfg.alpha_every == 0 or step == 1):
                alphas = model.alphas()
                if store:
                    store.log_alphas(cfg.name, step, alphas)
                if sink:
                    sink.scalars(step, alpha_scalars(alphas))
            if bar:
                bar.update(1)
                bar.set_postfix(loss=f"{step_loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{tok_s:.0f}")
            if di.main and cfg.eval_every and step % cfg.eval_every == 0 and step < cfg.steps:
                run_eval(step, EvalKind.light(), cfg.eval_light_tokens)
                t_last = time.perf_counter()  # tokens/s counts training only
                t_logged += t_last - now
            stop = step < cfg.steps and stop_requested(run_dir, di)
            if di.main and (step % cfg.ckpt_every == 0 or step == cfg.steps or stop):
                save_checkpoint(
                    run_dir,
                    step,
                    {
                        "model": model.state_dict(),
                        "optimizer": opt.state_dict(),
                        "step": step,
                        "rng": rng_state(),
                        "config": cfg.to_dict(),
                        "precision": precision,
                    },
                    cfg.keep_ckpts,
                )
            if di.world > 1 and (step % cfg.ckpt_every == 0 or stop):
                dist.barrier()
            if stop:
                stopped_at = step
                break
        if stopped_at is None:
            final = run_eval(cfg.steps, EvalKind.recomputed(), None) if di.main else {}
            status = "done"
        else:
            final = {}
            status = "stopped"
            log(
                f"{cfg.name}: stopped by request at step {stopped_at} (checkpoint kept; "
                f"resume to continue)"
            )
    except BaseException as e:
        if store:
            kind = "diverged" if isinstance(e, TrainingDiverged) else "interrupted"
            with contextlib.suppress(Exception):
                store.log_event(cfg.name, kind, str(e) or type(e).__name__)
                store.set_status(cfg.name, "failed", f"{kind}: {e}")
        raise
    finally:
        share.leave()
        if bar:
            bar.close()
        if sink:
            sink.close()
        if store:
            if status == "done":
                store.set_status(cfg.name, "done")
            elif status == "stopped":
                mark_stopped(store, cfg.name, stopped_at)
            store.close()
        phase(runphase.EXITING, status=status, **({} if last is None else {"step": last}))
        if status == "stopped" and di.main:
            # the request is served — only now: until the store and the phase say so, the STOP
            # file is what tells a watcher the run is stopping (removed earlier, a panel read
            # "running" in that gap: a clean-clone CI run caught it)
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(run_dir, STOP_FILE))
    return {
        "name": cfg.name,
        "losses": losses,
        "final_ppl": final,
        "run_dir": run_dir,
        "alphas": model.alphas(),
        "status": status,
        "stopped_at": stopped_at,
    }
