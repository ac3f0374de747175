"""The `fiblab` commands on the attention rule (offsets, schedule, params, selfcheck) against the
SPEC's tables and hand counts, and the exit codes: 2 and one line on bad input (no traceback), 3
when training diverges."""

import os
import subprocess
import sys

import numpy as np
import pytest

from fiblab.cli import main
from lab.lm.model import build_model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIB15 = (1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987)  # K = 15 rungs, SPEC §2.4


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def window(w):
    return list(range(w + 1))


# -- offsets -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args,rungs",
    [  # SPEC §2.4's example rung sets (T=1024, fib, K=15, W=8), and floor / ceil by hand
        (["--alpha", "0.5"], [10, 17, 28, 44, 72, 116, 188, 305, 494]),
        (["--alpha", "1"], [13, 21, 34, 55, 89, 144, 233, 377, 610, 987]),
        (["--alpha", "1.5"], [12, 20, 32, 51, 82, 134, 216, 350, 566, 915]),
        (["--alpha", "0.5", "--rounding", "floor"], [10, 17, 27, 44, 72, 116, 188, 305, 493]),
        (["--alpha", "0.5", "--rounding", "ceil"], [11, 17, 28, 45, 72, 117, 189, 305, 494]),
        (["--alpha", "1", "--base", "pow2"], [16, 32, 64, 128, 256, 512]),
    ],
)
def test_offsets_prints_the_hand_written_sets(capsys, args, rungs):
    rc, out, _ = run(capsys, "offsets", "-W", "8", *args)
    head, line = out.strip().splitlines()
    want = window(8) + rungs
    assert rc == 0 and head.endswith(f"window counted): {len(want)}")
    assert line == " ".join(map(str, want))


def test_offsets_interp_prints_the_spec_floor_brackets(capsys):
    rc, out, _ = run(capsys, "offsets", "--alpha", "0.5", "-W", "8", "--interp")
    lines = out.strip().splitlines()
    cols = [tuple(x.split("=")[1] for x in ln.split()) for ln in lines[1:]]
    # SPEC §2.4: lo = 10, 17, 27, 44, 72, 116, 188, 305, 493 with frac 0 or 0.5 (0.5·f − lo)
    los = [10, 17, 27, 44, 72, 116, 188, 305, 493]
    assert rc == 0 and lines[0].endswith(": 18")
    assert cols == [(str(lo), f"{0.5 * f - lo:.4f}") for lo, f in zip(los, FIB15[6:])]
    assert [c[1] for c in cols] == ["0.5000", "0.0000"] + ["0.5000"] * 2 + ["0.0000"] + [
        "0.5000"
    ] * 2 + ["0.0000", "0.5000"]


# -- schedule ----------------------------------------------------------------------------------
def hand_set(alpha, w=8, t=1024):
    """SPEC §2.4 in plain Python: {0..W} ∪ {round(α·f) : W < r ≤ T−1} (round half to even)."""
    return set(window(w)) | {r for f in FIB15 if w < (r := round(alpha * f)) <= t - 1}


def parse_layers(out):
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("layer")]
    return [(int(r[1]), r[2].split("=")[1], int(r[3].split("=")[1]), r[5:]) for r in rows]


def test_schedule_stagger_l16_w8_counts_133_with_the_window_124_beyond(capsys):
    rc, out, _ = run(capsys, "schedule", "stagger", "-L", "16", "-W", "8", "--sets")
    alphas = [0.5 + ell / 15 for ell in range(16)]  # SPEC §2.6: α_ℓ = 0.5 + ℓ/(L−1)
    layers = parse_layers(out)
    assert rc == 0 and [row[0] for row in layers] == list(range(16))
    for (_, a, n, rungs), alpha in zip(layers, alphas):
        hand = hand_set(alpha)
        assert a == f"{alpha:.4f}" and n == len(hand) and n in (18, 19)  # SPEC: 18–19 at W8
        assert list(map(int, rungs)) == sorted(d for d in hand if d > 8)
    union = set().union(*map(hand_set, alphas))
    assert (len(union), len([d for d in union if d > 8])) == (133, 124)  # docs/cli.md's count
    assert out.strip().splitlines()[-1] == (
        "union over layers: 133 distinct distances (window counted; 124 beyond it), rounding=round"
    )


def test_schedule_coprime_prints_its_stride_and_permuted_ramp(capsys):
    rc, out, _ = run(capsys, "schedule", "coprime", "-L", "16", "-W", "8")
    # SPEC §2.6: S = the largest s in L//2, L//2 − 1, … with gcd(s, L) = 1 → 7; α = 0.5 + slot/15
    assert rc == 0 and out.splitlines()[0] == "coprime stride S = 7"
    assert [a for _, a, _, _ in parse_layers(out)] == [
        f"{0.5 + (ell * 7 % 16) / 15:.4f}" for ell in range(16)
    ]


# -- params ------------------------------------------------------------------------------------
def spec_count(cfg):
    """SPEC §1.8's parameter formula on a config's dimensions: (total, non-embedding)."""
    d, L, hd = cfg.d_model, cfg.n_layers, cfg.d_model // cfg.n_heads
    attn = 2 * d * d + 2 * d * cfg.n_kv_heads * hd  # q, o + k, v
    hidden = -(-int(d * cfg.ffn_ratio) // 2) * 2  # int(d·ratio) rounded up to even
    body = L * (attn + 3 * d * hidden) + 2 * d * L + d  # + norms
    return cfg.vocab_size * d + body, body


@pytest.mark.parametrize(
    "preset,schedule,want",
    [  # SPEC §1.8's table, written out
        ("paper-60m", None, "60,850,688 parameters (44,073,472 non-embedding)"),
        ("paper-60m", "learned", "60,850,704 parameters (44,073,488 non-embedding)"),
        ("tiny", None, None),
        ("tiny", "learned", None),
    ],
)
def test_params_matches_the_spec_table_and_the_numels(capsys, preset, schedule, want):
    rc, out, _ = run(
        capsys, "params", "--preset", preset, *(["--schedule", schedule] * bool(schedule))
    )
    m = build_model(preset, **({"schedule": schedule} if schedule else {}))
    total, body = spec_count(m.cfg)
    extra = m.cfg.n_layers if schedule == "learned" else 0  # one θ per layer
    unique = {id(p): p.numel() for p in m.parameters()}  # the tied embedding once
    assert sum(unique.values()) == total + extra
    assert out.strip() == (want or f"{total + extra:,} parameters ({body + extra:,} non-embedding)")
    assert rc == 0


# -- selfcheck ---------------------------------------------------------------------------------
VARIANTS = [
    "dense",
    "fixed / mask",
    "fixed / shift",
    "fixed / interp",
    "stagger / mask",
    "stagger / shift",
    "coprime / shift",
    "pow2 stagger / shift",
    "learned / interp",
]


def test_selfcheck_runs_every_path_and_passes(capsys):
    rc, out, _ = run(capsys, "selfcheck", "--preset", "tiny", "--seq-len", "16")
    total, body = spec_count(build_model("tiny").cfg)
    lines = out.splitlines()
    assert rc == 0 and lines[-1] == "selfcheck passed"
    assert lines[1] == (
        f"parameters: {total:,} (non-embedding {body:,}); learned alpha adds 2 theta scalars"
    )
    rows = [ln for ln in lines if any(ln.startswith(v + " ") for v in VARIANTS)]
    assert [r[:22].strip() for r in rows] == VARIANTS
    assert all(np.isfinite(float(r[22:32])) for r in rows)
    assert "dL/dtheta layer0=" in rows[-1]
    assert [ln[:3] for ln in lines if "|dloss|" in ln] == ["OK "] * 3


def test_selfcheck_fails_when_two_paths_disagree(capsys, monkeypatch):
    import lab.sparse.attention as A

    real = A.bool_mask

    def without_farthest(seq_len, distances, device=None):  # a mask path that drops a rung
        return real(seq_len, tuple(distances)[:-1], device)

    monkeypatch.setattr(A, "bool_mask", without_farthest)
    rc, out, _ = run(capsys, "selfcheck", "--preset", "tiny", "--seq-len", "16")
    assert rc == 1 and "BAD fixed / mask vs fixed / shift" in out
    assert "selfcheck passed" not in out


# -- exit codes --------------------------------------------------------------------------------
def test_a_forced_attention_impl_that_cannot_run_is_exit_2_one_line():
    """FIBLAB_ATTN_IMPL=triton on CPU tensors: the user's setting, so one line and exit 2."""
    env = {**os.environ, "FIBLAB_ATTN_IMPL": "triton", "PYTHONPATH": ROOT}
    env.pop("TRITON_INTERPRET", None)
    res = subprocess.run(
        [sys.executable, "-m", "fiblab.cli", "selfcheck", "--preset", "tiny", "--seq-len", "8"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fiblab: error: FIBLAB_ATTN_IMPL='triton' cannot")


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["train", "--preset", "fib-stagger-w99"], "fib-stagger-w99"),
        (["train"], "needs --preset"),
        (["train", "--preset", "tiny", "--override", "colour=red"], "colour"),
        (["doctor", "--reps", "0"], "--reps 0"),
    ],
)
def test_bad_input_is_exit_2_with_one_line(capsys, argv, needle):
    rc, out, err = run(capsys, *argv)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("fiblab: error: ")
    assert needle in lines[0]


def test_divergence_is_exit_3_with_one_line(capsys, tmp_path):
    from lab.data.tokenizer import write_tokens

    tokens = tmp_path / "tokens.bin"
    write_tokens(tokens, np.random.default_rng(0).integers(0, 512, 20_000), 512)
    over = ["lr=1e30", "warmup=1", "steps=3", "eval_every=0", "ckpt_every=1", "val_tokens=1000"]
    rc, out, err = run(
        capsys,
        *["train", "--preset", "tiny", "--data", str(tokens), "--name", "boom", "--quiet"],
        *["--store", "", "--override", f"run_dir={tmp_path}", *over],
    )
    lines = err.strip().splitlines()
    assert rc == 3 and len(lines) == 1, err
    assert lines[0].startswith("fiblab: training stopped: step ") and "not finite" in lines[0]
