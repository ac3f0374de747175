"""The schedule search's driver: an Optuna study asked and told from here, every trial in the store.

    run_search(SearchConfig(space, objectives, trials=40, seed=0), store=Store(...))

The driver asks Optuna for a batch of trials, turns each into a plain `TrialTask`, hands the
batch to a *dispatcher* (in this process, one at a time with the pruner; a local process pool;
any callable ``(tasks) -> list of values-or-exception``), and tells the study each result.  An
*executor* (`TrialExecutor`: ``slots``, ``submit(task)``, ``next_done()``; `fiblab.cluster.ray_search`'s
Ray tasks) instead keeps up to ``slots`` trials in flight and each result is told as it returns;
its trials report nothing back, so no pruner then.  Samplers: TPE (seeded) for one objective, NSGA-II (seeded) for several (the study's
best trials are then the Pareto front).  Pruner: the median rule on a trained objective's
intermediate values, in-process only.  Storage: any Optuna URL (``sqlite:///runs/search.db`` on
one machine, a server database where machines share a study); running the same command again
continues the study until it has ``trials`` finished trials.

Each trial is also a run in the lab's store (kind ``search``, named `trial_run_name`): its config
(study, trial number, space, parameters, α, base, W, objectives, seed), one metric per objective
``search/<name>`` at step 0, its α at step 0, and status done / failed / stopped (pruned).  Only
the driver writes the store.  Optuna is imported lazily (`pip install 'fiblab[search]'`).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol

from analysis.experiments.search.objectives import (
    LMSpec,
    Objective,
    ProbeSpec,
    Pruned,
    TrialTask,
    evaluate,
)
from analysis.experiments.search.space import Param, SearchSpace
from lab.machine.procs import parse_process_id, pid_alive, process_id
from lab.util.wording import plural

RUN_KIND = "search"
METRIC_PREFIX = "search/"

Dispatcher = Callable[[Sequence[TrialTask]], list]


class TrialExecutor(Protocol):
    """Trials evaluated elsewhere, up to ``slots`` at once, each result collected as it returns."""

    slots: int

    def submit(self, task: TrialTask) -> Hashable:
        """Start evaluating ``task``; a handle `next_done` gives back with its result."""
        ...

    def next_done(self) -> tuple[Hashable, object]:
        """Block until a submitted task ends: its handle and its values (a dict by objective
        name) or the exception it ended with (a one-line message)."""
        ...


def require_optuna():
    """The optuna module, or a ValueError naming the extra to install."""
    try:
        import optuna
    except ImportError:
        raise ValueError("the schedule search needs Optuna: pip install 'fiblab[search]'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


@dataclass(frozen=True)
class SearchConfig:
    space: SearchSpace
    objectives: tuple[Objective, ...]
    trials: int = 40
    seed: int = 0
    storage: str | None = None  # an Optuna storage URL; None: in memory
    study_name: str | None = None
    probe: ProbeSpec = field(default_factory=ProbeSpec)
    lm: LMSpec = field(default_factory=LMSpec)
    prune: bool = True
    jobs: int = 1  # trials evaluated at once (a local process pool when > 1)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.objectives)

    @property
    def directions(self) -> list[str]:
        return [o.direction for o in self.objectives]

    def default_study_name(self) -> str:
        s = self.space
        return (
            f"{s.name}:{'+'.join(self.names)}:L{s.layers}W{s.window}K{s.rungs}T{s.seq_len}:"
            f"s{self.seed}"
        )

    def task(self, params: dict, seed: int | None = None) -> TrialTask:
        return TrialTask(
            self.space,
            dict(params),
            self.names,
            self.seed if seed is None else seed,
            self.probe,
            self.lm,
        )


@dataclass
class SearchResult:
    study: object  # optuna.Study
    study_name: str
    run_names: list[str]  # the store's runs of the trials this call ran, in order


def trial_run_name(study_name: str, number: int) -> str:
    return f"search/{study_name}/t{number:04d}"


def make_sampler(cfg: SearchConfig):
    optuna = require_optuna()
    if len(cfg.objectives) > 1:
        return optuna.samplers.NSGAIISampler(seed=cfg.seed)
    return optuna.samplers.TPESampler(seed=cfg.seed, n_startup_trials=min(10, cfg.trials))


def make_pruner(cfg: SearchConfig):
    optuna = require_optuna()
    trained = [o for o in cfg.objectives if o.trained]
    if cfg.prune and len(cfg.objectives) == 1 and trained and cfg.jobs == 1:
        return optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=25)
    return optuna.pruners.NopPruner()


def suggest(trial, params: Sequence[Param]) -> dict:
    """One value per dimension from an Optuna trial (Optuna's distributions for `Param`s)."""
    out = {}
    for p in params:
        if p.kind == "float":
            out[p.name] = trial.suggest_float(p.name, p.low, p.high)
        elif p.kind == "int":
            out[p.name] = trial.suggest_int(p.name, int(p.low), int(p.high))
        else:
            out[p.name] = trial.suggest_categorical(p.name, list(p.choices))
    return out


def in_process(report_for: Callable | None = None) -> Dispatcher:
    """Evaluate tasks here, one after another; ``report_for(i)`` gives task i's pruning hook."""

    def run(tasks: Sequence[TrialTask]) -> list:
        out = []
        for i, t in enumerate(tasks):
            try:
                out.append(evaluate(t, report_for(i) if report_for else None))
            except Exception as e:  # noqa: BLE001 — told to the study as a failed trial
                out.append(e)
        return out

    return run


def process_pool(jobs: int) -> Dispatcher:
    """Evaluate tasks in a local pool of ``jobs`` processes (spawned: torch is not fork-safe)."""

    def run(tasks: Sequence[TrialTask]) -> list:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as ex:
            futures = [ex.submit(evaluate, t) for t in tasks]
            out = []
            for f in futures:
                try:
                    out.append(f.result())
                except Exception as e:  # noqa: BLE001
                    out.append(e)
            return out

    return run


def trial_config(cfg: SearchConfig, study_name: str, number: int, task: TrialTask) -> dict:
    cand = task.candidate()
    return {
        "study": study_name,
        "trial": number,
        "space": cfg.space.name,
        "convention": {k: v for k, v in asdict(cfg.space).items() if k not in ("name", "parts")},
        "params": task.params,
        "alphas": list(cand.alphas),
        "base": cand.base,
        "window": cand.window,
        "objectives": {o.name: o.direction for o in cfg.objectives},
        "seed": task.seed,
        "storage": cfg.storage,
    }


#: The trial attribute naming the process that asked for it ("host:pid").
DRIVER_ATTR = "fiblab_driver"


def _this_driver() -> str:
    """``HOST:PID@TICKS``: this process, told apart from a later one given the same PID."""
    return f"{socket.gethostname()}:{process_id()}"


def ask(study):
    """``study.ask()``, the trial marked with this process (so a later driver can tell a trial
    abandoned by a killed search from one another machine is running)."""
    trial = study.ask()
    trial.set_user_attr(DRIVER_ATTR, _this_driver())
    return trial


def fail_abandoned(study, name: str, store=None, log=None) -> list[int]:
    """Tell FAIL to the trials left running by a search process of this host that has ended
    (stopped or killed mid-trial): otherwise they stay "running" in the study and the store for
    ever. Trials of a live process, or of another host sharing the study, are left alone."""
    optuna = require_optuna()
    host = socket.gethostname()
    out = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        h, _, proc = str(t.user_attrs.get(DRIVER_ATTR, "")).rpartition(":")
        driver = parse_process_id(proc)
        if h != host or driver is None or pid_alive(*driver):
            continue
        study.tell(t.number, state=optuna.trial.TrialState.FAIL)
        mark_failed(store, trial_run_name(name, t.number), "abandoned: its search ended")
        out.append(t.number)
    if out and log:
        log(f"{plural(len(out), 'trial')} left running by an ended search marked failed")
    return out


def mark_failed(store, run: str, why: str) -> None:
    """The trial's run marked failed in the store, if it got that far: a search killed between
    asking a trial and starting its run leaves nothing in the store to mark."""
    from lab.store.connection import UnknownRunError

    if store is None:
        return
    try:
        store.set_status(run, "failed", why)
    except UnknownRunError:
        pass


def finished_trials(study) -> int:
    optuna = require_optuna()
    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return sum(1 for t in study.get_trials(deepcopy=False) if t.state in done)


def run_search(
    cfg: SearchConfig,
    store=None,
    dispatch: Dispatcher | None = None,
    log: Callable[[str], None] | None = None,
    executor: TrialExecutor | None = None,
) -> SearchResult:
    """Run the study until it has ``cfg.trials`` finished trials; each trial also into ``store``.

    With ``executor``, up to ``executor.slots`` trials are in flight and each is told as it
    returns (``dispatch`` and ``cfg.jobs`` are then unused, and there is no pruner)."""
    optuna = require_optuna()
    if cfg.trials < 1:
        raise ValueError(f"trials={cfg.trials} must be >= 1")
    name = cfg.study_name or cfg.default_study_name()
    study = optuna.create_study(
        study_name=name,
        storage=cfg.storage,
        directions=cfg.directions,
        sampler=make_sampler(cfg),
        pruner=make_pruner(cfg) if executor is None else optuna.pruners.NopPruner(),
        load_if_exists=True,
    )
    if [d.name.lower() for d in study.directions] != cfg.directions:
        raise ValueError(
            f"study {name!r} in {cfg.storage} optimises other objectives: pass another --study"
        )
    fail_abandoned(study, name, store, log)
    if executor is not None:
        return SearchResult(study, name, _run_streaming(study, name, cfg, store, executor, log))
    runs: list[str] = []
    while (todo := cfg.trials - finished_trials(study)) > 0:
        batch = [ask(study) for _ in range(min(todo, cfg.jobs))]
        tasks = [cfg.task(suggest(t, cfg.space.params())) for t in batch]
        names = [trial_run_name(name, t.number) for t in batch]
        if store is not None:
            for t, task, run in zip(batch, tasks, names):
                store.start_run(
                    run, trial_config(cfg, name, t.number, task), kind=RUN_KIND, seed=task.seed
                )

        def report_for(i: int):
            trial = batch[i]

            def report(step: int, value: float) -> bool:
                trial.report(value, step)
                return trial.should_prune()

            return report

        run = dispatch or (in_process(report_for) if cfg.jobs == 1 else process_pool(cfg.jobs))
        for trial, task, run_name, res in zip(batch, tasks, names, run(tasks)):
            record_trial(study, trial, task, run_name, res, cfg, store)
            runs.append(run_name)
            if log:
                log(_trial_line(trial.number, cfg, res))
    return SearchResult(study, name, runs)


def _start(study, name: str, cfg: SearchConfig, store):
    """Ask the study for one trial and open its run in the store: (trial, task, run name)."""
    trial = ask(study)
    task = cfg.task(suggest(trial, cfg.space.params()))
    run = trial_run_name(name, trial.number)
    if store is not None:
        store.start_run(
            run, trial_config(cfg, name, trial.number, task), kind=RUN_KIND, seed=task.seed
        )
    return trial, task, run


def _run_streaming(study, name: str, cfg: SearchConfig, store, executor, log) -> list[str]:
    """Keep ``executor.slots`` trials in flight, tell each as it returns; the run names in the
    order told.  If the search stops (a bad-input ValueError, an interrupt), the trials still in
    flight are told FAIL so the study keeps no trial running forever."""
    optuna = require_optuna()
    if executor.slots < 1:
        raise ValueError(f"trials in flight {executor.slots} must be >= 1")
    runs: list[str] = []
    pending: dict = {}  # handle -> (trial, task, run name)
    try:
        while True:
            while len(pending) < executor.slots and (
                cfg.trials - finished_trials(study) - len(pending) > 0
            ):
                trial, task, run = _start(study, name, cfg, store)
                pending[executor.submit(task)] = (trial, task, run)
            if not pending:
                return runs
            handle, res = executor.next_done()
            trial, task, run = pending.pop(handle)
            record_trial(study, trial, task, run, res, cfg, store)
            runs.append(run)
            if log:
                log(_trial_line(trial.number, cfg, res))
    except BaseException as e:
        for trial, _task, run in pending.values():
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            if store is not None:
                store.set_status(run, "failed", f"search stopped: {type(e).__name__}")
        raise


def record_trial(study, trial, task: TrialTask, run: str, res, cfg: SearchConfig, store) -> None:
    """Record a finished trial: the store first, then the study.  A process killed between
    the two leaves the study's trial RUNNING, which `fail_abandoned` then tells FAIL in both;
    the other order could leave a trial complete in the study and "running" in the store."""
    optuna = require_optuna()
    if isinstance(res, Pruned):
        if store is not None:
            store.set_status(run, "stopped", f"pruned: {res}")
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        return
    if isinstance(res, ValueError):  # bad input: the same for every trial, so stop here
        if store is not None:
            store.set_status(run, "failed", str(res))
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        raise res
    if isinstance(res, BaseException):
        if store is not None:
            store.set_status(run, "failed", f"{type(res).__name__}: {res}")
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return
    if store is not None:
        store.log_metrics(run, 0, {METRIC_PREFIX + n: v for n, v in res.items()})
        store.log_alphas(run, 0, task.candidate().alphas)
        store.set_status(run, "done")
    study.tell(trial, [res[n] for n in cfg.names])


def _trial_line(number: int, cfg: SearchConfig, res) -> str:
    if isinstance(res, BaseException):
        return f"trial {number}: {type(res).__name__}: {res}"
    return f"trial {number}: " + "  ".join(f"{n} {res[n]:.4g}" for n in cfg.names)
