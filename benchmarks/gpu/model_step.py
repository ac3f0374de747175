"""Section 4: a full training step (forward, backward, AdamW) under bf16 autocast, dense vs fixed
vs learned, with the default dispatch, the Triton kernel forced, and the pure-PyTorch paths.
Section ``long``: the same step at long context (batch 1), bf16 and fp32."""

from __future__ import annotations

import contextlib

import torch

from benchmarks.gpu.impls import triton_attention
from benchmarks.gpu.run import Run
from lab.machine.measure import time_fn
from lab.machine.precision import autocast


@contextlib.contextmanager
def forced_triton(launch):
    """Route every sparse attention call of lab.lm.model through the Triton kernel."""
    import lab.lm.model as model_mod

    original = model_mod.sparse_attention

    def routed(
        q,
        k,
        v,
        *,
        alpha,
        ladder,
        path="auto",
        scale=None,
    ):
        if path in ("dense", "mask"):
            return original(
                q,
                k,
                v,
                alpha=alpha,
                ladder=ladder,
                path=path,
                scale=scale,
            )
        return triton_attention(q, k, v, alpha, ladder, scale, launch=launch)

    model_mod.sparse_attention = routed
    try:
        yield
    finally:
        model_mod.sparse_attention = original


def train_step_time(
    run: Run,
    preset: str,
    overrides: dict,
    batch: int,
    steps: int,
    seq_len: int | None,
    precision: str | None = None,
) -> tuple[float, int]:
    """(median seconds of one optimizer step, sequence length); ``precision`` None: the
    device's autocast default (bf16 on CUDA)."""
    from lab.lm.model import build_model
    from lab.training.optim import param_groups

    dev = run.device
    torch.manual_seed(0)
    if seq_len:
        overrides = dict(overrides, seq_len=seq_len)
    model = build_model(preset, **overrides).to(dev)
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=3e-4, betas=(0.9, 0.95))
    T, V = model.cfg.seq_len, model.cfg.vocab_size
    g = torch.Generator(device="cpu").manual_seed(0)

    def step():
        ids = torch.randint(0, V, (batch, T + 1), generator=g).to(dev)
        with autocast(dev, precision):  # None: bf16 on CUDA
            _, loss = model(ids[:, :-1], ids[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    sec = time_fn(step, dev, reps=steps).median_s  # after 1 warm-up
    model = opt = None  # free the device memory (the closure holds the names)
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return sec, T


def section_train(
    run: Run, preset: str, batch: int, steps: int, seq_len: int | None, launch
) -> None:
    rows = run.record.setdefault("train", [])
    variants = [
        ("dense", dict(attention="dense"), None),
        ("fixed/auto", dict(schedule="fixed"), None),
        ("learned/auto", dict(schedule="learned"), None),
        ("fixed/triton", dict(schedule="fixed"), "triton"),
        ("learned/triton", dict(schedule="learned"), "triton"),
        ("fixed/shift", dict(schedule="fixed", path="shift"), None),
        ("learned/interp", dict(schedule="learned", path="interp"), None),
        ("stagger/triton", dict(schedule="stagger"), "triton"),
    ]
    for name, ov, force in variants:
        if not run.has_time(30, f"train {name}"):
            continue
        try:
            ctx = forced_triton(launch) if force else contextlib.nullcontext()
            with ctx:
                sec, T = train_step_time(run, preset, ov, batch, steps, seq_len)
            rec = dict(variant=name, preset=preset, batch=batch, seq_len=T, step_s=sec)
            rows.append(rec)
            print(f"  {name:<16} {sec * 1e3:9.1f} ms/step", flush=True)
        except Exception as e:
            run.error(f"train {name}", e)
            rows.append(dict(variant=name, error=f"{type(e).__name__}: {e}"[:300]))
    dense = next((r for r in rows if r.get("variant") == "dense" and "step_s" in r), None)
    for r in rows:
        if "step_s" not in r:
            continue
        r["tokens_per_s"] = r["batch"] * r["seq_len"] / r["step_s"]
        if dense:
            r["x_dense_time"] = r["step_s"] / dense["step_s"]  # < 1: faster than dense
    ratios = {}
    for family in ("auto", "triton"):
        f = next((r for r in rows if r.get("variant") == f"fixed/{family}" and "step_s" in r), None)
        lv = next(
            (r for r in rows if r.get("variant") == f"learned/{family}" and "step_s" in r), None
        )
        if f and lv:
            ratios[f"learned/fixed ({family})"] = lv["step_s"] / f["step_s"]
    f = next((r for r in rows if r.get("variant") == "fixed/shift" and "step_s" in r), None)
    lv = next((r for r in rows if r.get("variant") == "learned/interp" and "step_s" in r), None)
    if f and lv:
        ratios["learned/fixed (pure PyTorch)"] = lv["step_s"] / f["step_s"]
    run.record["train_ratios"] = ratios


def section_long(run: Run, preset: str, lengths, steps: int) -> None:
    """Long context (issue 41): the training step at batch 1 and each of ``lengths``, dense vs
    fixed / stagger / learned (the default dispatch), in bf16 autocast and in fp32 — the GPU
    rows of ``benchmarks/long_context.py``'s table; time relative to dense at the same T and
    precision, and each step's peak memory."""
    rows = run.record.setdefault("long", [])
    schedules = [("dense", dict(attention="dense"))] + [
        (s, dict(schedule=s)) for s in ("fixed", "stagger", "learned")
    ]
    for T in lengths:
        for precision in ("bf16", "fp32"):
            dense = None
            for name, ov in schedules:
                if not run.has_time(60, f"long T={T} {precision} {name}"):
                    continue
                try:
                    if run.device.type == "cuda":
                        torch.cuda.reset_peak_memory_stats(run.device)
                    sec, _ = train_step_time(run, preset, ov, 1, steps, T, precision)
                    peak = (
                        torch.cuda.max_memory_allocated(run.device) / 2**20
                        if run.device.type == "cuda"
                        else None
                    )
                    dense = sec if name == "dense" else dense
                    rec = dict(T=T, precision=precision, schedule=name, step_s=sec, peak_mb=peak)
                    rec["x_dense"] = sec / dense if dense else None
                    rows.append(rec)
                    print(f"  T={T:<6} {precision} {name:<8} {sec * 1e3:9.1f} ms/step", flush=True)
                except Exception as e:
                    run.error(f"long T={T} {precision} {name}", e)
                    rows.append(dict(T=T, precision=precision, schedule=name, error=f"{e}"[:300]))
