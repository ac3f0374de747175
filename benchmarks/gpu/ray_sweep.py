"""Section 7, ``ray``: one tiny Ray sweep on the GPU, its results against the same runs here.

A local Ray instance (`fiblab.cluster.ray_cluster.connect("local")`, which sees this machine's GPUs)
runs two ``tiny`` LM runs through `fiblab.cluster.ray_run.run_sweep`, one GPU per task; the driver
writes them into a store.  The same two configs are then trained in this process on the same
GPU into another store, and the two stores' losses, evaluations and α are compared: equal up to
``TOL`` relative (the same seeds on the same GPU; CUDA's atomics in a backward pass may make
the last bits differ run to run, so exact equality is recorded beside it, not required).
Skipped (and recorded as such) without CUDA or without Ray (``pip install 'fiblab[ray]'``).
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
import time

from benchmarks.gpu.run import Run

STEPS = 6
TOL = 1e-3
TIMING = {"tokens_per_s", "eval_s"}  # metrics that measure the machine, not the model


def tiny_configs(root: str) -> list:
    """The sweep's two runs: ``tiny`` at seeds 0 and 1, a checkpoint and an evaluation every
    3 of the 6 steps, under ``root``."""
    from lab.training.trainconfig import make_config

    over = {"run_dir": root, "steps": STEPS, "ckpt_every": 3, "eval_every": 3}
    return [make_config("tiny", {**over, "seed": s, "name": f"tiny-s{s}"}) for s in (0, 1)]


def numbers(store_path: str, name: str) -> dict:
    """A run's numbers in a store, keyed for comparison: loss-like metrics, evaluation losses
    and α, by (step, name / dataset / layer)."""
    from lab.store import Store

    with Store(store_path) as st:
        m = st.metrics(name)
        m = m[~m["name"].isin(TIMING)]
        ev, al = st.evals(name), st.alphas(name)
    out = {("m", int(s), n): float(v) for s, n, v in zip(m["step"], m["name"], m["value"])}
    for s, k, c, loss in zip(ev["step"], ev["kind"], ev["context_len"], ev["loss"]):
        out[("e", int(s), f"{k}@{c}")] = float(loss)
    out.update(
        {("a", int(s), int(i)): float(a) for s, i, a in zip(al["step"], al["layer"], al["alpha"])}
    )
    return out


def compare(got: dict, want: dict) -> tuple[float, bool]:
    """The largest relative difference over the keys of both (inf when the keys differ) and
    whether every value is bit-equal."""
    import math

    if set(got) != set(want) or not want:
        return math.inf, False
    worst = 0.0
    for k, w in want.items():
        g = got[k]
        if math.isnan(w) and math.isnan(g):
            continue
        worst = max(worst, abs(g - w) / max(abs(w), 1e-12))
    return worst, all(got[k] == want[k] or got[k] != got[k] for k in want)


def tiny_sweep(root: str, gpus: bool | None = True, address: str = "local") -> dict:
    """The sweep on Ray and the same runs here; the record of the comparison."""
    from fiblab.cluster.ray_run import run_sweep
    from lab.training.train import train

    cfgs = tiny_configs(os.path.join(root, "ray"))
    ray_store, here_store = os.path.join(root, "ray.db"), os.path.join(root, "here.db")
    t0 = time.perf_counter()
    res = run_sweep(cfgs, ray_store, address=address, progress=True, gpus=gpus)
    ray_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for cfg in tiny_configs(os.path.join(root, "here")):
        train(cfg, store_path=here_store, quiet=True)
    here_s = time.perf_counter() - t0
    runs = []
    for cfg, r in zip(cfgs, res):
        worst, exact = compare(numbers(ray_store, cfg.name), numbers(here_store, cfg.name))
        runs.append(
            dict(
                name=cfg.name, outcome=r.outcome, final_ppl=r.final_ppl, rel_err=worst, exact=exact
            )
        )
    ok = all(r["outcome"] == "trained" and r["rel_err"] <= TOL for r in runs)
    return dict(runs=runs, ok=ok, tol=TOL, steps=STEPS, ray_s=ray_s, here_s=here_s)


def section_ray(run: Run) -> None:
    """The tiny sweep (see the module docstring), on CUDA with Ray only."""
    if run.device.type != "cuda":
        run.record["skipped"].append("ray (needs CUDA: one GPU per task)")
        print("  skipped: the tiny Ray sweep needs CUDA (one GPU per task)")
        return
    if importlib.util.find_spec("ray") is None:
        run.record["skipped"].append("ray (not installed: pip install 'fiblab[ray]')")
        print("  skipped: Ray is not installed (pip install 'fiblab[ray]')")
        return
    if not run.has_time(120, "ray tiny sweep"):
        return
    with tempfile.TemporaryDirectory(prefix="fiblab-ray-") as root:
        rec = tiny_sweep(root, gpus=True)
    run.record["ray"] = rec
    for r in rec["runs"]:
        print(
            f"  {r['name']}: {r['outcome']}, max rel diff to the run here {r['rel_err']:.1e}"
            f" ({'bit-equal' if r['exact'] else f'tol {TOL:g}'})"
        )
    print(
        f"  tiny sweep on Ray {'ok' if rec['ok'] else 'MISMATCH'}: {rec['ray_s']:.0f} s on Ray "
        f"(start-up included), {rec['here_s']:.0f} s the same runs here"
    )
