"""Retrieval probes: train small models on synthetic copy tasks and watch α.

A *cell* is (task, mechanism, depth, init, seed).  Mechanisms on the `probe-small` model
(d=256, 4 heads, 2 KV heads, W=8, K=15):

    dense          causal attention
    fib-fixed      Fibonacci rungs at α=1 (integer shift path)
    pow2           reach-matched power-of-2 rungs at α=1
    fib-stagger    the fixed linear stagger 0.5 → 1.5 over depth (unclamped)
    learned        learned α through the LM's interpolated gather
    blur           learned α through the annealed Gaussian blur gather (the paper's Table 2;
                   width 40 → 0.5 over the first 80 % of steps)

Mechanisms are `lab.schemes` schemes (the registry gives their model overrides; "stagger" or
"fib/stagger" are accepted for fib-stagger and recorded under the canonical name).
Learned mechanisms start uniform (α=1) or staggered (the stagger clamped to [0.55, 1.45]).
Defaults are the paper's marked-task settings: T=512, vocab 512, batch 2, 2,500 steps, AdamW
lr 1e-3 (torch defaults otherwise), no schedule, no clipping.  The `quick` scale (400 steps) is a
fast look, not a reproduction; `tiny` (T=48, distances 5 and 13, d=64) runs in seconds.

Tasks: ``marked`` (the paper's Table 2), ``shift`` (single-distance shift copy, one trained
distance per cell, evaluated there and at control distances) and ``kv`` (key–value retrieval with
distractors, distances drawn per batch, forced-choice accuracy per evaluation distance).

Every cell records each layer's α every `log_every` steps, the loss curve, accuracy per distance
on a fresh evaluation batch, and seconds.  `run_grid` appends one JSON line per finished cell and
skips cells already in the file, so an interrupted grid resumes where it stopped.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F

from lab.blur import blur_width
from lab.model import build_model
from lab.precision import PRECISIONS as PRECISIONS  # re-exported: the probe settings name them
from lab.precision import autocast
from lab.schemes import scheme
from probes.record import (
    AlphaPoint,
    LossPoint,
    ProbeRecord,
    alpha_drift,  # noqa: F401  (re-exported: the record's α drift)
)
from probes.tasks import (
    EVAL_DISTANCES,
    KVRetrieval,
    MarkedCopy,
    ShiftCopy,
    forced_choice_accuracy,
    kv_retrieval_batch,
    marked_copy_accuracy,
    marked_copy_batch,
    sample_distance,
    shift_copy_accuracy,
    shift_copy_batch,
)

#: The probe mechanisms: `lab.schemes` names (any spelling of them is accepted on input).
MECHANISMS: tuple[str, ...] = ("dense", "fib-fixed", "pow2", "fib-stagger", "learned", "blur")
LEARNED = frozenset(m for m in MECHANISMS if scheme(m).learned)
INITS = ("uniform", "staggered")


def mechanism(name: str):
    """The `lab.schemes.Scheme` of a probe mechanism (ValueError listing the valid ones)."""
    return scheme(name, among=MECHANISMS, what="mechanism")


@dataclass
class ProbeSettings:
    steps: int = 2500
    lr: float = 1e-3
    batch: int = 2
    eval_batch: int = 8
    log_every: int = 50
    window: int = 8
    rungs: int = 15
    d_model: int = 256
    blur_w0: float = 40.0
    task: MarkedCopy | ShiftCopy | KVRetrieval = field(default_factory=MarkedCopy)
    controls: tuple = (128, 233, 350, 377, 512, 700)  # shift: extra evaluation distances
    sampler: str = "coverage"  # kv: training-distance sampler
    eval_batches: int = 1  # kv: evaluation batches per distance
    precision: str = "fp32"  # "bf16": forward and loss under bfloat16 autocast (the paper's
    #                              probes ran so on GPU); fp32 weights and optimizer either way


SCALES = {
    "paper": ProbeSettings(),
    "quick": ProbeSettings(steps=400, log_every=20),
    # the main job's (`fiblab demo`) reduced Table 2: T=256, distances 125 and 219, near the
    # staggered init's rungs 0.55·233 = 128 and 1.45·144 = 209 (as the paper's 200 and 350 are
    # near 0.55·377 = 207 and 1.45·233 = 338), at least 14 from every α=1 rung (89, 144, 233),
    # and in a ratio (1.75, the paper's too) that no single α can serve with two Fibonacci rungs.
    # (80 and 210 = 0.9·89 and 0.9·233 were tried first: a uniform init solved both by moving
    # every α to 0.9.)  lr 3e-3 so that 600 steps suffice at depth 4.
    "demo": ProbeSettings(
        steps=600,
        lr=3e-3,
        batch=4,
        eval_batch=16,
        log_every=20,
        d_model=128,
        blur_w0=20.0,
        task=MarkedCopy(seq_len=256, vocab=256, n_payload=128, distances=(125, 219)),
    ),
    # seconds, for tests and smoke runs: T=48, distances (5, 13), 16 payload ids, d=64
    "tiny": ProbeSettings(
        steps=150,
        log_every=25,
        batch=8,
        lr=3e-3,
        eval_batch=16,
        d_model=64,
        window=2,
        rungs=6,
        blur_w0=4.0,
        task=MarkedCopy(seq_len=48, vocab=32, n_payload=16, distances=(5, 13)),
    ),
}

# the other two probe families (SPEC §6.1–6.2), same scale names
TASK_SCALES = {
    "marked": SCALES,
    # single-distance shift copy: T=1024, ids [0, 256), vocab 512, batch 8, 3000 steps, lr 1e-3
    "shift": {
        "paper": ProbeSettings(steps=3000, batch=8, task=ShiftCopy()),
        "quick": ProbeSettings(steps=400, batch=8, log_every=20, task=ShiftCopy()),
        "tiny": ProbeSettings(
            steps=120,
            log_every=20,
            batch=8,
            lr=3e-3,
            eval_batch=8,
            d_model=64,
            window=2,
            rungs=6,
            blur_w0=4.0,
            controls=(3, 8),
            task=ShiftCopy(seq_len=48, vocab=32, n_tokens=16),
        ),
    },
    # key-value retrieval with 4 distractors at T=1024: batch 32, 4000 steps, lr 3e-4,
    # loss at the last position only, forced choice among the 5 values present (chance 0.2)
    "kv": {
        "paper": ProbeSettings(
            steps=4000, batch=32, lr=3e-4, eval_batch=32, eval_batches=4, task=KVRetrieval()
        ),
        "quick": ProbeSettings(
            steps=400, batch=32, lr=3e-4, eval_batch=32, log_every=20, task=KVRetrieval()
        ),
        "tiny": ProbeSettings(
            steps=30,
            log_every=10,
            batch=4,
            lr=3e-3,
            eval_batch=4,
            d_model=32,
            window=2,
            rungs=6,
            blur_w0=4.0,
            sampler="coverage",
            task=KVRetrieval(
                seq_len=1024, vocab=512, filler=(0, 256), keys=(256, 384), values=(384, 512)
            ),
        ),
    },
}


@dataclass(frozen=True)
class Cell:
    mechanism: str
    depth: int
    init: str
    seed: int
    task: str = "marked"
    distance: int | None = None  # shift: the trained distance

    def key(self, settings: ProbeSettings) -> str:
        task = self.task
        if self.task == "shift":
            task = f"shift@{self.distance}"
        elif self.task == "kv":
            task = f"kv@{settings.sampler}"
        return (
            f"{task}/{self.mechanism}/d{self.depth}/{self.init}/s{self.seed}/"
            f"n{settings.steps}/b{settings.batch}/lr{settings.lr:g}/w{settings.window}"
            + ("" if settings.precision == "fp32" else f"/{settings.precision}")
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


def run_cell(cell: Cell, settings: ProbeSettings, progress: bool = True, on_step=None) -> dict:
    """Train one cell and return its record (`probes.record.ProbeRecord.to_dict()`: the JSONL
    line and `Store.log_probe`'s input).

    ``on_step(cell, done, total, loss, seconds, alphas)`` is called every 25 steps and at the
    end (the progress bar's cadence), e.g. to drive a notebook's progress bar and α plot."""
    model = build_probe_model(cell, settings)
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr)
    gen = torch.Generator().manual_seed(cell.seed)
    is_blur = model.cfg.path == "blur"
    trajectory, losses = [], []
    device = next(model.parameters()).device
    t0 = time.perf_counter()
    model.train()
    for step in range(settings.steps):
        if is_blur:
            model.set_blur_width(blur_width(step, settings.steps, w0=settings.blur_w0))
        if step % settings.log_every == 0:
            trajectory.append({"step": step, "alphas": model.alphas()})
        with autocast(device, settings.precision):
            loss = task_loss(model, cell, settings, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % settings.log_every == 0:
            losses.append({"step": step, "loss": loss.item()})
        if step % 25 == 0 or step == settings.steps - 1:
            secs = time.perf_counter() - t0
            if progress:
                _bar(cell, step + 1, settings.steps, loss.item(), secs)
            if on_step is not None:
                on_step(cell, step + 1, settings.steps, loss.item(), secs, model.alphas())
    trajectory.append({"step": settings.steps, "alphas": model.alphas()})
    model.eval()
    with torch.no_grad(), autocast(device, settings.precision):
        acc = _task_accuracy(model, cell, settings)
    if progress:
        sys.stderr.write("\n")
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


def _bar(cell: Cell, done: int, total: int, loss: float, secs: float) -> None:
    width = 24
    filled = int(width * done / total)
    eta = secs / done * (total - done)
    sys.stderr.write(
        f"\r{cell.mechanism:>11} depth {cell.depth} {cell.init:<9} seed {cell.seed} "
        f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} loss {loss:.3f} "
        f"{secs:.0f}s eta {eta:.0f}s"
    )
    sys.stderr.flush()


def load_records(path: str) -> list[dict]:
    """Records of a results file; a truncated last line (a killed run) is ignored."""
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def append_record(path: str, rec: dict) -> None:
    """Append one JSON line durably; a torn last line left by a killed run is closed first."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "ab+") as f:
        f.seek(0, os.SEEK_END)
        if f.tell():
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
        f.write((json.dumps(rec) + "\n").encode())
        f.flush()
        os.fsync(f.fileno())


def _cell_worker(cell: Cell, settings: ProbeSettings, threads: int) -> dict:
    """One cell in a worker process of `run_grid(jobs > 1)`, on `threads` intra-op threads."""
    torch.set_num_threads(threads)
    return run_cell(cell, settings, progress=False)


def run_grid(
    cells: list[Cell],
    settings: ProbeSettings,
    out_path: str | None = None,
    progress: bool = True,
    on_record=None,
    on_step=None,
    jobs: int = 1,
) -> list[dict]:
    """Run every cell not already in `out_path` (appending one JSON line each).

    jobs > 1 runs that many cells at once in worker processes, each on cores // jobs threads
    (at least 1): on a small CPU the many small ops of a probe step use one thread better than
    two, so two 1-thread cells finish sooner than two 2-thread cells in turn.  Records are
    appended (and `on_record` called) as cells finish; `on_step` and the progress bar need
    jobs = 1 (with jobs > 1 a line is printed per finished cell).  The result is in `cells`
    order either way.  If a cell fails, no further cell starts, the cells already running are
    finished and recorded, and the first error is raised.
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs={jobs!r} must be an integer >= 1")
    done = {r["key"]: r for r in load_records(out_path)} if out_path else {}
    todo = [c for c in cells if c.key(settings) not in done]
    fresh: dict[str, dict] = {}

    def finish(rec: dict) -> None:
        if out_path:
            append_record(out_path, rec)
        fresh[rec["key"]] = rec
        if on_record:
            on_record(rec)

    if jobs == 1 or len(todo) <= 1:
        for cell in todo:
            finish(run_cell(cell, settings, progress, on_step))
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        cores = (
            len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else os.cpu_count() or 1
        )  # the cores this process may use
        threads = max(1, cores // jobs)
        ctx = multiprocessing.get_context("spawn")
        t0 = time.perf_counter()
        errors: list[BaseException] = []
        with ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=ctx) as pool:
            futures = [pool.submit(_cell_worker, c, settings, threads) for c in todo]
            try:
                for fut in as_completed(futures):
                    if fut.cancelled():
                        continue
                    err = fut.exception()
                    if err is not None:  # a failing cell: queue nothing more, but
                        errors.append(err)  # keep the cells already running
                        for f in futures:
                            f.cancel()
                        continue
                    rec = fut.result()
                    finish(rec)
                    if progress:
                        sys.stderr.write(
                            f"[{len(fresh)}/{len(todo)}] {rec['key']}  "
                            f"{rec['seconds']:.0f}s  (grid "
                            f"{time.perf_counter() - t0:.0f}s)\n"
                        )
            except BaseException:  # e.g. Ctrl-C: start nothing new
                for f in futures:
                    f.cancel()
                raise
        if errors:
            raise errors[0]
    return [done.get(c.key(settings)) or fresh[c.key(settings)] for c in cells]


def grid(mechanisms, depths, inits, seeds, task: str = "marked", distances=(None,)) -> list[Cell]:
    """The cells of a grid; mechanisms in any `lab.schemes` spelling become their canonical
    names (an unknown one is kept, for `build_probe_model` to refuse)."""

    def canonical(m):
        try:
            return mechanism(m).name
        except ValueError:
            return m

    cells = []
    for mech, depth, init, seed, dist in itertools.product(
        [canonical(m) for m in mechanisms], depths, inits, seeds, distances
    ):
        if mech not in LEARNED and init != inits[0]:
            continue  # init only matters for learned α
        cells.append(Cell(mech, depth, init if mech in LEARNED else "-", seed, task, dist))
    return cells


def table2(records: list[dict], mechanism: str = "blur") -> list[dict]:
    """Table-2-shaped rows (mean over seeds) of one mechanism's records: depth, init, seeds,
    alpha_min / alpha_max (final α over layers and seeds), acc {distance: mean}, seconds.
    (`analysis.probe_table` puts the paper's values beside them and formats them.)"""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        if r["mechanism"] == mechanism:
            groups.setdefault((r["depth"], r["init"]), []).append(r)
    rows = []
    for (depth, init), rs in sorted(groups.items()):
        alphas = [a for r in rs for a in r["alphas"] if not math.isnan(a)]
        dists = list(rs[0]["acc"])
        rows.append(
            {
                "depth": depth,
                "init": init,
                "seeds": len(rs),
                "alpha_min": min(alphas, default=math.nan),
                "alpha_max": max(alphas, default=math.nan),
                "acc": {d: sum(r["acc"][d] for r in rs) / len(rs) for d in dists},
                "seconds": sum(r["seconds"] for r in rs) / len(rs),
            }
        )
    return rows
