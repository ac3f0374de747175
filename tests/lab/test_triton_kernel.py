"""The fused Triton column-attention kernel against the float64 oracle (`lab.kernels.oracle`).

The kernels run on CPU under Triton's interpreter, which must be switched on (TRITON_INTERPRET=1)
before the kernel module is imported.  Other test modules may import torch, triton or the kernel
module first, so the kernel runs in a subprocess: this file is also the worker script
(``python tests/lab/test_triton_kernel.py --worker CASES RESULTS [--device D]``).  The test process
builds the inputs and the oracle; the worker runs every case once (one interpreter start-up) and
returns outputs and gradients (q, k, v, fracs or α); each test compares one case.

Oracle: `lab.kernels.oracle` — each column's key/value rows gathered for every query,
interpolated as (1 − f)·row[t − lo] + f·row[max(t − lo − 1, 0)], masked for t < lo, one dense
softmax over the columns (zeros where no column is valid); gradients by float64 autograd.
Tolerance: max |error| ≤ 1e-5 · max |reference| per tensor (float32 kernel against float64).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile

import pytest
import torch

from lab.kernels.oracle import oracle_attention
from lab.ladder.offsets import Ladder

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RTOL = 1e-5

# --------------------------------------------------------------------------------------------
# cases: (name, spec).  spec: shapes, columns, launch block; "alpha" cases build the column plan
# from an α tensor in the worker (lab.ladder.plan.plan_for's kernel inputs) and return dα.
# --------------------------------------------------------------------------------------------
CASES = {
    # integer columns of a real attended set, no GQA, T not a multiple of the block
    "int-gqa1": dict(
        B=1, H=2, KV=2, T=40, D=16, dists=[0, 1, 2, 3, 6, 10, 16, 27], fracs=[0] * 8, block=16
    ),
    # interpolated columns (the clamp at row 0: lo = 1), GQA 2, T not a multiple of 32
    "interp-gqa2": dict(
        B=1,
        H=4,
        KV=2,
        T=50,
        D=16,
        dists=[0, 1, 2, 4, 7, 12, 20, 33],
        fracs=[0, 0.7, 0, 0.25, 0.5, 0.9, 0.05, 0.6],
        block=32,
    ),
    # GQA 4; a column at lo = T − 1 (one query reads it) and one at lo ≥ T (none reads it)
    "gqa4-edge": dict(
        B=1,
        H=4,
        KV=1,
        T=32,
        D=16,
        dists=[0, 1, 3, 31, 40, 9],
        fracs=[0, 0, 0.4, 0.3, 0.5, 0.8],
        block=16,
    ),
    # batch 2, head dim not a power of two, unsorted and repeated distances
    "batch-d12": dict(
        B=2,
        H=2,
        KV=1,
        T=33,
        D=12,
        dists=[5, 0, 2, 5, 1, 13],
        fracs=[0.3, 0, 0, 0.3, 0.6, 0.45],
        block=16,
    ),
    # fracs requiring grad with the default marking: every column (window too) reads two rows,
    # so dfracs is the derivative even where f = 0
    "all-marked": dict(
        B=1,
        H=2,
        KV=1,
        T=24,
        D=16,
        dists=[0, 1, 2, 3, 5, 8],
        fracs=[0, 0, 0, 0, 0.35, 0],
        block=16,
        marking="default",
    ),
    # no column at distance 0: queries t < 2 read nothing (zero output, zero gradients)
    "empty-rows": dict(B=1, H=2, KV=2, T=20, D=16, dists=[2, 5, 3], fracs=[0.5, 0, 0.2], block=16),
    # non-contiguous q/k/v (a (B, T, heads, D) buffer viewed as (B, heads, T, D)) and the
    # stride-0 gradient of out.sum()
    "strided": dict(
        B=1,
        H=4,
        KV=2,
        T=37,
        D=16,
        dists=[0, 1, 2, 3, 8, 13],
        fracs=[0, 0, 0, 0, 0.5, 0.2],
        block=32,
        layout="bthd",
        grad="ones",
    ),
    # fracs without grad, default marking (the columns with f ≠ 0), default launch shape
    "no-grad-fracs": dict(
        B=1,
        H=2,
        KV=1,
        T=21,
        D=16,
        dists=[0, 1, 4, 7],
        fracs=[0, 0, 0.3, 0.6],
        block=None,
        marking="default",
        frac_grad=False,
    ),
    # α tensors through the plan: a fractional α, an integer α (all fracs 0, dα ≠ 0),
    # T below the largest rung, and the power-of-2 base
    "alpha-0.73": dict(
        B=1, H=4, KV=2, T=48, D=16, alpha=0.73, window=3, base="fib", rungs=9, block=32
    ),
    "alpha-1.0": dict(
        B=1, H=2, KV=1, T=40, D=16, alpha=1.0, window=2, base="fib", rungs=12, block=32
    ),
    "alpha-pow2": dict(
        B=1, H=2, KV=2, T=45, D=16, alpha=1.3, window=4, base="pow2", rungs=15, block=16
    ),
}


# cases through the lab's entry points (the worker runs them with impl / FIBLAB_ATTN_IMPL =
# "triton"; the test process runs the same inputs with the C++ kernel): "sparse" calls
# `sparse_attention` (``dists`` where given: the attended set written out by hand, SPEC §2.4);
# "model" a tiny model's loss and every parameter's gradient.
THROUGH = {
    # α = 1.5, W = 2, K = 10, T = 83: 1.5 → 2 (window), 3, 4.5 → 4, 7.5 → 8, 12, 19.5 → 20,
    # 31.5 → 32, 51, 82.5 → 82 (read by the last query only), 133.5 → 134 > 82 dropped
    "sparse-round-1.5": dict(
        kind="sparse",
        B=1,
        H=2,
        KV=1,
        T=83,
        D=16,
        alpha=1.5,
        window=2,
        rungs=10,
        rounding="round",
        dists=[0, 1, 2, 3, 4, 8, 12, 20, 32, 51, 82],
    ),
    # α = 0.5, W = 0, K = 10, ceil: 1, 1, 2, 3, 4, 7, 11, 17, 28, 45
    "sparse-ceil-0.5": dict(
        kind="sparse",
        B=1,
        H=2,
        KV=1,
        T=50,
        D=16,
        alpha=0.5,
        window=0,
        rungs=10,
        rounding="ceil",
        dists=[0, 1, 2, 3, 4, 7, 11, 17, 28, 45],
    ),
    # α = 1.5, W = 2, K = 10, floor: 1, 3, 4, 7, 12, 19, 31, 51 (82 > T − 1 = 59)
    "sparse-floor-1.5": dict(
        kind="sparse",
        B=1,
        H=2,
        KV=2,
        T=60,
        D=16,
        alpha=1.5,
        window=2,
        rungs=10,
        rounding="floor",
        dists=[0, 1, 2, 3, 4, 7, 12, 19, 31, 51],
    ),
    # a tensor α: the interpolated columns and dα
    "sparse-learned-0.73": dict(
        kind="sparse", B=1, H=4, KV=1, T=48, D=16, alpha=0.73, learned=True, window=3, rungs=9
    ),
    "model-stagger": dict(kind="model", schedule="stagger", rounding="ceil"),
    "model-learned": dict(kind="model", schedule="learned", learned_init="stagger"),
}


def through_inputs(name: str, spec: dict) -> dict:
    """Inputs of one THROUGH case: q, k, v, go (sparse), or a tiny model's weights and ids."""
    if spec["kind"] == "sparse":
        return make_inputs(name, spec)
    torch.manual_seed(0)
    overrides = {n: spec[n] for n in ("schedule", "rounding", "learned_init") if n in spec}
    model = model_of(overrides)
    ids = torch.randint(0, 64, (1, 49), generator=torch.Generator().manual_seed(3))  # T = 48
    return dict(overrides=overrides, state=model.state_dict(), ids=ids)


def model_of(overrides: dict):
    """The tiny model (d_model 64: head dim 16) with ``overrides``."""
    from lab.lm.model import build_model

    return build_model("tiny", d_model=64, **overrides)


def run_through(spec: dict, x: dict, impl: str, device: str = "cpu") -> dict:
    """Output (or loss) and gradients of one THROUGH case with implementation `impl`."""
    from lab.sparse.attention import sparse_attention

    if spec["kind"] == "model":
        model = model_of(x["overrides"]).to(device)
        model.load_state_dict(x["state"])
        saved = os.environ.get("FIBLAB_ATTN_IMPL")
        os.environ["FIBLAB_ATTN_IMPL"] = impl
        try:
            ids = x["ids"].to(device)
            _, loss = model(ids[:, :-1], ids[:, 1:])
            loss.backward()
        finally:
            if saved is None:
                os.environ.pop("FIBLAB_ATTN_IMPL")
            else:
                os.environ["FIBLAB_ATTN_IMPL"] = saved
        grads = {n: p.grad.double().cpu() for n, p in model.named_parameters()}
        return dict(loss=float(loss.detach()), grads=grads)
    q, k, v = (x[n].to(device).requires_grad_() for n in ("q", "k", "v"))
    a = spec["alpha"]
    leaves = [q, k, v]
    if spec.get("learned"):
        a = torch.tensor(a, dtype=torch.float64, device=device, requires_grad=True)
        leaves.append(a)
    out = sparse_attention(
        q,
        k,
        v,
        alpha=a,
        ladder=Ladder(spec["window"], rungs=spec["rungs"], rounding=spec.get("rounding", "round")),
        scale=x["scale"],
        impl=impl,
    )
    grads = torch.autograd.grad((out * x["go"].to(device)).sum(), leaves)
    r = {n: g.double().cpu() for n, g in zip(["dq", "dk", "dv", "dalpha"], grads)}
    return dict(out=out.detach().double().cpu(), **r)


def make_inputs(name: str, spec: dict) -> dict:
    """Seeded float32 inputs for one case (the same numbers go to the oracle in float64)."""
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    B, H, KV, T, D = spec["B"], spec["H"], spec["KV"], spec["T"], spec["D"]
    x = dict(
        q=torch.randn(B, H, T, D, generator=g),
        k=torch.randn(B, KV, T, D, generator=g),
        v=torch.randn(B, KV, T, D, generator=g),
        scale=1.0 / math.sqrt(D),
    )
    x["go"] = (
        torch.ones(B, H, T, D)
        if spec.get("grad") == "ones"
        else torch.randn(B, H, T, D, generator=g)
    )
    if "alpha" not in spec:
        x["dists"] = torch.tensor(spec["dists"], dtype=torch.int64)
        x["fracs"] = torch.tensor(spec["fracs"], dtype=torch.float32)
        x["interp"] = (
            None
            if spec.get("marking") == "default"
            else torch.tensor([f != 0 for f in spec["fracs"]])
        )
        x["frac_grad"] = spec.get("frac_grad", True)
    return x


# --------------------------------------------------------------------------------------------
# the oracle
# --------------------------------------------------------------------------------------------
def gather_oracle(q, k, v, dists, fracs, interp, scale):
    """The float64 oracle (`lab.kernels.oracle`) over the case's columns: column c reads two
    rows with fraction fracs[c] where interp[c], else one (its fraction taken as 0, still on
    fracs' graph).  (B,H,T,D) output, differentiable in q, k, v and fracs."""
    cols = [(int(d), fracs[c] if interp[c] else fracs[c] * 0) for c, d in enumerate(dists)]
    return oracle_attention(q, k, v, cols, scale)


def reference(name: str, spec: dict, x: dict) -> dict:
    """Oracle output and gradients in float64 for one case."""
    q, k, v = (x[n].double().requires_grad_() for n in ("q", "k", "v"))
    if "alpha" in spec:
        from lab.ladder.plan import plan_for

        # the worker's α (a float32 value held in float64)
        a = torch.tensor(spec["alpha"], dtype=torch.float32).double().requires_grad_()
        ladder = Ladder(spec["window"], base=spec["base"], rungs=spec["rungs"])
        cols = plan_for(a, spec["T"], ladder, interpolate=True).oracle_columns(a)
        dists = [d for d, _ in cols]
        fr = torch.stack([f if f is not None else a * 0 for _, f in cols])
        out = gather_oracle(q, k, v, dists, fr, [f is not None for _, f in cols], x["scale"])
        grads = torch.autograd.grad(out, (q, k, v, a, fr), x["go"].double())
        # dα = Σ_c dfrac_c · f_k sums terms of both signs; float32 accuracy is relative to
        # Σ_c |dfrac_c · f_k| (f_k = target / α), the scale its error is measured against
        f_k = torch.tensor(
            [
                (d + float(f.detach())) / float(a.detach()) if f is not None else 0.0
                for d, f in cols
            ],
            dtype=torch.float64,
        )
        return dict(
            out=out.detach(),
            dq=grads[0],
            dk=grads[1],
            dv=grads[2],
            dalpha=grads[3],
            dalpha_scale=float((grads[4].abs() * f_k).sum()),
            dists=dists,
        )
    fr = x["fracs"].double().requires_grad_()
    if x["interp"] is not None:
        interp = x["interp"].tolist()
    else:  # the kernel's default: all when fracs need grad, else f ≠ 0
        interp = [x["frac_grad"] or f != 0 for f in spec["fracs"]]
    out = gather_oracle(q, k, v, spec["dists"], fr, interp, x["scale"])
    grads = torch.autograd.grad(out, (q, k, v, fr), x["go"].double())
    return dict(out=out.detach(), dq=grads[0], dk=grads[1], dv=grads[2], dfracs=grads[3])


# --------------------------------------------------------------------------------------------
# the worker (runs in a subprocess with TRITON_INTERPRET=1, or on CUDA)
# --------------------------------------------------------------------------------------------
def _worker(cases_path: str, results_path: str, device: str) -> None:
    from lab.kernels.triton_attn import interpreted, triton_columns_attention

    if device == "cpu" and not interpreted():
        raise SystemExit("worker: the Triton interpreter is off (TRITON_INTERPRET=1 not set)")
    payload = torch.load(cases_path)
    results = {}
    for name, (spec, x) in payload.items():
        if spec.get("kind") in ("sparse", "model"):
            try:
                results[name] = run_through(spec, x, "triton", device)
            except Exception as e:  # reported per case
                results[name] = dict(error=f"{type(e).__name__}: {e}")
            continue
        try:
            dt = getattr(torch, spec.get("dtype", "float32"))
            q, k, v = (x[n].to(device, dt) for n in ("q", "k", "v"))
            if spec.get("layout") == "bthd":  # (B,T,heads,D) storage
                q, k, v = (y.transpose(1, 2).contiguous().transpose(1, 2) for y in (q, k, v))
            q, k, v = (y.requires_grad_() for y in (q, k, v))
            if "alpha" in spec:
                from lab.ladder.plan import plan_for

                # the plan's own kernel inputs, fracs in float64 (they reach the kernel rounded
                # once, to float32), so the comparison measures the kernel
                a = torch.tensor(spec["alpha"], dtype=torch.float32).double().requires_grad_()
                plan = plan_for(
                    a,
                    spec["T"],
                    Ladder(spec["window"], base=spec["base"], rungs=spec["rungs"]),
                    interpolate=True,
                )
                dists, fracs, interp = plan.kernel_inputs(a, device, torch.float64)
                leaves = (q, k, v, a)
            else:
                dists = x["dists"].to(device)
                fracs = x["fracs"].to(device).requires_grad_(x["frac_grad"])
                interp = None if x["interp"] is None else x["interp"].to(device)
                leaves = (q, k, v, fracs) if x["frac_grad"] else (q, k, v)
            out = triton_columns_attention(
                q, k, v, dists, fracs, x["scale"], interpolated=interp, block_t=spec["block"]
            )
            go = x["go"].to(device, dt)
            if spec.get("grad") == "ones":
                loss = out.float().sum()  # stride-0 grad_out
            else:
                loss = (out.float() * go.float()).sum()
            grads = torch.autograd.grad(loss, leaves)
            r = dict(
                out=out.detach().double().cpu(),
                dq=grads[0].double().cpu(),
                dk=grads[1].double().cpu(),
                dv=grads[2].double().cpu(),
                dists=dists.cpu().tolist(),
            )
            if len(grads) > 3:
                r["dalpha" if "alpha" in spec else "dfracs"] = grads[3].double().cpu()
            results[name] = r
        except Exception as e:  # reported per case
            results[name] = dict(error=f"{type(e).__name__}: {e}")
    torch.save(results, results_path)


def run_worker(
    cases: dict, device: str = "cpu", interpret: bool = True, timeout: float = 600
) -> dict:
    """Run the kernel on `cases` in a fresh process; returns {name: results or error}."""
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as d:
        cin, cout = os.path.join(d, "cases.pt"), os.path.join(d, "results.pt")
        torch.save(cases, cin)
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--worker", cin, cout, "--device", device],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0 or not os.path.exists(cout):
            raise RuntimeError(f"worker failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
        return torch.load(cout)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a − b| / max |b| (0 when both are zero)."""
    scale = b.abs().max().item()
    err = (a - b).abs().max().item()
    return err / scale if scale > 0 else err


# --------------------------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------------------------
try:
    import triton  # noqa: F401

    HAVE_TRITON = True
except Exception as e:  # pragma: no cover
    HAVE_TRITON, TRITON_ERR = False, repr(e)

if __name__ != "__main__" and not HAVE_TRITON:  # pragma: no cover
    pytest.skip(
        f"triton is not importable ({TRITON_ERR}); install the dev extra", allow_module_level=True
    )


@pytest.fixture(scope="module")
def interpreted_results():
    """Every case of this file (the kernel's own and those through `sparse_attention` and the
    model) in one interpreted worker, so the interpreter's start-up is paid once."""
    payload = {name: (spec, make_inputs(name, spec)) for name, spec in CASES.items()}
    payload.update({n: (s, through_inputs(n, s)) for n, s in THROUGH.items()})
    return payload, run_worker(payload)


@pytest.mark.parametrize("name", list(CASES))
def test_matches_float64_oracle(interpreted_results, name):
    payload, results = interpreted_results
    spec, x = payload[name]
    got = results[name]
    assert "error" not in got, got.get("error")
    ref = reference(name, spec, x)
    assert got["dists"] == [int(d) for d in (ref.get("dists") or spec["dists"])]
    keys = ["out", "dq", "dk", "dv", "dalpha" if "alpha" in spec else "dfracs"]
    if not x.get("frac_grad", True):
        keys.remove("dfracs")
    errs = {key: rel_err(got[key], ref[key]) for key in keys}
    if "alpha" in spec:
        errs["dalpha"] = abs(float(got["dalpha"] - ref["dalpha"])) / ref["dalpha_scale"]
    assert all(e <= RTOL for e in errs.values()), errs
    for key in keys:  # the oracle is not trivial
        assert ref[key].abs().max() > 0 or key == "dfracs", key


def test_edge_columns(interpreted_results):
    """lo ≥ T contributes nothing; lo = T − 1 is read by the last query only; rows before the
    first column are zero (checked against the oracle, and directly)."""
    payload, results = interpreted_results
    got = results["gqa4-edge"]
    assert got["dfracs"][4] == 0  # lo = 40 ≥ T = 32: no query reads it
    assert got["dfracs"][3] == 0  # lo = 31: only t = 31, both taps on row 0
    empty = results["empty-rows"]
    assert empty["out"][:, :, :2].abs().max() == 0
    assert empty["dq"][:, :, :2].abs().max() == 0
    assert empty["out"][:, :, 2:].abs().min() > 0


def test_integer_alpha_has_alpha_gradient(interpreted_results):
    """At integer α every fraction is 0, yet dL/dα is non-zero (the lo + 1 taps are read)."""
    _, results = interpreted_results
    assert abs(float(results["alpha-1.0"]["dalpha"])) > 1e-3


@pytest.fixture(scope="module")
def cpp_kernel():
    from lab.kernels import cpu

    status = cpu.status()
    if status is not True:
        pytest.skip(f"the C++ kernel cannot be built here: {status}")
    return "cpp"


@pytest.mark.parametrize("name", [n for n, s in THROUGH.items() if s["kind"] == "sparse"])
def test_sparse_attention_triton_equals_cpp(interpreted_results, cpp_kernel, name):
    """`sparse_attention(impl="triton")` (interpreted) against impl="cpp" on the same inputs:
    outputs and gradients (q, k, v, α) to float32 accuracy; where the case lists the attended
    set by hand, both against the float64 oracle over exactly those keys."""
    payload, results = interpreted_results
    spec, x = payload[name]
    got = results[name]
    assert "error" not in got, got.get("error")
    ref = run_through(spec, x, cpp_kernel)
    keys = ["out", "dq", "dk", "dv"] + (["dalpha"] if spec.get("learned") else [])
    errs = {key: rel_err(got[key], ref[key]) for key in keys}
    assert all(e <= RTOL for e in errs.values()), errs
    if spec.get("learned"):
        assert abs(float(ref["dalpha"])) > 1e-3  # the check has teeth
    if "dists" in spec:
        cols = [(d, None) for d in spec["dists"]]
        hand = oracle_attention(x["q"], x["k"], x["v"], cols, x["scale"])
        assert rel_err(got["out"], hand) <= RTOL


@pytest.mark.parametrize("name", [n for n, s in THROUGH.items() if s["kind"] == "model"])
def test_tiny_model_triton_equals_cpp(interpreted_results, cpp_kernel, name):
    """A tiny model's loss and every parameter's gradient with FIBLAB_ATTN_IMPL=triton
    (interpreted) equal those with the C++ kernel (θ included for the learned schedule)."""
    payload, results = interpreted_results
    spec, x = payload[name]
    got = results[name]
    assert "error" not in got, got.get("error")
    ref = run_through(spec, x, cpp_kernel)
    assert got["loss"] == pytest.approx(ref["loss"], rel=1e-6)
    assert set(got["grads"]) == set(ref["grads"])
    for n, g in ref["grads"].items():
        assert rel_err(got["grads"][n], g) <= 1e-4, n
    thetas = [n for n in ref["grads"] if n.endswith("theta")]
    assert bool(thetas) == (spec["schedule"] == "learned")
    assert all(ref["grads"][n].abs() > 0 for n in thetas)


def test_plan_tensors_and_errors():
    """Input checks raise clear errors before any launch (same in either mode)."""
    from lab.kernels.triton_attn import plan_tensors, triton_columns_attention

    a = torch.tensor(0.8, requires_grad=True)
    cols = [(0, None), (1, None), (6, a * 8 - 6)]
    dists, fracs, interp = plan_tensors(cols)
    assert dists.tolist() == [0, 1, 6] and interp.tolist() == [False, False, True]
    assert fracs[2].item() == pytest.approx(0.4) and fracs.requires_grad
    fracs.sum().backward()
    assert a.grad.item() == pytest.approx(8.0)
    q, k, v = torch.randn(1, 4, 8, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)
    d, f = torch.tensor([0, 1]), torch.zeros(2)
    bad = [
        (dict(q=torch.randn(1, 3, 8, 16)), "multiple of n_kv_heads"),
        (dict(k=torch.randn(1, 2, 9, 16), v=torch.randn(1, 2, 9, 16)), "does not match"),
        (dict(q=q.double(), k=k.double(), v=v.double()), "float64"),
        (dict(dists=torch.tensor([0, -1])), ">= 0"),
        (dict(dists=torch.tensor([0.0, 1.0])), "integers"),
        (dict(fracs=torch.zeros(3)), "shape"),
        (dict(q=q[0]), "4-D"),
        (dict(interpolated=torch.tensor([1, 0])), "bool mask"),
        (dict(block_t=24), "power of two"),
        (dict(v=v.half()), "share one dtype"),
        (dict(scale=float("nan")), "finite"),
    ]
    for override, msg in bad:
        args = dict(q=q, k=k, v=v, dists=d, fracs=f, scale=0.25)
        args.update(override)
        kw = {n: args.pop(n) for n in ("interpolated", "block_t") if n in args}
        with pytest.raises((ValueError, RuntimeError), match=msg):
            triton_columns_attention(
                args["q"], args["k"], args["v"], args["dists"], args["fracs"], args["scale"], **kw
            )


def test_cpu_tensors_without_interpreter_raise():
    """Compiled mode on CPU tensors is refused with a message naming the two ways out."""
    code = (
        "import torch\nfrom lab.kernels.triton_attn import triton_columns_attention, "
        "interpreted\nassert not interpreted()\nq = torch.randn(1, 2, 8, 16)\n"
        "try:\n    triton_columns_attention(q, q, q, torch.tensor([0]), torch.zeros(1), 0.25)\n"
        "except RuntimeError as e:\n    print('ERR', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    if torch.cuda.is_available():  # pragma: no cover
        return
    assert "ERR" in proc.stdout and "TRITON_INTERPRET=1" in proc.stdout, proc.stdout


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (compiled kernels)")
def test_compiled_kernels_on_cuda():  # pragma: no cover
    """The same cases compiled on a GPU: float32 to 1e-5; bfloat16 inputs (the oracle gets the
    same bf16-rounded values) to 1e-2, the rounding of bf16 outputs and gradients."""
    payload = {name: (spec, make_inputs(name, spec)) for name, spec in CASES.items()}
    rounded = lambda x: {
        n: (y.bfloat16().float() if n in ("q", "k", "v", "go") else y) for n, y in x.items()
    }
    bf16 = {
        f"{n}-bf16": (dict(spec, dtype="bfloat16"), rounded(x)) for n, (spec, x) in payload.items()
    }
    results = run_worker({**payload, **bf16}, device="cuda", interpret=False)
    failures = {}
    for name, (spec, x) in {**payload, **bf16}.items():
        got = results[name]
        if "error" in got:
            failures[name] = got["error"]
            continue
        ref = reference(name, spec, x)
        tol = 1e-2 if spec.get("dtype") == "bfloat16" else RTOL
        keys = ["out", "dq", "dk", "dv", "dalpha" if "alpha" in spec else "dfracs"]
        if not x.get("frac_grad", True):
            keys.remove("dfracs")
        errs = {key: rel_err(got[key], ref[key]) for key in keys}
        if "alpha" in spec:
            errs["dalpha"] = abs(float(got["dalpha"] - ref["dalpha"])) / ref["dalpha_scale"]
        if any(e > tol for e in errs.values()):
            failures[name] = errs
    assert not failures, failures


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description="worker for tests/lab/test_triton_kernel.py")
    p.add_argument("--worker", nargs=2, metavar=("CASES", "RESULTS"), required=True)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    _worker(a.worker[0], a.worker[1], a.device)
