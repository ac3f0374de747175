"""A small synthetic experiment store for the tests (and the notebooks' smoke run).

`write_fixture(path)` writes LM runs (fib/fixed and fib/stagger over 2 seeds, fib/learned with an
α trajectory, dense) with final, extrapolation, position-matched and position-bin evaluations on
'bible', and two marked-probe records, so that every section of notebooks 04 and 05 has data in
seconds.  It lives with the tests, not in product code: tests/fiblab/test_notebooks.py points
FIBLAB_STORE at one before it runs those notebooks.
"""

from __future__ import annotations

import os

from lab.store import Store

_FIX_T, _FIX_L, _FIX_STEP = 64, 4, 40
_FIX_BASE = {"fixed": 3.00, "stagger": 2.90, "learned": 2.95, "dense": 2.70}


def _fixture_config(schedule: str, seed: int) -> dict:
    model = {
        "d_model": 32,
        "n_layers": _FIX_L,
        "n_heads": 4,
        "n_kv_heads": 2,
        "vocab_size": 512,
        "seq_len": _FIX_T,
        "attention": "dense" if schedule == "dense" else "sparse",
        "base": "fib",
        "rungs": 8,
        "window": 8,
        "schedule": "fixed" if schedule == "dense" else schedule,
        "learned_init": "stagger",
        "alpha_min": 0.5,
        "alpha_span": 1.0,
    }
    return {
        "model": model,
        "seed": seed,
        "data": "bible",
        "steps": _FIX_STEP,
        "name": f"smoke-{schedule}-s{seed}",
    }


def write_fixture(path: str) -> list[str]:
    """Write a small synthetic store at ``path``: fib/fixed and fib/stagger (2 seeds each),
    fib/learned (α trajectory) and dense LM runs with final, extrapolation (both rung policies,
    position-matched blocks) and position-bin evaluations on 'bible', and two marked-probe
    records (blur, uniform and staggered init) with α trajectories. Returns the run names."""
    names = []
    T, ds = _FIX_T, "bible"
    with Store(path) as s:
        for schedule, seeds in (
            ("fixed", (0, 1)),
            ("stagger", (0, 1)),
            ("learned", (0,)),
            ("dense", (0,)),
        ):
            for seed in seeds:
                cfg = _fixture_config(schedule, seed)
                name = cfg["name"]
                names.append(name)
                s.start_run(name, cfg, kind="lm", preset="tiny", seed=seed, git_rev="fixture")
                base = _FIX_BASE[schedule] + 0.03 * seed
                dense = schedule == "dense"
                s.log_eval(name, _FIX_STEP // 2, ds, T, base + 0.4, 64 * T)
                s.log_eval(name, _FIX_STEP, ds, T, base, 64 * T)
                for m in (2, 4):
                    grow = 0.8 * (m - 1) if dense else -0.02 * m
                    s.log_eval(name, _FIX_STEP, ds, m * T, base + grow, 64 * T)
                    if not dense:
                        s.log_eval(
                            name, _FIX_STEP, ds, m * T, base - 0.01 * m, 64 * T, kind="freeze"
                        )
                for j in range(4):
                    s.log_eval(
                        name,
                        _FIX_STEP,
                        ds,
                        4 * T,
                        base + (0.5 * j if dense else 0.05 - 0.03 * j),
                        16 * T,
                        kind=f"recompute:block{j}",
                    )
                    if not dense:
                        s.log_eval(
                            name,
                            _FIX_STEP,
                            ds,
                            4 * T,
                            base + 0.06 - 0.03 * j,
                            16 * T,
                            kind=f"freeze:block{j}",
                        )
                for b in range(8):
                    s.log_eval(
                        name, _FIX_STEP, ds, T, base + 0.6 - 0.08 * b, 8 * 64, kind=f"bin{b}"
                    )
                if schedule == "learned":
                    init = [0.55, 0.5 + 1 / 3, 0.5 + 2 / 3, 1.45]  # stagger, clamped
                    for step in (1, 10, 20, 30, 40):
                        s.log_alphas(
                            name,
                            step,
                            [
                                a + (0.0015 if i == 0 else -0.0004) * step
                                for i, a in enumerate(init)
                            ],
                        )
                s.set_status(name, "done")
        for init, start, acc in (
            ("uniform", [1.0, 1.0], {200: 0.4, 350: 0.1}),
            ("staggered", [0.55, 1.45], {200: 0.9, 350: 0.05}),
        ):
            traj = [
                {"step": st, "alphas": [a + 0.0005 * st * (1 - 2 * i) for i, a in enumerate(start)]}
                for st in range(0, 41, 10)
            ]
            names.append(
                s.log_probe(
                    {
                        "task": "marked",
                        "mechanism": "blur",
                        "depth": 2,
                        "init": init,
                        "seed": 0,
                        "steps": 40,
                        "acc": acc,
                        "alphas": traj[-1]["alphas"],
                        "trajectory": traj,
                        "loss": [{"step": st, "loss": 3.0 - 0.01 * st} for st in range(0, 41, 10)],
                        "git_rev": "fixture",
                    }
                )
            )
    return names


def smoke_store(path: str) -> str:
    """A fresh fixture store (`write_fixture`) at ``path``, rewritten on every call; its path."""
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_fixture(path)
    return path
