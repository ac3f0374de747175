"""The schedule search's trials as Ray tasks, asked and told by the driver.

    run_search_on_ray(cfg, store, address="local")     # what `fiblab search … --ray ADDRESS` calls

`analysis.experiments.search.search.run_search` drives the Optuna study; here `RayTrials` is its executor: each
trial's `TrialTask` (plain values) goes to a Ray task that runs `analysis.experiments.search.objectives.
evaluate` on ``threads`` torch threads, up to ``slots`` at once (the cluster's task slots: its
CPUs / CPUs per task, or its GPUs when tasks take a GPU; or ``parallel``), and each result is
told to the study as it returns.  Only the driver writes the store (every trial a run of kind
``search``, as without Ray).

Faults: a task whose worker process or node dies is run again by Ray, up to ``retries`` times;
if it still dies, or the objective raises (a seeded trial would raise again, so exceptions are
not retried), the trial is told FAIL with one line and the search goes on.  A ValueError from
the objective is bad input (the same for every trial) and stops the search, as here.

Pruning: a trial's intermediate values stay on its worker, so the median pruner is off on Ray
(every probe / ppl trial runs its full steps).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from fiblab.cluster.ray_cluster import TaskResources, connect, task_resources
from lab.util.checks import positive_int

DEFAULT_RETRIES = 3


def trial_task(fn: Callable | None, task, threads: int) -> dict:
    """One trial on a worker, on ``threads`` torch threads: its objective values by name
    (``fn`` None: `evaluate`; a test passes its own).  A counting proxy needs no torch, so a
    worker imports it only for a trained objective."""
    from analysis.experiments.search.objectives import OBJECTIVES, evaluate

    if any(OBJECTIVES[n].trained for n in task.objectives):
        from lab.machine.cpu_share import pin

        pin(threads)  # Ray reserved them: fixed, and counted by the node's other lab jobs
    return (fn or evaluate)(task)


class TrialLost(RuntimeError):
    """A trial whose task never returned (its worker or node died every time Ray ran it)."""


def one_line(err: BaseException) -> BaseException:
    """What a failed task tells the driver: the objective's own exception (a Ray task error's
    cause, whose message is one line, not the worker's traceback), else a `TrialLost`."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, BaseException):
        return cause
    first = (str(err).strip().splitlines() or [""])[0]
    return TrialLost(f"{type(err).__name__}: {first}" if first else type(err).__name__)


def cluster_slots(ray, res: TaskResources) -> int:
    """How many trials the cluster runs at once with ``res`` per task (at least 1)."""
    total = ray.cluster_resources()
    if res.num_gpus:
        return max(1, int(total.get("GPU", 0) // res.num_gpus))
    return max(1, int(total.get("CPU", 0) // res.num_cpus))


class RayTrials:
    """An `analysis.experiments.search.search.TrialExecutor` on Ray: ``submit`` starts a task, ``next_done``
    waits for the first to end."""

    def __init__(
        self, ray, res: TaskResources, slots: int, retries: int = DEFAULT_RETRIES, fn=None
    ):
        self.ray, self.res, self.slots, self.fn = ray, res, slots, fn
        self.task = ray.remote(trial_task).options(**res.options(retries))
        self.pending: list = []

    def submit(self, task) -> Hashable:
        ref = self.task.remote(self.fn, task, self.res.threads)
        self.pending.append(ref)
        return ref

    def next_done(self) -> tuple[Hashable, object]:
        ready, _ = self.ray.wait(self.pending, num_returns=1)
        ref = ready[0]
        self.pending.remove(ref)
        try:
            return ref, self.ray.get(ref)
        except Exception as e:  # noqa: BLE001 — told to the study as a failed trial
            return ref, one_line(e)

    def cancel(self) -> None:
        """Stop the tasks still running (the search ended early)."""
        for ref in self.pending:
            self.ray.cancel(ref, force=True)
        self.pending.clear()


def check_parallel(parallel) -> int | None:
    if parallel is None:
        return None
    return positive_int(parallel, "--ray-parallel", "trials at once")


def run_search_on_ray(
    cfg,
    store=None,
    address: str = "local",
    threads: int = 1,
    retries: int = DEFAULT_RETRIES,
    gpus: bool | None = None,
    parallel: int | None = None,
    log: Callable[[str], None] | None = None,
    fn: Callable | None = None,
):
    """`analysis.experiments.search.search.run_search` with the trials as Ray tasks (see the module docstring);
    its `SearchResult`.  ``fn`` replaces `evaluate` on the workers (tests inject faults)."""
    from analysis.experiments.search.search import run_search
    from fiblab.cluster.ray_run import check_retries

    check_retries(retries)
    check_parallel(parallel)
    with connect(address) as ray:
        res = task_resources(ray, threads, gpus)
        slots = parallel or cluster_slots(ray, res)
        ex = RayTrials(ray, res, slots, retries, fn)
        if log:
            pruned = cfg.prune and any(o.trained for o in cfg.objectives)
            log(
                f"trials on Ray: {slots} at once, {res.describe()}"
                + (
                    "; no median pruner on Ray (a trial's steps stay on its worker)"
                    if pruned
                    else ""
                )
            )
        try:
            return run_search(cfg, store=store, log=log, executor=ex)
        finally:
            ex.cancel()
