"""Several lab jobs on one machine: 1, 2 and 3 at once, each timed against one alone.

    python benchmarks/concurrent_jobs.py                  # train and probe jobs, sharing on
    python benchmarks/concurrent_jobs.py --share both     # and again with sharing off: before/after
    python benchmarks/concurrent_jobs.py --counts 1 --passive   # a job alone, threads sleeping
    python benchmarks/concurrent_jobs.py --smoke          # tiny jobs: checks the script (seconds)

Why (issue 30): every process took all the cores, and its OpenMP threads spun while they
waited, so two ``fiblab train --preset cpu-stagger --steps 24`` side by side took 5.5× as long
each as one alone (12.9 s → 71.1 s) and three 16.6× (214.5 s), on a quiet 2-core machine.
`lab.machine.cpu_share` now divides the cores among the lab's live jobs; this script measures what
that leaves.

Each job is the public command, started as its own process: ``fiblab train --preset
cpu-stagger --steps N`` (no store, a throw-away run folder) and ``fiblab probe marked --scale
demo`` (one blur cell of depth 2, ``--probe-steps`` steps).  For each kind and each count N the
N jobs start together; the table gives each job's wall time, the solo time of the same kind
measured in the same run (N = 1), and the fair-share ratio wall / (N × solo): 1.0 is as good as
running them one after another, above 1 is the cost of running them side by side.  While they
run the script reads the job registry (`lab.machine.cpu_share`, a private folder for this script) and
reports the most threads the jobs used at once (a job that joins takes its share at once, the
older ones at their next step boundary a second or so later: that moment is counted too).
``--share off`` starts every job with ``FIBLAB_CPU_SHARE=0`` (all cores each, threads that spin:
the behaviour before the fix).  ``--passive`` sets ``OMP_WAIT_POLICY=PASSIVE`` for every job:
the solo rows (N = 1) with and without it say what sleeping threads cost a job alone (on the
2-core machine: 55–62 → 92–102 ms a probe step, which is why the lab does not set it).

The first line names the machine (`benchmarks.header`), the last how busy other processes kept
it (`lab.machine.contention`): a busy machine makes every ratio look worse.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks.header import machine_header  # noqa: E402
from lab.machine import contention, cpu_share

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def job_command(kind: str, i: int, a, work: str) -> list[str]:
    """The public command line of job ``i`` of ``kind`` (its outputs under ``work``)."""
    cli = [sys.executable, "-m", "fiblab.cli"]
    if kind == "train":
        return cli + [
            "train",
            "--preset",
            a.preset,
            "--steps",
            str(a.steps),
            "--name",
            f"job{i}",
            "--store",
            "",
            "--quiet",
            "--override",
            f"run_dir={work}",
        ]
    return cli + [
        "probe",
        "marked",
        "--scale",
        a.probe_scale,
        "--mechanisms",
        "blur",
        "--depths",
        "2",
        "--init",
        "staggered",
        "--seeds",
        str(i),
        "--steps",
        str(a.probe_steps),
        "--out",
        os.path.join(work, f"probe{i}.jsonl"),
        "--store",
        "",
        "--no-progress",
    ]


def _launched(i: int, a, work: str, env: dict):
    """A train job started through `fiblab.jobs.launch.launch` (the notebook launchers' path): its
    Popen, which the launcher keeps on the handle."""
    from fiblab.jobs.launch import launch

    h = launch(
        a.preset,
        name=f"job{i}",
        steps=a.steps,
        store="",
        runs_dir=os.path.join(work, "runs"),
        env={k: v for k, v in env.items() if k.startswith(("FIBLAB_", "OMP_"))},
    )
    return h.proc


def run_together(kind: str, n: int, a, share: bool) -> dict:
    """Start ``n`` jobs of ``kind`` at once; their wall times and the most threads seen."""
    with tempfile.TemporaryDirectory(prefix="fiblab-concurrent-") as work:
        jobs_dir = os.path.join(work, "jobs")
        env = {**os.environ, cpu_share.ENV_DIR: jobs_dir, "PYTHONUNBUFFERED": "1"}
        env.pop(cpu_share.ENV_THREADS, None)
        if a.passive:
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        if not share:
            env[cpu_share.ENV_SHARE] = "0"
        logs = [open(os.path.join(work, f"job{i}.log"), "w+") for i in range(n)]
        t0 = time.perf_counter()
        if a.via == "launcher":  # as notebook 03's panel starts a run (`fiblab.jobs.launch`)
            procs = [_launched(i, a, work, env) for i in range(n)]
        else:
            procs = [
                subprocess.Popen(
                    job_command(kind, i, a, work),
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=logs[i],
                )
                for i in range(n)
            ]
        walls: list[float | None] = [None] * n
        most = 0
        while any(w is None for w in walls):
            for i, p in enumerate(procs):
                if walls[i] is None and p.poll() is not None:
                    walls[i] = time.perf_counter() - t0
            most = max(most, sum(j.threads for j in cpu_share.live_jobs(jobs_dir)))
            time.sleep(0.2)
        for p, log in zip(procs, logs):
            log.seek(0)
            err = log.read()
            log.close()
            if p.returncode != 0:
                raise SystemExit(f"a {kind} job failed ({p.returncode}):\n{err[-2000:]}")
    return {
        "kind": kind,
        "via": a.via,
        "jobs": n,
        "share": share,
        "wall_s": walls,
        "max_threads": most,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", type=int, nargs="+", default=[1, 2, 3], help="jobs at once")
    ap.add_argument("--kinds", nargs="+", choices=["train", "probe"], default=["train", "probe"])
    ap.add_argument("--preset", default="cpu-stagger", help="train jobs' preset")
    ap.add_argument("--steps", type=int, default=24, help="train jobs' steps")
    ap.add_argument("--probe-scale", default="demo", help="probe jobs' scale")
    ap.add_argument("--probe-steps", type=int, default=200, help="probe jobs' steps")
    ap.add_argument("--share", choices=["on", "off", "both"], default="on")
    ap.add_argument("--passive", action="store_true", help="OMP_WAIT_POLICY=PASSIVE for all")
    ap.add_argument("--smoke", action="store_true", help="tiny jobs, 1 and 2 at once")
    ap.add_argument(
        "--via",
        choices=["cli", "launcher"],
        default="cli",
        help="start train jobs as the command line does, or as the notebooks' launcher does",
    )
    ap.add_argument("--out", default=None, help="JSON here (default results/concurrent-jobs.json)")
    a = ap.parse_args(argv)
    if a.via == "launcher":
        a.kinds = ["train"]  # the launcher starts training runs
    if a.smoke:
        a.preset, a.steps, a.probe_scale, a.probe_steps = "tiny", 2, "tiny", 4
        a.counts = [c for c in a.counts if c <= 2]
    if a.out is None and not a.smoke:
        a.out = os.path.join(HERE, "results", "concurrent-jobs.json")
    counts = sorted(set(a.counts) | {1})  # the solo time is always measured
    modes = {"on": [True], "off": [False], "both": [True, False]}[a.share]
    info = machine_header()
    print(
        f"{cpu_share.cores()} cores; train: --preset {a.preset} --steps {a.steps}; probe: "
        f"--scale {a.probe_scale} --steps {a.probe_steps} (one blur cell, depth 2)"
        + ("; OMP_WAIT_POLICY=PASSIVE for every job" if a.passive else "")
        + f"; started through the {'notebooks launcher' if a.via == 'launcher' else 'command'}",
        flush=True,
    )
    print(f"{'kind':<6} {'share':<5} {'jobs':>4}  {'wall each (s)':<22} {'×solo':>6} {'ratio':>6}")
    rows = []
    with contention.watch() as load:
        for kind in a.kinds:
            for share in modes:
                solo = None
                for n in counts:
                    r = run_together(kind, n, a, share)
                    solo = solo if solo is not None else r["wall_s"][0]
                    mean = sum(r["wall_s"]) / n
                    r.update(solo_s=solo, fair_share_ratio=mean / (n * solo))
                    rows.append(r)
                    walls = " ".join(f"{w:.1f}" for w in r["wall_s"])
                    print(
                        f"{kind:<6} {'on' if share else 'off':<5} {n:>4}  {walls:<22} "
                        f"{mean / solo:>5.2f}× {r['fair_share_ratio']:>6.2f}"
                        f"   (at most {r['max_threads']} threads at once)",
                        flush=True,
                    )
    print("ratio = wall / (jobs × solo): 1.0 is as fast as one after another")
    print(load.result.line() + " while this ran")
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as fh:
            json.dump({"machine": info, "load": load.result.to_dict(), "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
