"""LM evaluations: perplexity against hand-computed NLL, exact token counts, length extrapolation
(frozen rebuild = training logits, new rungs = lab.ladder.offsets / hand values, position-matched blocks
= training-length windows), the paper's position bins (edges and its own dump), store rows, the
run loader's errors and the CLI."""

import argparse
import json
import math
import os
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fiblab.cli.measure import add_eval
from lab.data.mixture import Mixture
from lab.data.prepared import prepare
from lab.data.windows import n_windows
from lab.evaluation.evalrun import evaluate_run, load_run
from lab.evaluation.evaluate import (
    POSITION_BIN_EDGES,
    bin_gap,
    bin_means,
    domain_perplexities,
    heldout_perplexity,
    length_extrapolation,
    position_bin_edges,
    position_resolved,
)
from lab.ladder import offsets
from lab.ladder.offsets import Ladder
from lab.ladder.plan import attended_distances
from lab.lm.model import build_model
from lab.machine.precision import autocast
from lab.store import Store
from lab.training.train import train
from lab.training.trainconfig import make_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class FixedLogits(torch.nn.Module):
    """Predicts the same distribution softmax(logits) at every position."""

    def __init__(self, logits):
        super().__init__()
        self.logits = torch.as_tensor(logits, dtype=torch.float32)

    def forward(self, ids):  # (B, T) -> (B, T, V)
        return self.logits.expand(*ids.shape, -1).clone(), None


def _stream(n, vocab, seed=0):
    """A learnable-ish token stream: a stride pattern plus noise."""
    rng = np.random.default_rng(seed)
    return ((np.arange(n) * 7 + rng.integers(0, 3, n)) % vocab).astype(np.int64)


@pytest.fixture
def in_fp32():
    """Pin the evaluation's precision: the direct computations it is checked against are
    float32 at rtol 1e-5, which bf16 (8-bit mantissa, ≈ 4e-3 relative) would not meet."""
    with autocast("cpu", "fp32"):
        yield


def _direct_window_nll(model, toks, T, starts):
    """(len(starts), T) NLL of each window, computed one window at a time at length T."""
    rows = []
    with torch.no_grad():
        for s in starts:
            x = torch.as_tensor(toks[s : s + T], dtype=torch.long)[None]
            y = torch.as_tensor(toks[s + 1 : s + T + 1], dtype=torch.long)
            logits = model(x)[0][0]
            rows.append(F.cross_entropy(logits.double(), y, reduction="none").numpy())
    return np.stack(rows)


# --------------------------------------------------------------------------------- perplexity
def test_uniform_logits_give_ppl_vocab_and_exact_counts():
    V, T = 37, 64
    toks = _stream(1000, V)  # 999 targets: 15 windows, a tail of 39
    p = heldout_perplexity(FixedLogits(torch.zeros(V)), toks, seq_len=T)
    assert p.tokens == 15 * T == n_windows(1000, T) * T
    assert p.ppl == pytest.approx(V, rel=1e-6) and p.loss == pytest.approx(math.log(V), rel=1e-6)
    assert (
        heldout_perplexity(FixedLogits(torch.zeros(V)), toks, seq_len=T, limit_windows=4).tokens
        == 4 * T
    )
    # the boundary: 15·64 + 1 tokens hold 15 windows, one fewer token only 14
    assert heldout_perplexity(FixedLogits(torch.zeros(V)), toks[:961], T).tokens == 960
    assert heldout_perplexity(FixedLogits(torch.zeros(V)), toks[:960], T).tokens == 14 * T
    with pytest.raises(ValueError, match="needs 65"):
        heldout_perplexity(FixedLogits(torch.zeros(V)), toks[:64], T)


def test_fixed_distribution_matches_hand_computed_nll():
    V, T = 11, 16
    logits = np.linspace(-2.0, 3.0, V)
    logp = logits - np.log(np.exp(logits).sum())  # float64 log-softmax
    toks = _stream(203, V, seed=3)  # 12 windows, tail of 10
    p = heldout_perplexity(FixedLogits(logits), toks, seq_len=T, batch_size=5)
    scored = toks[1 : 1 + 12 * T]  # targets of the 12 windows
    assert p.tokens == len(scored) == 192
    assert p.loss == pytest.approx(-logp[scored].mean(), rel=1e-6)
    assert p.ppl == pytest.approx(math.exp(-logp[scored].mean()), rel=1e-6)


def test_mixture_perplexity_per_domain(tmp_path):
    V, T = 50, 16
    doms = {}
    for name, n in (("a", 3000), ("b", 5000)):
        f = tmp_path / f"{name}.bin"
        _stream(n, V, seed=len(name) + n).astype(np.uint16).tofile(f)
        doms[name] = prepare(
            str(f),
            vocab_size=V,
            cache_dir=tmp_path / "cache",
            val_tokens=300 if name == "a" else 333,
        )
    mix = Mixture(doms, {"a": 0.5, "b": 0.5})
    out = domain_perplexities(FixedLogits(torch.zeros(V)), mix, seq_len=T)
    assert set(out) == {"a", "b"}
    assert out["a"].tokens == (299 // T) * T == 288 and out["b"].tokens == (332 // T) * T == 320
    assert all(v.ppl == pytest.approx(V, rel=1e-6) for v in out.values())
    single = domain_perplexities(FixedLogits(torch.zeros(V)), doms["b"], name="b", seq_len=T)
    assert single["b"] == out["b"]


# --------------------------------------------------------------------------------- extrapolation
@pytest.fixture(scope="module")
def stagger():
    torch.manual_seed(0)  # L=2 stagger: α = 0.5, 1.5; K=10 to 89
    return build_model("tiny", schedule="stagger", rungs=10).eval()


def test_frozen_rebuild_reproduces_training_logits(stagger):
    T = 64
    ids = torch.randint(0, 64, (2, 4 * T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        short = stagger(ids[:, :T])[0]
        frozen = stagger.with_seq_len(4 * T, "freeze")(ids)[0]
        recomputed = stagger.with_seq_len(4 * T, "recompute")(ids)[0]
    torch.testing.assert_close(frozen[:, :T], short, atol=1e-5, rtol=1e-5)
    # the new rung 82 of layer 1 is read only by queries t >= 82: before that the policies agree
    torch.testing.assert_close(recomputed[:, :82], frozen[:, :82], atol=1e-5, rtol=1e-5)
    assert (recomputed[:, 82:] - frozen[:, 82:]).abs().max() > 1e-3


def test_new_rungs_are_the_ones_offsets_predicts(stagger):
    toks = _stream(1200, 64)
    res = length_extrapolation(stagger, toks, factors=(1, 2, 4), limit_windows=4)
    # by hand: 1.5·55 = 82.5 → 82, 1.5·89 = 133.5 → 134 (half-to-even); α = 0.5 reaches 44 only
    assert res.cell(2, "recompute").new_rungs == [[], [82]]
    assert res.cell(4, "recompute").new_rungs == [[], [82, 134]]
    assert res.cell(4, "freeze").new_rungs == [[], []]
    assert res.cell(1, "recompute").new_rungs == [[], []]
    cfg = stagger.cfg
    predicted = [
        sorted(
            set(attended_distances(a, 256, Ladder(cfg.window, base="fib", rungs=10)))
            - set(attended_distances(a, 64, Ladder(cfg.window, base="fib", rungs=10)))
        )
        for a in cfg.layer_alphas()
    ]
    assert res.cell(4, "recompute").new_rungs == predicted
    # pow2: the base itself grows with the length (1…32 at 64; 64 and 128 join at 256)
    torch.manual_seed(0)
    pow2 = build_model("tiny", base="pow2")
    res = length_extrapolation(pow2, toks, factors=(4,), limit_windows=4)
    assert res.cell(4, "recompute").new_rungs == [[64, 128], [64, 128]]
    assert res.cell(4, "freeze").new_rungs == [[], []]


# a learned model (interpolated columns) with α fixed at 1.45 and 1.1; T = 64, W = 2, K = 10.
# By hand, α·f for f = 1, 2, 3, 5, 8, 13, 21, 34, 55, 89 and the kept floors (SPEC §2.6):
#   1.45: 1.45 2.9 4.35 7.25 11.6 18.85 30.45 49.3 79.75 129.05 → 4 7 11 18 30 49 | 79 | 129
#   1.1:  1.1 2.2 3.3 5.5 8.8 14.3 23.1 37.4 60.5 97.9          → 3 5 8 14 23 37 60 | 97
# (1.45 and 2.9, 1.1 and 2.2 skipped: round ≤ W or floor in the window); 79 and 97 need
# L − 1 ≥ 79 / 97 (2×), 129 needs 4×.  Every fraction is non-zero: each rung reads lo, lo + 1.
LEARNED_TRAINED = [[0, 1, 2, 4, 7, 11, 18, 30, 49], [0, 1, 2, 3, 5, 8, 14, 23, 37, 60]]
LEARNED_NEW = {2: [[79], [97]], 4: [[79, 129], [97]]}


@pytest.fixture(scope="module")
def learned():
    torch.manual_seed(0)
    return build_model("tiny", schedule="learned", learned_init=(1.45, 1.1), rungs=10).eval()


def test_learned_alpha_under_freeze_keeps_the_trained_rungs(learned):
    assert [round(a, 5) for a in learned.alphas()] == [1.45, 1.1]
    res = length_extrapolation(learned, _stream(1200, 64), factors=(1, 2, 4), limit_windows=4)
    for m in (1, 2, 4):
        assert res.cell(m, "freeze").new_rungs == [[], []], m
        assert res.cell(m, "recompute").new_rungs == LEARNED_NEW.get(m, [[], []]), m
        frozen = learned.with_seq_len(m * 64, "freeze")
        assert [p.distances for p in frozen.plans()] == LEARNED_TRAINED, m


@pytest.mark.parametrize("policy", ["freeze", "recompute"])
def test_learned_alpha_frozen_forward_reads_trained_rows_only(learned, policy):
    """At 4× the last position's logits depend on the embedding rows at t − (a + b), a and b the
    rows layers 0 and 1 read (window, lo, lo + 1): by hand from the columns above; a recomputed
    rebuild also reads the never-trained rungs 79/80, 129/130 and 97/98."""
    L = 4 * 64
    long = learned.with_seq_len(L, policy)
    rows = []
    for cols in [LEARNED_TRAINED[0], LEARNED_TRAINED[1]]:
        new = LEARNED_NEW[4][len(rows)] if policy == "recompute" else []
        rungs = [d for d in cols if d > 2] + new
        rows.append(set(range(3)) | set(rungs) | {d + 1 for d in rungs})
    expected = sorted({a + b for a in rows[0] for b in rows[1]})
    held = {}

    def leaf(_module, _inp, out):
        held["x"] = out.detach().requires_grad_()
        return held["x"]

    handle = long.embed.register_forward_hook(leaf)
    try:
        logits, _ = long(torch.randint(0, 64, (1, L), generator=torch.Generator().manual_seed(3)))
    finally:
        handle.remove()
    (grad,) = torch.autograd.grad(logits[0, L - 1].sum(), held["x"])
    got = sorted(L - 1 - s for s in (grad[0].abs().sum(-1) != 0).nonzero().flatten().tolist())
    assert got == expected
    assert (max(got) == 50 + 61) == (policy == "freeze")  # 49 + 1 and 60 + 1: the trained reach


def test_position_matched_blocks_against_training_length_windows(stagger, in_fp32, cpu_profile):
    T = 64
    toks = _stream(2 * 4 * T + 50, 64, seed=5)  # two 4T windows + tail
    res = length_extrapolation(stagger, toks, factors=(1, 4), batch_size=8)
    one = res.cell(1, "recompute")
    assert one.blocks[0] == one.whole and one.windows == 8 and one.whole.tokens == 8 * T
    assert res.cell(1, "freeze").whole == one.whole
    # block 0 of the 4T windows (starting at 0, 4T) is the training-length NLL of windows 0 and 4
    direct = _direct_window_nll(stagger, toks, T, [0, 4 * T])
    for policy in ("recompute", "freeze"):
        c = res.cell(4, policy)
        assert c.windows == 2 and [b.tokens for b in c.blocks] == [2 * T] * 4
        assert c.blocks[0].loss == pytest.approx(direct.mean(), rel=1e-5)
        assert c.whole.loss == pytest.approx(np.mean([b.loss for b in c.blocks]), rel=1e-9)
        assert c.whole.tokens == 2 * 4 * T
    # frozen: block j ≥ 1 differs from recompute only through the new rungs (82 ∈ block 1)
    assert res.cell(4, "freeze").blocks[1].loss != res.cell(4, "recompute").blocks[1].loss
    # the same tokens at 1×: block j of window k is training window 4k + j, scored alone
    c = res.cell(4, "freeze")
    for j in range(4):
        alone = _direct_window_nll(stagger, toks, T, [j * T, (4 + j) * T])
        assert c.same_tokens[j].loss == pytest.approx(alone.mean(), rel=1e-5)
        assert c.same_tokens[j].tokens == 2 * T
    assert c.same_tokens[0].loss == pytest.approx(c.blocks[0].loss, rel=1e-5)  # same context


def test_skips_are_explained(stagger):
    toks = _stream(600, 64)
    res = length_extrapolation(stagger, toks, factors=(8, 16))
    assert res.cell(8, "freeze").whole is not None  # 512 + 1 ≤ 600
    skip = res.cell(16, "recompute")
    assert skip.whole is None and "600 tokens" in skip.skipped and "needs 1025" in skip.skipped
    torch.manual_seed(0)
    dense = length_extrapolation(build_model("tiny", attention="dense"), toks, factors=(1, 2))
    assert (
        "dense" in dense.cell(2, "freeze").skipped and dense.cell(2, "recompute").new_rungs is None
    )
    with pytest.raises(ValueError, match="rung policy"):
        length_extrapolation(stagger, toks, policies=("stretch",))


def test_a_factor_or_policy_named_twice_is_one_cell(stagger):
    """`fiblab eval --factors 2 1 2 --policies freeze freeze` listed (and measured) 2× twice."""
    res = length_extrapolation(
        stagger,
        _stream(600, 64),
        factors=(2, 1, 2),
        policies=("freeze", "freeze"),
        limit_windows=2,
    )
    assert [(c.factor, c.policy) for c in res.cells] == [(1, "freeze"), (2, "freeze")]


# --------------------------------------------------------------------------------- position bins
def test_bin_edges_are_the_papers():
    assert POSITION_BIN_EDGES == (0, 127, 255, 383, 511, 639, 767, 895, 1023)  # SPEC §5.7
    for T in (1024, 64, 100, 257, 4096):  # the integer linspace over [0, T−1]
        assert position_bin_edges(T) == tuple(int(e) for e in np.linspace(0, T - 1, 9))
    assert position_bin_edges(64) == (0, 7, 15, 23, 31, 39, 47, 55, 63)
    with pytest.raises(ValueError, match="too short"):
        position_bin_edges(8)


def test_binning_reproduces_the_papers_own_dump():
    with open(os.path.join(ROOT, "analysis", "reference", "posloss.json")) as f:
        dump = json.load(f)
    checked = 0
    for by_ds in dump.values():
        for d in by_ds.values():
            assert len(d["per_position"]) == d["seq_len"] - 1 == 1023
            got = bin_means(d["per_position"], position_bin_edges(d["seq_len"]))
            np.testing.assert_allclose(got, d["binned"], atol=6e-6)
            checked += 1
    assert checked == 21 * 4
    f06, f11 = (
        dump[k]["fineweb_edu_val"]["binned"] for k in ("f06__fib_fixed_w8", "f11__fib_stagger_w8")
    )
    # SPEC §7.4: f06 minus f11 = .023 .039 .033 .040 .033 .044 .037 .037
    np.testing.assert_allclose(
        bin_gap(f06, f11), [0.023, 0.039, 0.033, 0.040, 0.033, 0.044, 0.037, 0.037], atol=1.5e-3
    )


def test_bins_match_a_direct_per_position_computation(stagger, in_fp32, cpu_profile):
    T = 64
    toks = _stream(7 * T + 20, 64, seed=9)
    bins = position_resolved(stagger, toks, batch_size=3)
    per_pos = _direct_window_nll(stagger, toks, T, np.arange(7) * T).mean(0)  # (T,)
    edges = (0, 7, 15, 23, 31, 39, 47, 55, 63)
    want = [per_pos[a:b].mean() for a, b in zip(edges, edges[1:])]
    assert bins.edges == edges and bins.windows == 7
    np.testing.assert_allclose(bins.loss, want, rtol=1e-5)
    assert bins.tokens == tuple(7 * (b - a) for a, b in zip(edges, edges[1:]))
    assert bins.tokens[0] == 7 * 7 and sum(bins.tokens) == 7 * (T - 1)
    other = position_resolved(build_model("tiny", schedule="fixed", rungs=10), toks)
    np.testing.assert_allclose(bin_gap(bins, other), np.array(bins.loss) - np.array(other.loss))
    with pytest.raises(ValueError, match="different edges"):
        bin_gap(bins, position_resolved(build_model("tiny", seq_len=128), toks))


# --------------------------------------------------------------------------------- trained runs
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A real (tiny, learned-α) training run over a token file, logged to a store."""
    d = tmp_path_factory.mktemp("evalruns")
    f = d / "toks.bin"
    _stream(30_000, 512).astype(np.uint16).tofile(f)
    store = str(d / "store.db")
    cfg = make_config(
        "tiny",
        {
            "data": str(f),
            "run_dir": str(d / "runs"),
            "name": "ev",
            "model.rungs": 10,
            "val_tokens": 1100,
            "steps": 2,
            "ckpt_every": 2,
            "eval_every": 0,
        },
    )
    out = train(cfg, quiet=True, store_path=store)
    return {"dir": os.path.join(d, "runs", "ev"), "store": store, "cfg": cfg, "out": out, "tmp": d}


def test_load_run_gives_the_trained_model(trained):
    model, cfg, data = load_run(trained["dir"])
    assert cfg.model == trained["cfg"].model and cfg.steps == 2 and cfg.name == "ev"
    assert model.alphas() == pytest.approx(trained["out"]["alphas"], abs=1e-7)
    assert len(data.tokens("val")) == 1100
    # same numbers as the training loop's own final evaluation (an independent implementation)
    with Store(trained["store"]) as st:
        row = st.evals("ev").query("kind == 'recompute'").iloc[0]
    p = heldout_perplexity(model, data.tokens("val"))
    assert p.tokens == row.tokens == (1099 // 64) * 64
    assert p.loss == pytest.approx(row.loss, rel=1e-5)


def test_evaluate_run_logs_every_kind(trained):
    res = evaluate_run(
        trained["dir"], factors=(1, 2, 4, 32), store_path=trained["store"], log=lambda s: None
    )
    ds = res["datasets"]["toks"]
    assert res["step"] == 2 and res["train_len"] == 64
    assert [c["skipped"] is None for c in ds["cells"]] == [True] * 6 + [False] * 2
    with Store(trained["store"]) as st:
        ev = st.evals("ev")
    kinds = {(k, c) for k, c in zip(ev["kind"], ev["context_len"])}
    for pol in ("recompute", "freeze"):
        for m in (1, 2, 4):
            assert (pol, 64 * m) in kinds
            assert {(f"{pol}:block{j}", 64 * m) for j in range(m)} <= kinds
        assert not any(c == 64 * 32 for _, c in kinds)
    bins = ev[ev["kind"].str.startswith("bin")]
    assert sorted(bins["kind"]) == [f"bin{b}" for b in range(8)]
    assert set(bins["context_len"]) == {64} and bins["tokens"].sum() == 17 * 63
    row = ev[(ev["kind"] == "recompute:block1") & (ev["context_len"] == 128)].iloc[0]
    cell = next(c for c in ds["cells"] if c["factor"] == 2 and c["policy"] == "recompute")
    assert row.loss == pytest.approx(cell["blocks"][1]["loss"]) and row.tokens == 8 * 64
    # new rungs of the learned layers: what the interpolated rule keeps at 256 but not at 64
    f = offsets.fibonacci(10)
    for layer, a in enumerate(res["alphas"]):

        def kept(T):
            return {lo for _, lo in offsets.interp_columns([a * x for x in f], T, Ladder(2))}

        want = sorted(kept(256) - kept(64))
        assert (
            next(c for c in ds["cells"] if c["factor"] == 4 and c["policy"] == "recompute")[
                "new_rungs"
            ][layer]
            == want
            and want
        )
    # a limited evaluation never replaces the full one
    small = evaluate_run(
        trained["dir"],
        factors=(1,),
        policies=("recompute",),
        bins=False,
        store_path=trained["store"],
        limit_windows=2,
        log=lambda s: None,
    )
    assert small["datasets"]["toks"]["perplexity"]["tokens"] == 128
    with Store(trained["store"]) as st:
        ev = st.evals("ev")
    assert ev[(ev["kind"] == "recompute") & (ev["context_len"] == 64)]["tokens"].item() == 17 * 64


def test_a_run_is_evaluated_in_the_precision_it_trained_in(trained, tmp_path, cpu_profile):
    """`evaluate_run` computes in the run's checkpoint precision, whatever this machine's
    `auto`: an fp32 run in fp32 (same numbers on both CPUs); the same weights marked as
    trained in bf16 are evaluated under bf16 autocast — the oracle is a direct evaluation in
    each precision, and the two differ (so the test sees which one ran)."""
    d = tmp_path / "as-bf16"
    shutil.copytree(trained["dir"], d)
    (ckpt,) = list(d.glob("ckpt_*.pt"))
    from lab.training.checkpoint import save_checkpoint

    state = torch.load(ckpt, weights_only=False)
    assert state["precision"] == "fp32"
    state["precision"] = "bf16"
    save_checkpoint(str(d), state["step"], state, keep=1)  # over it, with its checksum
    model, _, data = load_run(trained["dir"])
    toks = data.tokens("val")
    want = {}
    for prec in ("fp32", "bf16"):
        with autocast("cpu", prec):
            want[prec] = heldout_perplexity(model, toks).loss
    assert abs(want["bf16"] - want["fp32"]) > 1e-5 * want["fp32"]  # ≫ the 1e-6 compared at
    for run_dir, prec in ((trained["dir"], "fp32"), (str(d), "bf16")):
        res = evaluate_run(run_dir, factors=(1,), bins=False, log=lambda s: None)
        assert res["precision"] == prec
        assert res["datasets"]["toks"]["perplexity"]["loss"] == pytest.approx(want[prec], rel=1e-6)


def test_missing_or_corrupt_run_gives_clear_errors(trained, tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_run(str(tmp_path / "nope"))
    bad = tmp_path / "runs" / "bad"
    bad.mkdir(parents=True)
    shutil.copy(os.path.join(trained["dir"], "config.json"), bad)
    with pytest.raises(ValueError, match="no checkpoint"):
        load_run(str(bad))
    ck = sorted(p for p in os.listdir(trained["dir"]) if p.endswith(".pt"))[-1]
    with open(bad / ck, "wb") as fh:  # no checksum sidecar
        fh.write(b"half a checkpoint")
    with pytest.raises(ValueError, match="corrupt or incomplete"):
        load_run(str(bad))
    os.remove(bad / "config.json")
    with pytest.raises(ValueError, match="config.json is missing"):
        load_run(str(bad))


def test_cli_eval(trained, capsys):
    parser = argparse.ArgumentParser()
    add_eval(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(
        [
            "eval",
            trained["dir"],
            "--factors",
            "1",
            "2",
            "64",
            "--policies",
            "freeze",
            "--limit",
            "4",
            "--store",
            "",
            "--json",
        ]
    )
    assert args.fn(args) == 0
    res = json.loads(capsys.readouterr().out)
    cells = res["datasets"]["toks"]["cells"]
    assert [(c["factor"], c["policy"], c["tokens"]) for c in cells] == [
        (1, "freeze", 256),
        (2, "freeze", 256),
        (64, "freeze", 0),
    ]
    assert "needs 4097" in cells[2]["skipped"] and len(res["datasets"]["toks"]["bins"]["loss"]) == 8
    args = parser.parse_args(
        ["eval", trained["dir"], "--factors", "2", "--no-bins", "--limit", "2", "--store", ""]
    )
    assert args.fn(args) == 0
    table = capsys.readouterr().out
    assert "recompute" in table and "freeze" in table and "position bins" not in table
    assert "run ev  step 2  trained at T=64" in table
