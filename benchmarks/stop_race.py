"""How often a stopped search leaves a trial RUNNING in its Optuna study (issue 38).

Launches a long two-objective search (cheap counts, a trial every few milliseconds, so the stop
lands mid-write as often as it can), stops it once it has two finished trials, and reads the
study back with Optuna: any RUNNING trial is the defect.  Repeats N times; prints the rate.

    .venv/bin/python benchmarks/stop_race.py --repeat 30

Before the fix (a killed writer's hot SQLite journal made the clean-up's read-only look fail,
read as "no study yet") 2 of 30 stops left one; the figures and the machine are in
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

from benchmarks.header import machine_header


def main(argv=None) -> int:
    import optuna

    from fiblab.jobs import search_launch as SL

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args(argv)
    machine_header()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    bad = 0
    for i in range(args.repeat):
        d = tempfile.mkdtemp(prefix="stop-race-")
        h = SL.launch_search(
            "linear", ("distinct", "band"), 100_000, 0, "long", extra=["--layers", "4"],
            store=f"{d}/store.db", runs_dir=f"{d}/runs",
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while SL.state(h).done < 2:
            if time.monotonic() > deadline:
                print(f"stop {i + 1}: no two trials in 120 s\n{h.log_tail()}", file=sys.stderr)
                SL.request_stop(h)
                return 2
            time.sleep(0.3)
        SL.request_stop(h)
        study = optuna.load_study(study_name=h.name, storage=h.storage)
        running = study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
        if running:
            bad += 1
            print(f"stop {i + 1}: trial {[t.number for t in running]} left RUNNING", flush=True)
    print(f"{bad} of {args.repeat} stops left a trial RUNNING")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
