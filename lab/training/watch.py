"""What watches a training run, behind one small interface the loop calls at named moments.

The loop (`lab.training.train`) computes; everything that reports on it lives here: the
experiment store's rows, a live sink (TensorBoard), the progress bar, the phase file and its
heartbeat (`lab.training.phases`), the run's config and tokenizer beside its checkpoints, and
the machine's cores shared with the other lab jobs (`lab.machine.cpu_share`).  Only rank 0
reports; on the other ranks each moment does nothing but take its share of the cores.

The moments, in the order a run meets them::

    watch = RunWatch(cfg, run_dir, di, quiet)    # log / phase usable at once
    watch.open(data, precision, start, ...)      # store row, config.json, tokenizer, sink
    watch.begin(start, light_tokens, full_tokens) # bar, the first-step phase, the clocks
    watch.step(); ...; watch.stepped(...)         # around each optimizer step
    with watch.paused(): evaluate(...)            # time that is not training (tokens/s)
    watch.evaluating / evaluated_set / evaluated  # an evaluation's phase, rows and log line
    watch.failed(exc); watch.close(status, ...)   # the run's end, whatever ended it

Timing: ``tokens_per_s`` is logged over the steps since the last log, evaluations left out, so
an ETA can multiply it by the steps left.
"""

from __future__ import annotations

import contextlib
import os
import time

from lab.machine.cpu_share import Share
from lab.store.variant import provenance
from lab.training import phases
from lab.training.phases import write_phase
from lab.training.sinks import LogSpec, alpha_scalars, eval_tag, open_sink
from lab.training.stop import STOP_FILE, mark_stopped
from lab.training.trainconfig import TrainConfig
from lab.util import jsonio
from lab.util.progress import bar as progress_bar

__all__ = ["RunWatch"]


class RunWatch:
    """The store, the live sink, the bar, the phase file and the core share of one run."""

    def __init__(self, cfg: TrainConfig, run_dir: str, di, quiet: bool = False):
        self.cfg, self.run_dir, self.di = cfg, run_dir, di
        self.main = di.main
        self.log = (lambda *a: None) if (quiet or not di.main) else print
        self.quiet = quiet
        self.store = self.sink = self.bar = self.share = None
        self.last: int | None = None  # the last step completed (None: none yet)

    # ---- before the loop ----------------------------------------------------------------
    def phase(self, what: str, **facts) -> None:
        """What the process is doing now, in words (`lab.training.phases`); rank 0 only."""
        if self.main:
            write_phase(self.run_dir, what, **facts)

    def open(
        self,
        data,
        precision: str,
        start: int,
        *,
        store_path: str | None = None,
        store=None,
        log_to: LogSpec | None = None,
    ) -> None:
        """The run's row in the store (``store``, a store-shaped writer, or one opened at
        ``store_path``), its config.json and tokenizer.json, and the live sink."""
        if not self.main:
            return
        cfg = self.cfg
        if store_path or store is not None:
            from lab.store import Store

            self.store = store if store is not None else Store(store_path)
            stored = {**cfg.to_dict(), "provenance": provenance(data, precision)}
            self.store.start_run(
                cfg.name,
                stored,  # lab.store.variant reads the provenance: data hash and precision
                kind="lm",
                preset=cfg.preset or None,
                seed=cfg.seed,
                run_dir=self.run_dir,
                resume=start > 0,  # a resumed run keeps its first started_at
            )
            began = phases.RESUME_EVENT if start else phases.START_EVENT
            self.store.log_event(cfg.name, began, f"step {start}")
        os.makedirs(self.run_dir, exist_ok=True)
        with open(os.path.join(self.run_dir, "config.json"), "w") as f:
            jsonio.dump(cfg.to_dict(), f, indent=1, default=str)
        if getattr(data, "tokenizer", None) is not None:  # the run's artefacts together
            data.tokenizer.save(os.path.join(self.run_dir, "tokenizer.json"))
        self.sink = open_sink(log_to, cfg.name, resume_step=start)

    def begin(self, start: int, light_tokens: int | None, full_tokens: int | None) -> None:
        """The bar, the first-step phase (with what an ETA needs), the clocks, the core share."""
        cfg, di = self.cfg, self.di
        if self.main and not self.quiet:
            self.bar = progress_bar(desc=cfg.name, total=cfg.steps, initial=start, unit="step")
        self.phase(phases.FIRST_STEP, start_step=start, steps=cfg.steps, eval_every=cfg.eval_every)
        self.phase(phases.FIRST_STEP, light_eval_tokens=light_tokens, full_eval_tokens=full_tokens)
        self.start = start
        self.t_last = time.perf_counter()
        self.t_logged, self.steps_logged = self.t_last, 0  # tokens/s: steps since the last log
        self.t_beat = self.t_last  # the last heartbeat
        rank = f" rank {di.rank}" if di.world > 1 else ""
        self.share = Share("train", cfg.name + rank, log=self.bar.write if self.bar else self.log)

    def take_share(self) -> None:
        """Take this run's share of the machine's cores (CPU runs)."""
        if self.di.device.type == "cpu":
            self.share.register()

    # ---- each step ----------------------------------------------------------------------
    def step(self) -> None:
        """Before a step: threads set to the share in force now."""
        self.share.rebalance_if_due()

    def stepped(self, step: int, loss: float, lr: float, grad_norm: float, model) -> None:
        """After a step: the heartbeat, the logged metrics and α, the bar."""
        cfg = self.cfg
        self.last = step
        now = self.now = time.perf_counter()
        tok_s = cfg.tokens_per_step / max(now - self.t_last, 1e-9)
        self.t_last = now
        self.steps_logged += 1
        if step == self.start + 1:
            self.phase(phases.TRAINING)
        if self.main and now - self.t_beat >= phases.BEAT_S:  # the step between logs
            phases.beat(self.run_dir, step)
            self.t_beat = now
        if step % cfg.log_every == 0 or step == cfg.steps:
            row = {
                "loss": loss,
                "lr": lr,
                "grad_norm": grad_norm,
                # over the steps since the last log (checkpoint saves included, evaluations
                # not): the rate an ETA can multiply by the steps left
                "tokens_per_s": cfg.tokens_per_step
                * self.steps_logged
                / max(now - self.t_logged, 1e-9),
            }
            self.t_logged, self.steps_logged = now, 0
            self._scalars(step, row)
        if cfg.model.learned and (step % cfg.alpha_every == 0 or step == 1):
            alphas = model.alphas()
            if self.store:
                self.store.log_alphas(cfg.name, step, alphas)
            if self.sink:
                self.sink.scalars(step, alpha_scalars(alphas))
        if self.bar:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{tok_s:.0f}")

    @contextlib.contextmanager
    def paused(self):
        """Time inside is not training time: tokens/s leaves it out."""
        try:
            yield
        finally:
            self.t_last = time.perf_counter()
            self.t_logged += self.t_last - self.now

    # ---- evaluations --------------------------------------------------------------------
    def evaluating(self, step: int, final: bool, tokens: int | None) -> None:
        what = phases.FINAL_EVAL if final else f"{phases.EVALUATING} at step {step}"
        self.phase(what + (f" ({tokens:,} tokens)" if tokens else ""))

    def evaluated_set(
        self, step: int, dataset: str, kind: str, loss: float, tokens: int, ppl: float
    ) -> None:
        """One held-out set's result: a store row and a sink scalar."""
        T = self.cfg.model.seq_len
        if self.store:
            self.store.log_eval(self.cfg.name, step, dataset, T, loss, tokens, kind=kind)
        if self.sink:
            self.sink.scalars(step, {eval_tag(dataset, kind, T, T): ppl})

    def evaluated(self, step: int, kind: str, ppl: dict, seconds: float, final: bool) -> None:
        """An evaluation's log line, its cost (light ones: for ETAs), and back to training."""
        self.log(
            f"step {step} {kind} eval: " + ", ".join(f"{k} ppl {v:.2f}" for k, v in ppl.items())
        )
        if not final:
            self._scalars(step, {"eval_s": seconds})
        self.phase(phases.TRAINING)

    # ---- the end ------------------------------------------------------------------------
    def failed(self, e: BaseException, diverged: bool) -> None:
        """The run ended by an exception: its event and status in the store."""
        if self.store:
            kind = "diverged" if diverged else "interrupted"
            with contextlib.suppress(Exception):
                self.store.log_event(self.cfg.name, kind, str(e) or type(e).__name__)
                self.store.set_status(self.cfg.name, "failed", f"{kind}: {e}")

    def close(self, status: str, stopped_at: int | None) -> None:
        """Release the cores, close the bar and the sink, the run's status in the store, the
        exit phase; a stop request, served or moot, is removed last."""
        if self.share is not None:
            self.share.unregister()
        if self.bar:
            self.bar.close()
        if self.sink:
            self.sink.close()
        if self.store:
            if status == "done":
                self.store.set_status(self.cfg.name, "done")
            elif status == "stopped":
                mark_stopped(self.store, self.cfg.name, stopped_at)
            self.store.close()
        last = {} if self.last is None else {"step": self.last}
        self.phase(phases.EXITING, status=status, **last)
        if self.main:
            # the request is served — only now: until the store and the phase say so, the STOP
            # file is what tells a watcher the run is stopping (removed earlier, a panel read
            # "running" in that gap: a clean-clone CI run caught it).  One that came too late
            # (at the last step, in the final evaluation) or before a failure is moot: it goes
            # too, or a resume from a shell stopped after its first step
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(self.run_dir, STOP_FILE))

    def _scalars(self, step: int, row: dict) -> None:
        if self.store:
            self.store.log_metrics(self.cfg.name, step, row)
        if self.sink:
            self.sink.scalars(step, row)
