"""The main job's claim checks, on hand-made results whose verdicts are known."""

import numpy as np
import pytest

from analysis.claims import (
    coverage_claims,
    extrapolation_claims,
    lm_claims,
    position_claims,
    probe_claims,
)
from analysis.demo import coverage_stage


def _rec(depth, init, acc, alphas, start, seed=0):
    return {
        "depth": depth,
        "init": init,
        "seed": seed,
        "acc": acc,
        "alphas": alphas,
        "trajectory": [{"step": 0, "alphas": start}, {"step": 10, "alphas": alphas}],
    }


def _lm(label, ppl, cells=(), bins=None, alphas=(1.0,), same=None):
    attention = "dense" if label == "dense" else "sparse"
    cell_dicts = [
        {
            "factor": f,
            "policy": p,
            "ppl": v,
            "skipped": None,
            "blocks": [{"ppl": b} for b in blocks],
            "same_tokens": [{"ppl": b} for b in (same or {}).get((f, p), [])],
        }
        for f, p, v, blocks in cells
    ]
    return {
        "name": f"{label}-{ppl}",
        "train": {"alphas": list(alphas)},
        "eval": {
            "attention": attention,
            "schedule": None if label == "dense" else label,
            "datasets": {
                "x": {
                    "perplexity": {"ppl": ppl},
                    "cells": cell_dicts,
                    "bins": {"loss": bins} if bins else None,
                }
            },
        },
    }


def _verdicts(claims):
    return {c["claim"]: c["verdict"] for c in claims}


def test_coverage_claim_reproduces_the_spec_count():
    cov = coverage_stage(16, 1024)
    t = cov["table"].set_index("scheme")
    assert (t.loc["fixed", "union"], t.loc["stagger", "union"]) == (19, 133)  # SPEC §9
    assert t.loc["pow2", "union"] == 15
    claims = coverage_claims(cov)
    assert claims[0]["verdict"] == "held"
    # order independence at full depth: coprime and linear reach the same set
    assert cov["fractions"]["coprime"][-1] == cov["fractions"]["stagger"][-1]


def test_probe_claims_follow_the_thresholds():
    recs = [
        _rec(4, "uniform", {"200": 0.0, "350": 0.02}, [0.99, 1.01, 1.0, 0.98], [1.0] * 4),
        _rec(2, "staggered", {"200": 0.95, "350": 0.0}, [0.56, 1.40], [0.55, 1.45]),
        _rec(
            4,
            "staggered",
            {"200": 0.30, "350": 0.0},
            [0.55, 0.8, 1.1, 1.45],
            [0.55, 0.85, 1.15, 1.45],
        ),
    ]
    v = _verdicts(probe_claims(recs))
    assert v["from a uniform init (α=1), learned α fails to retrieve at depth ≥ 4"] == "held"
    # depth 4 staggered only reaches 0.30 < 0.5: the claim does not hold
    assert v["from a staggered init, learned α retrieves at depths 2 and 4"] == "did not hold"
    assert v["learned α stays within 0.05 of a uniform init"] == "held"
    assert v["learned α stays spread from a staggered init"] == "held"
    drifted = [_rec(2, "uniform", {"200": 0.0, "350": 0.0}, [0.93, 1.0], [1.0, 1.0])]
    assert (
        _verdicts(probe_claims(drifted))["learned α stays within 0.05 of a uniform init"]
        == "did not hold"
    )


def test_lm_claims_use_welch_over_seeds():
    lms = [
        _lm("fixed", 44.0),
        _lm("fixed", 44.2),
        _lm("stagger", 42.0),
        _lm("stagger", 42.1),
        _lm("dense", 33.0),
        _lm("learned", 43.0, alphas=(0.99, 1.02)),
    ]
    v = _verdicts(lm_claims(lms))
    assert v["the linear stagger beats fixed α on held-out perplexity"] == "held"
    assert v["dense attention has the lowest perplexity at the training length"] == "held"
    assert v["learned α barely moves from its init α=1 (within 0.05)"] == "held"
    noisy = [_lm("fixed", 44.0), _lm("fixed", 41.0), _lm("stagger", 41.5), _lm("stagger", 42.5)]
    assert (
        _verdicts(lm_claims(noisy))["the linear stagger beats fixed α on held-out perplexity"]
        == "not shown"
    )
    worse = [_lm("fixed", 40.0), _lm("fixed", 40.1), _lm("stagger", 42.0), _lm("stagger", 42.1)]
    assert (
        _verdicts(lm_claims(worse))["the linear stagger beats fixed α on held-out perplexity"]
        == "did not hold"
    )


def test_extrapolation_and_position_claims():
    lms = [
        _lm(
            "dense",
            30.0,
            [(1, "recompute", 30.0, [30.0]), (4, "recompute", 90.0, [30.0, 80, 110, 140])],
            same={(4, "recompute"): [30.0, 40.0, 50.0, 60.0]},
        ),
        _lm(
            "stagger",
            40.0,
            [
                (1, "recompute", 40.0, [40.0]),
                (4, "recompute", 39.0, [40.0, 39, 38.5, 38.5]),
                (4, "freeze", 39.1, [40.0, 39, 38.6, 38.8]),
            ],
            bins=[4.0, 3.9, 3.8, 3.8, 3.7, 3.7, 3.7, 3.7],
            same={(4, "recompute"): [40.0, 39.5, 38.0, 38.5]},
        ),
        _lm(
            "fixed",
            41.0,
            [(1, "recompute", 41.0, [41.0]), (4, "recompute", 40.5, [41.0, 40.5, 40.2, 40.3])],
            bins=[4.1, 4.0, 3.9, 3.9, 3.8, 3.8, 3.8, 3.6],
        ),
    ]
    ex = {c["claim"]: c for c in extrapolation_claims(lms)}
    keep = ex[
        "sparse models keep their perplexity at 4× the training length while dense "
        "attention degrades"
    ]
    assert keep["verdict"] == "held"
    assert keep["ours"]["dense"] == pytest.approx(200.0)  # 90 / 30 − 1
    assert keep["ours"]["stagger"] == pytest.approx(-2.5)  # 39 / 40 − 1
    same = [c for k, c in ex.items() if k.startswith("scored on the same tokens")][0]
    # stagger blocks 1–3: 39/39.5, 38.5/38, 38.5/38.5 → mean of −1.27 %, +1.32 %, 0 %
    want = 100 * np.mean([39 / 39.5 - 1, 38.5 / 38 - 1, 0.0])
    assert same["ours"]["stagger"] == pytest.approx(want)
    assert same["ours"]["dense"] == pytest.approx(
        100 * np.mean([80 / 40 - 1, 110 / 50 - 1, 140 / 60 - 1])
    )
    assert same["verdict"] == "held"  # every sparse model under 1 %
    frz = [c for k, c in ex.items() if k.startswith("the never-trained rungs")][0]
    assert frz["ours"]["stagger"] == pytest.approx(100 * (39.0 / 39.1 - 1))
    pos = position_claims(lms)[0]
    # the last bin has fixed below stagger (3.6 < 3.7): not every bin
    assert pos["verdict"] == "did not hold"
    assert pos["ours"][0] == pytest.approx(0.1) and pos["ours"][-1] == pytest.approx(-0.1)


def test_battery_claim_uses_three_standard_errors():
    from analysis.claims import battery_claims

    def lm(r, g):
        x = _lm("fixed", 40.0)
        x["battery"] = {
            "ruler_vt": {"acc": r, "chance": 1 / 9, "n": 900},
            "lego": {"acc": g, "chance": 0.5, "n": 900},
        }
        return x

    # 3 σ at n=900: RULER 3·sqrt((1/9)(8/9)/900) = 0.0314, LEGO 3·0.5/30 = 0.05
    v = [c["verdict"] for c in battery_claims([lm(0.14, 0.54)])]
    assert v == ["held", "held"]
    v = [c["verdict"] for c in battery_claims([lm(0.15, 0.56)])]
    assert v == ["did not hold", "did not hold"]
