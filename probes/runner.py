"""The probe runner: build one cell's model, train it, and return its record.

Every cell records each layer's α every `log_every` steps, the loss curve, accuracy per distance
on a fresh seeded evaluation batch, and seconds (`probes.record.ProbeRecord`).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict

import torch
import torch.nn.functional as F

from lab.lm.model import build_model
from lab.machine.cpu_share import Share
from lab.machine.precision import autocast
from lab.sparse.blur import blur_width
from lab.training.sinks import LogSpec, acc_scalars, alpha_scalars, open_sink
from lab.util.progress import bar as progress_bar
from probes.live import LiveSpec, StopRequested
from probes.record import AlphaPoint, LossPoint, ProbeRecord
from probes.settings import INITS, Cell, ProbeSettings, mechanism
from probes.tasks import (
    EVAL_DISTANCES,
    forced_choice_accuracy,
    kv_retrieval_batch,
    marked_copy_accuracy,
    marked_copy_batch,
    sample_distance,
    shift_copy_accuracy,
    shift_copy_batch,
)


def build_probe_model(cell: Cell, settings: ProbeSettings):
    mech = mechanism(cell.mechanism)
    if mech.learned and cell.init not in INITS:
        raise ValueError(f"init={cell.init!r} must be one of {INITS}")
    over = mech.model_overrides()
    if mech.learned:
        over["learned_init"] = "stagger" if cell.init == "staggered" else "fixed"
    torch.manual_seed(cell.seed)
    return build_model(
        "probe-small",
        n_layers=cell.depth,
        window=settings.window,
        rungs=settings.rungs,
        d_model=settings.d_model,
        vocab_size=settings.task.vocab,
        seq_len=settings.task.seq_len,
        **over,
    )


def train_step(model, opt, cell: Cell, settings: ProbeSettings, gen, precision: str):
    """One optimizer step of a probe cell: a batch of its task, the loss under `precision`,
    backward, AdamW.  Returns the loss (a 0-d tensor).  The one definition `run_cell`, the
    benchmarks and `fiblab doctor` all time."""
    with autocast(next(model.parameters()).device, precision):
        loss = task_loss(model, cell, settings, gen)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def blur_step(scale: str, depth: int, precision: str):
    """A fresh blur cell (staggered init, seed 0) at `scale` and `depth` and a zero-argument
    callable running one `train_step` of it in `precision`: what `fiblab doctor` and
    benchmarks/precision_speed.py time as "the probe step"."""
    from dataclasses import replace

    from probes.settings import SCALES

    settings = replace(SCALES[scale], precision=precision)
    cell = Cell("blur", depth, "staggered", 0)
    torch.manual_seed(0)
    model = build_probe_model(cell, settings)
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr)
    g = torch.Generator().manual_seed(0)
    return lambda: train_step(model, opt, cell, settings, g, precision)


def run_cell(
    cell: Cell,
    settings: ProbeSettings,
    progress: bool = True,
    on_step=None,
    log_to: LogSpec | None = None,
    live: LiveSpec | None = None,
    model=None,
) -> dict:
    """Train one cell and return its record (`probes.record.ProbeRecord.to_dict()`: the JSONL
    line and `Store.log_probe`'s input).

    ``on_step(cell, done, total, loss, seconds, alphas)`` is called every 25 steps and at the
    end (the progress bar's cadence), e.g. to drive a notebook's progress bar and α plot.
    ``progress``: a tqdm bar on stderr (the cell, steps done, loss, elapsed time and ETA).
    ``log_to``: also send the record's points (loss and α every `log_every` steps, the final α
    and accuracy at the last step) to a live sink (`lab.training.sinks`) named by the cell's key.
    ``live``: report the cell while it trains into the grid folder's live file (`probes.live`:
    step, loss, α, a live accuracy curve; throttled) and check the grid's stop request before
    every step — `probes.live.StopRequested` abandons the cell (no record, its live file gone).
    Live reporting changes no number of the record (the live accuracy uses the final
    evaluation's own seeded batch, in eval mode, without gradients).
    On the CPU the cell registers with the machine's other lab jobs while it trains and takes its
    share of the cores at step boundaries (`lab.machine.cpu_share`; its threads at the start are its cap).
    ``model``: a model the caller built (e.g. a searched α schedule, `analysis.experiments.search.objectives`)
    trained instead of the cell's mechanism; the cell still names the record."""
    if live is not None and live.stop_requested():
        raise StopRequested(f"stop requested before cell {cell_label(cell).strip()} started")
    if model is None:
        model = build_probe_model(cell, settings)
    device = next(model.parameters()).device
    settings = settings.resolved(device)  # "auto" → what this device computes in: the record says
    sink = open_sink(log_to, cell.key(settings))
    watch = live.open(cell, cell.key(settings), settings.steps) if live is not None else None
    share = Share("probe", cell.key(settings))  # the cores shared with other lab jobs
    try:
        if device.type == "cpu":
            share.register()
        return _train_cell(model, cell, settings, progress, on_step, sink, watch, share)
    except BaseException:
        if watch is not None:
            watch.abandon()
        raise
    finally:
        share.unregister()
        if sink:
            sink.close()


def _train_cell(
    model, cell: Cell, settings: ProbeSettings, progress, on_step, sink, watch=None, share=None
) -> dict:
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr)
    gen = torch.Generator().manual_seed(cell.seed)
    is_blur = model.cfg.path == "blur"
    trajectory, losses = [], []
    precision = settings.precision
    t0 = time.perf_counter()
    model.train()
    bar = progress_bar(
        progress, desc=cell_label(cell), total=settings.steps, unit="step", mininterval=0.5
    )
    for step in range(settings.steps):
        if share is not None:
            share.rebalance_if_due()
        if watch is not None and watch.spec.stop_requested():
            raise StopRequested(f"stop requested at step {step} of {watch.key}")
        if is_blur:
            model.set_blur_width(blur_width(step, settings.steps, w0=settings.blur_w0))
        if step % settings.log_every == 0:
            trajectory.append({"step": step, "alphas": model.alphas()})
        loss = train_step(model, opt, cell, settings, gen, precision)
        if step % settings.log_every == 0:
            losses.append({"step": step, "loss": loss.item()})
            if sink:
                sink.scalars(step, {"loss": loss.item(), **alpha_scalars(trajectory[-1]["alphas"])})
        if step % 25 == 0 or step == settings.steps - 1:
            secs = time.perf_counter() - t0
            bar.update(step + 1 - bar.n)
            bar.set_postfix(loss=f"{loss.item():.3f}")
            if on_step is not None:
                on_step(cell, step + 1, settings.steps, loss.item(), secs, model.alphas())
        if watch is not None:
            _report(watch, model, cell, settings, step + 1, loss, trajectory, losses)
    bar.close()
    trajectory.append({"step": settings.steps, "alphas": model.alphas()})
    if watch is not None:
        watch.evaluating()
    model.eval()
    with torch.no_grad(), autocast(device, precision):
        acc = _task_accuracy(model, cell, settings)
    if sink:
        sink.scalars(settings.steps, {**alpha_scalars(model.alphas()), **acc_scalars(acc)})
    return ProbeRecord(
        key=cell.key(settings),
        mechanism=cell.mechanism,
        depth=cell.depth,
        init=cell.init,
        seed=cell.seed,
        task=cell.task,
        distance=cell.distance,
        steps=settings.steps,
        alphas=tuple(model.alphas()),
        acc=acc,
        seconds=time.perf_counter() - t0,
        trajectory=tuple(AlphaPoint(t["step"], tuple(t["alphas"])) for t in trajectory),
        loss=tuple(LossPoint(p["step"], p["loss"]) for p in losses),
        settings=json.loads(json.dumps({k: v for k, v in asdict(settings).items() if k != "task"})),
    ).to_dict()


def _report(watch, model, cell, settings, done, loss, trajectory, losses) -> None:
    """The live file after step `done`: a live accuracy now and then, the values when due."""
    if watch.eval_due(done):
        model.eval()
        with torch.no_grad(), autocast(next(model.parameters()).device, settings.precision):
            watch.accuracy(done, _task_accuracy(model, cell, settings))
        model.train()
    if watch.due(done):
        watch.step(done, loss.item(), model.alphas(), trajectory, losses)


def task_loss(model, cell: Cell, settings: ProbeSettings, gen: torch.Generator):
    """One training batch of the cell's task (generated on CPU, moved to the model's device)
    and its loss."""
    dev = next(model.parameters()).device
    if cell.task == "marked":
        x, y = marked_copy_batch(settings.batch, settings.task, gen)
    elif cell.task == "shift":
        x, y = shift_copy_batch(settings.batch, cell.distance, settings.task, gen)
    elif cell.task == "kv":  # one distance per batch, last position
        kb = kv_retrieval_batch(
            settings.batch, sample_distance(settings.sampler, gen), settings.task, gen
        )
        logits, _ = model(kb.x.to(dev))
        return F.cross_entropy(logits[:, -1], kb.answer.to(dev))
    else:
        raise ValueError(f"task={cell.task!r} is unknown: use marked, shift or kv")
    logits, _ = model(x.to(dev))
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), y.to(dev).reshape(-1), ignore_index=-100
    )


def _task_accuracy(model, cell: Cell, settings: ProbeSettings) -> dict[str, float]:
    """Accuracy per evaluated distance on fresh seeded batches."""
    gen = torch.Generator().manual_seed(10_000 + cell.seed)
    task = settings.task
    if cell.task == "marked":
        x, _ = marked_copy_batch(settings.eval_batch, task, gen)
        acc = marked_copy_accuracy(model(x)[0], x, task)
        return {str(task.distances[j]): float(a) for j, a in acc.items()}
    if cell.task == "shift":
        out = {}
        for d in [cell.distance] + [c for c in settings.controls if c != cell.distance]:
            if d < task.seq_len:
                x, _ = shift_copy_batch(settings.eval_batch, d, task, gen)
                out[str(d)] = float(shift_copy_accuracy(model(x)[0], x, d))
        return out
    out = {}
    for d in EVAL_DISTANCES[settings.sampler]:
        if d <= task.seq_len - 2:
            accs = []
            for _ in range(settings.eval_batches):
                kb = kv_retrieval_batch(settings.eval_batch, d, task, gen)
                accs.append(
                    forced_choice_accuracy(model(kb.x)[0][:, -1], kb.candidates, kb.answer_index)
                )
            out[str(d)] = float(sum(accs) / len(accs))
    return out


def cell_label(cell: Cell) -> str:
    """A cell as its progress bar names it ("    learned depth 2 staggered seed 0")."""
    return f"{cell.mechanism:>11} depth {cell.depth} {cell.init:<9} seed {cell.seed}"
