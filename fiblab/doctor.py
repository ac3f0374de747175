"""`fiblab doctor`: what this machine is, what the lab will do on it, and how long that takes.

    report = diagnose()          # a dict: machine, kernels, precision, choices, steps, estimates
    print(format_doctor(report)) # the readable page (`fiblab doctor`; `--json` prints the dict)

Why: every speed choice of the lab follows the machine (`lab.machine.hardware`): `auto` precision is
bf16 only where it is native, the attention and blur implementations are picked by a short
timing at first use and cached (`lab.machine.autotune`), and the C++ kernel is compiled for this CPU.
A researcher should see those choices and their timings in one place, and know before starting
whether the main job takes minutes or hours here.

What it runs (≈ 10–30 s on a 2-core CPU once the C++ kernel is built; the first build adds
≈ 30–60 s): a bf16-vs-fp32 matmul, a few training steps of the main job's language model
(``cpu-stagger``: forward, backward, AdamW on one synthetic batch) in fp32 and in bf16, and a
few training steps of the retrieval probe at the demo's scale (depths 2 and 4) and the paper's
(depths 2, 4, 8).  The attention and blur choices are made (or read from the cache) by those
steps themselves, so what is printed is what a real run does.  Last, `import jsonschema` in a
fresh interpreter (`jsonschema_import`): every Ray process and Jupyter server pays its cost.

A busy machine: each step is timed ``reps`` times and the *fastest* counts (load only ever
adds time), with its spread shown; the CPU other processes took meanwhile is measured
(`lab.machine.contention`) and a busy machine is said so in the first lines, with the estimates
marked as likely high.  A cached implementation choice that was measured while the machine
was busy is measured again when doctor finds the machine quiet, and marked otherwise.

The estimates are step time × steps, stage by stage, in the demo's own plan (`analysis.experiments.demo.job`)
and the paper's Table 2 grid (12 blur cells × 2,500 steps, depths 2/4/8, each measured), one job
at a time; the demo's language-model stage
is scaled by `LM_EVAL_FACTOR` for its evaluations, measured from a demo run (see
benchmarks/RESULTS.md).  They are estimates: a busy machine is slower.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time

import torch

from lab.machine import contention
from lab.machine.hardware import machine
from lab.machine.measure import Timing, time_fn
from lab.machine.precision import (
    PRECISIONS,
    auto_precision,
    autocast,
    default_precision,
    record_precision,
    slow_bf16_reason,
    workload_class,
)
from lab.util.wording import plural

#: demo LM stage time / its training steps' time (the rest: the evaluations at 1×/2×/4× under
#: both rung policies, position bins, the battery).  Measured 2026-12-01 on the AVX2 machine,
#: quiet: cpu-dense trained 200 steps in 95 s, then evaluated in 6 s; the sparse runs evaluate
#: two rung policies, so ≈ 1.15 over the six runs.  A fresh machine also trains the tokenizer once.
LM_EVAL_FACTOR = 1.15
TABLE2_DEPTHS = (2, 4, 8)
TABLE2_CELLS_PER_DEPTH = 4  # uniform and staggered init × seeds 0 and 1


# --------------------------------------------------------------------------------------------
# measurements
# --------------------------------------------------------------------------------------------
def _matmul_ms() -> dict:
    """A (4096 × 256) @ (256 × 768) linear layer in fp32 and under bf16 autocast: the ratio
    is what `auto` avoids on CPUs without native bf16."""
    x, lin = torch.randn(4096, 256), torch.nn.Linear(256, 768)
    out = {}
    for prec in ("fp32", "bf16"):

        def run(prec=prec):
            with torch.no_grad(), autocast("cpu", prec):
                lin(x)

        out[prec] = 1e3 * time_fn(run, warmup=1, reps=5).median_s
    return out


def _lm_step_s(precision: str, reps: int) -> Timing:
    """One training step of the demo's language model (cpu-stagger) on this CPU, timed."""
    from lab.lm.model import FibLM
    from lab.training.trainconfig import make_config

    cfg = make_config("cpu-stagger")
    torch.manual_seed(0)
    model = FibLM(cfg.model)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(
        0, cfg.model.vocab_size, (cfg.micro_batch, cfg.model.seq_len + 1), generator=g
    )
    x, y = ids[:, :-1], ids[:, 1:]  # (B, T) each

    def step():
        for _ in range(cfg.accum):
            with autocast("cpu", precision):
                _, loss = model(x, y)
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return time_fn(step, warmup=1, reps=reps)


def _lm_workload() -> tuple[str, float]:
    """(the demo LM step's workload class, |loss(bf16) − loss(fp32)| on one batch): the quality
    check `lab.machine.precision.record_precision` keeps beside the timings."""
    from lab.lm.model import FibLM
    from lab.training.trainconfig import make_config

    cfg = make_config("cpu-stagger")
    m = cfg.model
    torch.manual_seed(0)
    model = FibLM(m).eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, m.vocab_size, (cfg.micro_batch, m.seq_len + 1), generator=g)
    with torch.no_grad():
        losses = {}
        for p in PRECISIONS:
            with autocast("cpu", p):
                losses[p] = float(model(ids[:, :-1], ids[:, 1:])[1])
    cls = workload_class("lm-train", m.n_layers, m.d_model, m.seq_len, cfg.micro_batch, m.attention)
    return cls, abs(losses["bf16"] - losses["fp32"])


def _probe_step_s(scale: str, depth: int, precision: str, reps: int) -> Timing:
    """One training step of a blur probe cell at `scale` and `depth`, timed."""
    from probes.runner import blur_step

    return time_fn(blur_step(scale, depth, precision), warmup=1, reps=reps)


def _choices() -> list[dict]:
    """This machine's implementation choices, cached or made by the steps (`lab.machine.autotune`)."""
    from lab.machine import autotune

    return [
        dataclasses.asdict(d) if dataclasses.is_dataclass(d) else dict(d)
        for d in autotune.decisions()
    ]


def _kernels() -> dict:
    from lab.kernels import cpu, triton_status

    triton = triton_status("cuda")
    return {
        "cpp": cpu.build_info(),
        "triton": {"ok": triton is True, "reason": None if triton is True else triton},
    }


#: run in a fresh interpreter: the seconds `import jsonschema` takes there, and whether it built
#: rfc3987-syntax's IRI grammar (any `rfc3987_syntax` module loaded); JSON null when not installed
_JSONSCHEMA_PROBE = """
import json, sys, time
from importlib import metadata
t = time.perf_counter()
try:
    import jsonschema
except ImportError:
    print("null")
    raise SystemExit
s = time.perf_counter() - t
try:
    v = metadata.version("jsonschema")
except metadata.PackageNotFoundError:
    v = "?"
iri = any(m.split(".")[0] == "rfc3987_syntax" for m in sys.modules)
print(json.dumps({"jsonschema": v, "seconds": s, "iri_grammar": iri}))
"""


def jsonschema_import(env: dict | None = None) -> dict:
    """How long a fresh interpreter takes to import jsonschema, and whether that built
    rfc3987-syntax's IRI grammar (jsonschema >= 4.25 does where jupyter-events installed it).

    Why: every Ray process (driver, agents, each worker) and every Jupyter server imports
    jsonschema; the grammar costs each 2-3 s of CPU, and under load a Ray node's agent then
    misses the raylet's fixed wait and the node dies at start (benchmarks/RESULTS.md, "The AVX2
    EPYC an eighth time"). Measured, not read from the version: what matters is the import.
    ``env``: the interpreter's environment (default: this one's)."""
    done = subprocess.run(
        [sys.executable, "-c", _JSONSCHEMA_PROBE],
        capture_output=True,
        text=True,
        env=os.environ if env is None else env,
        timeout=120,
    )
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"jsonschema": None, "seconds": None, "iri_grammar": False, "error": tail}
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return found or {"jsonschema": None, "seconds": None, "iri_grammar": False}


def imports_line(i: dict) -> str:
    """The doctor's line for a `jsonschema_import` answer: the fix where the import is slow."""
    if i.get("error"):
        return f"could not import jsonschema: {i['error']}"
    if i["jsonschema"] is None:
        return "jsonschema not installed (Ray and the notebooks install it)"
    if i["iri_grammar"]:
        return (
            f"SLOW — import jsonschema took {i['seconds']:.1f} s: jsonschema {i['jsonschema']} "
            "builds rfc3987-syntax's IRI grammar at import, in every Ray process and Jupyter "
            "server (under load a Ray node can die at start): pip install 'jsonschema<4.25'"
        )
    return f"import jsonschema {i['seconds']:.2f} s ({i['jsonschema']}, no IRI grammar built)"


# --------------------------------------------------------------------------------------------
# the report
# --------------------------------------------------------------------------------------------
def estimates(lm_step_s: float, probe_s: dict) -> dict:
    """Expected wall seconds of the demo and of the Table 2 grid from measured step times.

    probe_s: {(scale, depth): seconds per step} with ("demo", d) for the demo's depths and
    ("paper", d) for the grid's depths 2, 4 and 8."""
    from analysis.experiments.demo.job import SCALES as DEMO

    demo = DEMO["full"]
    n_probe = len(demo.probe_inits) * len(demo.probe_seeds)
    probe = sum(n_probe * demo.probe.steps * probe_s[("demo", d)] for d in demo.probe_depths)
    lm = len(demo.lm_runs) * demo.lm_steps * lm_step_s * LM_EVAL_FACTOR
    per_depth = {d: probe_s[("paper", d)] for d in TABLE2_DEPTHS}
    from probes.settings import SCALES as PROBE

    steps = PROBE["paper"].steps
    grid = {d: TABLE2_CELLS_PER_DEPTH * steps * s for d, s in per_depth.items()}
    return {
        "demo_s": probe + lm,
        "demo_stages_s": {"probe": probe, "language_models": lm},
        "table2_grid_s": sum(grid.values()),
        "table2_by_depth_s": {str(d): v for d, v in grid.items()},
        "table2_step_s": {str(d): v for d, v in per_depth.items()},
        "jobs": 1,
    }


def precision_answer(gpu) -> dict:
    """What ``--precision auto`` picks on this CPU (and on its GPU, if any), and why bf16 is slow
    here (None where the CPU runs it natively): the part of the report that differs between the
    lab's two CPUs, so a test can ask it under each without timing everything twice."""
    return {
        "auto_cpu": default_precision("cpu"),
        "auto_cuda": default_precision("cuda") if gpu else None,
        "slow_bf16_reason": slow_bf16_reason("cpu"),
    }


def diagnose(reps: int = 3, retune: bool = False) -> dict:
    """Everything `fiblab doctor` prints, as one JSON-able dict (see the module docstring).
    ``retune``: forget this machine's cached implementation choices first, so the steps below
    measure them again (a choice made while the machine was busy can be wrong)."""
    from lab.machine import autotune

    t0 = time.perf_counter()
    before = contention.probe(0.5)  # busy now?  then a busy-made choice is not re-measured
    forgotten = autotune.forget() if retune else 0
    remeasured = 0 if retune or before.busy else autotune.forget(only_busy=True)
    m = machine()
    kernels = _kernels()
    precision = default_precision("cpu")
    with contention.watch() as load:
        matmul = _matmul_ms()
        timed = {"lm_cpu_stagger": _lm_step_s(precision, reps)}
        timed["lm_cpu_stagger_bf16"] = _lm_step_s("bf16", reps)
        for scale, depths in (("demo", (2, 4)), ("paper", TABLE2_DEPTHS)):
            for d in depths:
                timed[f"probe_{scale}_d{d}"] = _probe_step_s(scale, d, precision, reps)
    steps = {k: t.min_s for k, t in timed.items()}  # load only adds time: the fastest counts
    lm = steps["lm_cpu_stagger"]
    # what auto picks for the demo's LM step, from this measurement (kept for every run)
    workload, delta = _lm_workload()
    other = load.result.other_cores
    record_precision(workload, lm, steps["lm_cpu_stagger_bf16"], delta, other)
    auto_lm, auto_why = auto_precision("cpu", workload)
    probe = {(k.split("_")[1], int(k[-1])): v for k, v in steps.items() if k.startswith("probe")}
    return {
        "machine": m.to_dict(),
        "kernels": kernels,
        "precision": {
            **precision_answer(m.gpu),
            "matmul_ms": matmul,
            "auto_lm": auto_lm,
            "auto_lm_why": auto_why,
            "quality_delta": delta,
        },  # fmt: skip
        "choices": _choices(),
        "imports": jsonschema_import(),
        "autotune": {
            "enabled": autotune.enabled(),
            "cache": str(autotune.cache_path()),
            "forgotten": forgotten,
            "remeasured_busy": remeasured,
        },
        "load": {"before": before.to_dict(), "timing": load.result.to_dict()},
        "busy": before.busy or load.result.busy,
        "steps_s": steps,
        "steps_spread": {k: max(t.times_s) / t.min_s for k, t in timed.items()},
        "estimates": estimates(lm, probe),
        "seconds": time.perf_counter() - t0,
    }


def _minutes(s: float) -> str:
    return f"{s / 60:.0f} min" if s >= 90 else f"{s:.0f} s"


def _choice_line(c: dict) -> str:
    times = c.get("timings_ms") or {}
    shown = ", ".join(f"{k} {v:.1f} ms" for k, v in times.items())
    errors = c.get("errors") or {}
    broken = "".join(f"; {k} failed: {v}" for k, v in errors.items())
    other = c.get("other_cores")
    busy = (
        f" — measured while busy ({other:.1f} cores used by others): --retune on a quiet machine"
        if other is not None and other >= contention.BUSY_CORES
        else ""
    )
    return f"{c.get('op')}: {c.get('choice')} for {c.get('shape_class')} ({shown}{broken}){busy}"


def format_doctor(r: dict) -> str:
    """The readable page of a `diagnose` report."""
    m, k, p, st, est = r["machine"], r["kernels"], r["precision"], r["steps_s"], r["estimates"]
    gpu = f"{m['gpu']} (CUDA {m['cuda']})" if m["gpu"] else "none usable by torch"
    cpp = k["cpp"]
    cpp_line = (
        f"built ({' '.join(cpp['flags'])}), cache entry {cpp['name']} (keyed by this CPU's ISA)"
        if cpp["ok"]
        else f"unavailable: {cpp['reason']} (the lab falls back to the PyTorch path)"
    )
    tri = "available" if k["triton"]["ok"] else f"unavailable: {k['triton']['reason']}"
    mm = p["matmul_ms"]
    prec = f"auto → {p['auto_cpu']} on this CPU for probe cells and unmeasured workloads"
    if p["slow_bf16_reason"]:
        prec += " (no native bf16 units: bf16 is emulated here)"
    if p["auto_cuda"]:
        prec += f", {p['auto_cuda']} on CUDA"
    timing = contention.Contention(**{k: v for k, v in r["load"]["timing"].items() if k != "busy"})
    if r["busy"]:
        load = (
            f"BUSY — {timing.line().removeprefix('busy: ')} while doctor timed: the step times "
            f"and estimates below are likely high; run fiblab doctor again on a quiet machine"
        )
    else:
        load = timing.line() + " while doctor timed"
    spread = max(r["steps_spread"].values())
    lm16 = st["lm_cpu_stagger_bf16"] / st["lm_cpu_stagger"]
    lines = [
        "fiblab doctor — this machine and what the lab does on it",
        f"  load        {load}",
        f"  machine     {m['cpu_model']} · PyTorch CPU capability {m['capability']}"
        f" · AVX512-BF16 {'yes' if m['avx512_bf16'] else 'no'} · AMX {'yes' if m['amx'] else 'no'}",
        f"  threads     {plural(m['cores'], 'core')}, torch uses {plural(m['threads'], 'thread')}"
        f" · torch {m['torch']}",
        f"  GPU         {gpu}",
        f"  C++ kernel  {cpp_line}",
        f"  Triton      {tri}",
        f"  imports     {imports_line(r['imports'])}",
        f"  precision   {prec}; linear layer fp32 {mm['fp32']:.1f} ms, bf16 {mm['bf16']:.1f} ms"
        f" ({mm['bf16'] / mm['fp32']:.1f}×); the demo LM's step under bf16 takes "
        f"{lm16:.2f}× its fp32 step (--precision bf16 opts in)",
        f"  auto (LM)   {p['auto_lm_why']}; one batch's loss bf16 − fp32: "
        f"{p['quality_delta']:.4f} nats (the check allows 0.01)",
    ]
    lines += [
        ("  choices     " if i == 0 else " " * 14) + _choice_line(c)
        for i, c in enumerate(r["choices"])
    ] or ["  choices     none measured (FIBLAB_AUTOTUNE=0, or every implementation forced)"]
    again = r["autotune"].get("remeasured_busy") or 0
    lines.append(
        f"              cached in {r['autotune']['cache']} (fiblab doctor --retune: measure again)"
        + (f"; {plural(again, 'choice')} made while busy measured again now" if again else "")
    )
    lines += [
        f"  steps       demo LM (cpu-stagger) {st['lm_cpu_stagger']:.2f} s · probe demo d2 "
        f"{st['probe_demo_d2']:.3f} s, d4 {st['probe_demo_d4']:.3f} s · probe paper d2 "
        f"{st['probe_paper_d2']:.3f} s, d4 {st['probe_paper_d4']:.3f} s, d8 "
        f"{st['probe_paper_d8']:.3f} s (fastest of each step's repeats; the slowest was "
        f"{spread:.2f}× the fastest)",
        f"  expected    fiblab demo ≈ {_minutes(est['demo_s'])} (probe "
        f"{_minutes(est['demo_stages_s']['probe'])}, language models with evaluations "
        f"{_minutes(est['demo_stages_s']['language_models'])})",
        f"              Table 2 grid (fiblab probe marked, 12 cells, one job, {p['auto_cpu']}) ≈ "
        f"{_minutes(est['table2_grid_s'])} ("
        + ", ".join(f"depth {d} {_minutes(s)}" for d, s in est["table2_by_depth_s"].items())
        + ")",
        f"  (doctor took {r['seconds']:.0f} s; estimates are step time × steps on this machine "
        f"as it was{' (busy)' if r['busy'] else ''})",
    ]
    return "\n".join(lines)
