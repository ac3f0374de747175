"""Section 5: the retrieval probe (Table 2's cost): the blur gather on the device against float64
on CPU, then the probe-small training step at depths 2/4/8 and what the 12-cell grid would take."""

from __future__ import annotations

import torch

from benchmarks.gpu.check import rel_err
from benchmarks.gpu.run import Run
from lab.machine.measure import time_fn
from lab.machine.precision import autocast

PROBE_CHECK_SHAPES = [
    dict(B=2, H=4, KV=2, T=512, D=64, alpha=0.83, width=20.0),
    dict(B=1, H=4, KV=1, T=300, D=32, alpha=1.37, width=0.5),
]
SMOKE_PROBE_SHAPES = [dict(B=1, H=2, KV=1, T=40, D=8, alpha=0.9, width=3.0)]


def section_probe(run: Run, smoke: bool, steps: int) -> None:
    from lab.sparse.blur import blur_attention
    from probes.runner import build_probe_model, task_loss
    from probes.settings import SCALES, Cell

    dev = run.device
    rows = run.record.setdefault("probe", {"check": [], "step": []})
    for shp in SMOKE_PROBE_SHAPES if smoke else PROBE_CHECK_SHAPES:
        try:
            g = torch.Generator().manual_seed(shp["T"])
            B, H, KV, T, D = (shp[x] for x in ("B", "H", "KV", "T", "D"))
            qkv = [torch.randn(B, n, T, D, generator=g, dtype=torch.float64) for n in (H, KV, KV)]
            wgt = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)

            def run_blur(xs, a, impl):
                out = blur_attention(*xs, alpha=a, window=8, width=shp["width"], impl=impl)
                (out.double() * wgt.to(out.device)).sum().backward()
                return [out] + [x.grad for x in xs] + [a.grad]

            ref_in = [x.clone().requires_grad_(True) for x in qkv]
            ref = run_blur(
                ref_in, torch.tensor(shp["alpha"], dtype=torch.float64, requires_grad=True), "fft"
            )
            dev_in = [x.to(dev, torch.float32).requires_grad_(True) for x in qkv]
            got = run_blur(
                dev_in, torch.tensor(shp["alpha"], device=dev, requires_grad=True), "auto"
            )
            errs = {
                n: rel_err(a.cpu(), b)
                for n, a, b in zip(("out", "dq", "dk", "dv", "dalpha"), got, ref)
            }
            ok = all(e <= 1e-4 for e in errs.values())
            rows["check"].append(dict(shape=shp, errors=errs, ok=ok))
            print(
                f"  blur {shp}: "
                + " ".join(f"{k} {v:.1e}" for k, v in errs.items())
                + ("" if ok else "  FAIL"),
                flush=True,
            )
        except Exception as e:
            run.error(f"probe check {shp}", e)
    settings = SCALES["tiny"] if smoke else SCALES["paper"]
    for depth in (2,) if smoke else (2, 4, 8):
        for mech in ("dense", "blur"):
            if not run.has_time(20, f"probe step {mech} depth {depth}"):
                continue
            try:
                torch.manual_seed(0)
                cell = Cell(mech, depth, "staggered" if mech == "blur" else "-", 0)
                model = build_probe_model(cell, settings).to(dev)
                if mech == "blur":
                    model.set_blur_width(20.0)
                opt = torch.optim.AdamW(model.parameters(), lr=settings.lr)
                gen = torch.Generator().manual_seed(0)

                def step():
                    with autocast(dev):  # bf16 on CUDA
                        loss = task_loss(model, cell, settings, gen)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()

                sec = time_fn(step, dev, reps=steps).median_s
                rows["step"].append(dict(mechanism=mech, depth=depth, step_s=sec))
                print(f"  probe-small depth {depth} {mech:<6} {sec * 1e3:8.1f} ms/step", flush=True)
                model = opt = None  # free the device memory (the closure holds the names)
            except Exception as e:
                run.error(f"probe step {mech} depth {depth}", e)
    blur = {r["depth"]: r["step_s"] for r in rows["step"] if r["mechanism"] == "blur"}
    if not smoke and len(blur) == 3:
        rows["grid_minutes_one_at_a_time"] = sum(4 * 2500 * s for s in blur.values()) / 60
        print(
            f"  the 12-cell Table 2 grid at these step times: "
            f"{rows['grid_minutes_one_at_a_time']:.1f} min"
        )
