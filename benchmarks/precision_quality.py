"""Does `auto` change results?  The same CPU language models trained and evaluated in fp32 and
in bf16, beside the seed-to-seed noise.

    python benchmarks/precision_quality.py                  # cpu-stagger, cpu-fixed × seeds 1-3
    python benchmarks/precision_quality.py --steps 100 --seeds 1 2

Why: on a CPU with native bf16 (AMX / AVX512-BF16) ``--precision auto`` is bf16, on an AVX2
CPU it is fp32, so one command gives different numbers on the two machines.  This measures how
different: each (preset, seed) is trained twice from the same seed, once per precision, and
evaluated in the precision it trained in (`lab.evaluation.evalrun.evaluate_run`) on all held-out windows
at the training length.  The bf16 − fp32 perplexity difference per seed is set beside σ, the
standard deviation of fp32 perplexity across seeds (the noise every comparison of the lab
already carries).

Resumable: runs live under ``--runs`` (default ``benchmarks/results/precision/runs``, not
committed) and a finished run is not trained again.  The table goes to stdout and, as JSON,
to ``--out`` (default ``benchmarks/results/precision-quality.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks.header import machine_header  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def run_once(preset: str, seed: int, precision: str, steps: int, runs: str, data) -> dict:
    """Train (or find finished) one run, then its held-out perplexity at T in its precision."""
    from lab.evaluation.evalrun import evaluate_run
    from lab.training.train import train
    from lab.training.trainconfig import make_config

    name = f"{preset}-s{seed}-{precision}-{steps}"
    cfg = make_config(
        preset,
        {
            "steps": steps,
            "seed": seed,
            "precision": precision,
            "eval_every": 0,
            "run_dir": runs,
            "name": name,
        },
    )
    run_dir = os.path.join(runs, name)
    done = os.path.isfile(os.path.join(run_dir, f"ckpt_{steps}.pt"))
    if not done:
        train(cfg, resume=os.path.isdir(run_dir), store_path=None, quiet=True, data=data)
    ev = evaluate_run(run_dir, factors=(1,), bins=False, log=lambda *a: None)
    (ds,) = ev["datasets"].values()
    ppl = ds["perplexity"]
    return {
        "preset": preset,
        "seed": seed,
        "precision": ev["precision"],
        "steps": steps,
        "ppl": ppl["ppl"],
        "tokens": ppl["tokens"],
    }


def summarise(rows: list[dict]) -> dict:
    """Per preset: mean ppl per precision, the per-seed bf16 − fp32 differences, and σ (fp32
    across seeds) — the pure arithmetic of the table, tested by hand."""
    out = {}
    for preset in dict.fromkeys(r["preset"] for r in rows):
        by = {(r["seed"], r["precision"]): r["ppl"] for r in rows if r["preset"] == preset}
        seeds = sorted({s for s, _ in by})
        paired = [s for s in seeds if (s, "fp32") in by and (s, "bf16") in by]
        fp32 = [by[s, "fp32"] for s in seeds if (s, "fp32") in by]
        bf16 = [by[s, "bf16"] for s in seeds if (s, "bf16") in by]
        diffs = [by[s, "bf16"] - by[s, "fp32"] for s in paired]
        sigma = statistics.stdev(fp32) if len(fp32) > 1 else float("nan")
        mean_diff = statistics.fmean(diffs) if diffs else float("nan")
        out[preset] = {
            "seeds": seeds,
            "fp32_mean": statistics.fmean(fp32) if fp32 else float("nan"),
            "bf16_mean": statistics.fmean(bf16) if bf16 else float("nan"),
            "diffs": diffs,
            "mean_diff": mean_diff,
            "seed_sigma": sigma,
            "diff_over_sigma": mean_diff / sigma if sigma and sigma == sigma else float("nan"),
        }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--presets", nargs="+", default=["cpu-stagger", "cpu-fixed"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--runs", default=os.path.join(HERE, "results", "precision", "runs"))
    ap.add_argument("--out", default=os.path.join(HERE, "results", "precision-quality.json"))
    a = ap.parse_args(argv)
    from lab.training.dataload import load_data
    from lab.training.trainconfig import make_config

    machine_header()
    data = load_data(make_config(a.presets[0], {"run_dir": a.runs}))
    rows = []
    for preset in a.presets:
        for seed in a.seeds:
            for precision in ("fp32", "bf16"):
                r = run_once(preset, seed, precision, a.steps, a.runs, data)
                rows.append(r)
                print(f"{preset} seed {seed} {r['precision']}: ppl {r['ppl']:.3f}", flush=True)
                _write(a.out, rows)
    table = summarise(rows)
    print(f"\nheld-out ppl at T after {a.steps} steps, evaluated in the training precision")
    print("preset        fp32 mean  bf16 mean  bf16−fp32 per seed        mean    σ(seeds)  diff/σ")
    for preset, t in table.items():
        per = " ".join(f"{d:+.3f}" for d in t["diffs"])
        print(
            f"{preset:13s} {t['fp32_mean']:9.3f}  {t['bf16_mean']:9.3f}  {per:24s}"
            f"  {t['mean_diff']:+.3f}  {t['seed_sigma']:8.3f}  {t['diff_over_sigma']:+.2f}"
        )
    _write(a.out, rows, table)
    return 0


def _write(path: str, rows: list[dict], table: dict | None = None) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    from lab.machine.hardware import machine

    body = {"machine": machine().line(), "runs": rows, "summary": table}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(body, f, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
