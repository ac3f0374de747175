"""The schedule search's figures (issue 16): trials per hour, and the best schedules found
against the paper's stagger and coprime schedules.

    python benchmarks/search_figures.py --json benchmarks/results/search-figures.json
    python benchmarks/search_figures.py --ray local          # the trials as Ray tasks
    python benchmarks/search_figures.py --smoke              # end to end in under a minute

Two searches, as `fiblab search` runs them (`analysis.experiments.search.search.run_search`, or
`fiblab.cluster.ray_search.run_search_on_ray` with ``--ray``; the study in memory, no store):

- the proxy: ``linear`` space, objective ``distinct``, the paper's convention (L=16, W=8, K=15,
  T=1024), ``--proxy-trials`` trials;
- the tiny probe: ``linear`` space, objective ``probe`` (the marked copy at distances 5 and 13,
  the ``tiny`` probe scale, ``--probe-steps`` steps, median-pruned here, not on Ray) at the
  probe's convention (L=2, W=2, K=6, T=48), ``--probe-trials`` trials.

Trials per hour are finished trials over the search's wall time (sampler included; on Ray one
cluster serves both searches, its start and the workers' first imports of torch and the lab
excluded: a task per slot imports them before the clock starts).  The best ``--top`` trials are
then re-run beside ``stagger`` and ``coprime`` (`analysis.experiments.search.report.rerun`): once for the
counting proxy (deterministic), on ``--rerun-seeds`` fresh seeds for the probe, with the gap to
the stagger, Welch's p and a bootstrap interval (`analysis.statistics.stats`), as `fiblab search` prints.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import contextmanager

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks.header import machine_header  # noqa: E402


def _warm(i: int) -> int:
    import analysis.experiments.search.objectives  # noqa: F401
    import lab.lm.model  # noqa: F401
    import probes.runner  # noqa: F401  (torch and the lab imported once per worker)

    return i


SMOKE = {"proxy_trials": 8, "probe_trials": 2, "probe_steps": 5, "rerun_seeds": 2, "top": 1}


def search_figure(cfg, args) -> dict:
    """One search timed, its winners re-run beside the references: the figure's record."""
    from analysis.experiments.search.report import compare, format_compare, rerun
    from analysis.experiments.search.search import run_search

    def go():
        if not args.ray:
            return run_search(cfg)
        from fiblab.cluster.ray_search import run_search_on_ray

        return run_search_on_ray(cfg, address=args.ray, threads=args.threads)

    t0 = time.perf_counter()
    res = go()
    wall = time.perf_counter() - t0
    states = [t.state.name for t in res.study.trials]
    done = states.count("COMPLETE") + states.count("PRUNED")
    rows = rerun(cfg, res, top=args.top, seeds=args.rerun_seeds)
    lines = compare(rows, cfg)
    name = cfg.names[0]
    print(
        f"\n{name}: {done} trials ({states.count('PRUNED')} pruned, {states.count('FAIL')} "
        f"failed) in {wall:.1f} s = {3600 * done / wall:.0f} trials/h"
        + (f" on Ray ({args.ray})" if args.ray else " here")
    )
    print(format_compare(lines))
    for label in dict.fromkeys(r["label"] for r in rows):
        r = next(x for x in rows if x["label"] == label)
        print(f"{label:<10} alpha " + " ".join(f"{a:.3f}" for a in r["alphas"]))
    return {
        "objective": name,
        "space": cfg.space.name,
        "convention": {
            "layers": cfg.space.layers,
            "window": cfg.space.window,
            "rungs": cfg.space.rungs,
            "seq_len": cfg.space.seq_len,
        },
        "trials": done,
        "states": {s: states.count(s) for s in sorted(set(states))},
        "wall_s": wall,
        "trials_per_hour": 3600 * done / wall,
        "best_value": res.study.best_value,
        "rows": rows,
        "compare": lines,
    }


@contextmanager
def ray_session(address: str, threads: int):
    """Ray connected for both searches, every worker slot warmed (imports done)."""
    from fiblab.cluster.ray_cluster import connect, task_resources
    from fiblab.cluster.ray_search import cluster_slots

    with connect(address) as ray:
        res = task_resources(ray, threads)
        warm = ray.remote(_warm).options(num_cpus=res.num_cpus, num_gpus=res.num_gpus)
        ray.get([warm.remote(i) for i in range(cluster_slots(ray, res))])
        yield ray


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--proxy-trials", type=int, default=200, help="trials of the proxy search")
    ap.add_argument("--probe-trials", type=int, default=12, help="trials of the probe search")
    ap.add_argument(
        "--probe-steps", type=int, default=None, help="probe steps (default: the tiny scale's)"
    )
    ap.add_argument("--top", type=int, default=3, help="winners re-run")
    ap.add_argument("--rerun-seeds", type=int, default=3, help="fresh seeds per probe re-run")
    ap.add_argument("--seed", type=int, default=0, help="sampler seed and trial seed")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (per Ray task)")
    ap.add_argument("--ray", default=None, metavar="ADDRESS", help="local, auto or HOST:PORT")
    ap.add_argument("--smoke", action="store_true", help=f"tiny sizes {SMOKE}: a check it runs")
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args()
    if args.smoke:
        for k, v in SMOKE.items():
            setattr(args, k, v)
    import torch

    from analysis.experiments.search.objectives import ProbeSpec, parse_objectives
    from analysis.experiments.search.search import SearchConfig
    from analysis.experiments.search.space import parse_space
    from fiblab.cli.search import PAPER_CONVENTION, PROBE_CONVENTION

    torch.set_num_threads(args.threads)
    info = machine_header()
    from contextlib import nullcontext

    proxy = SearchConfig(
        parse_space("linear", **PAPER_CONVENTION),
        parse_objectives(["distinct"]),
        trials=args.proxy_trials,
        seed=args.seed,
    )
    probe = SearchConfig(
        parse_space("linear", **PROBE_CONVENTION),
        parse_objectives(["probe"]),
        trials=args.probe_trials,
        seed=args.seed,
        probe=ProbeSpec("tiny", (5, 13), args.probe_steps),
    )
    out = {"machine": info, "args": vars(args), "searches": []}
    with ray_session(args.ray, args.threads) if args.ray else nullcontext():
        for cfg in (proxy, probe):
            out["searches"].append(search_figure(cfg, args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
