"""The study's plan (analysis.experiments.study.plan), by hand and against independent oracles: the rung
rule, the seeds plan against `analysis.statistics.power` and a simulation of σ's bound, the budget's extra
seeds, the whole-study estimate.  No training here (tests/analysis/test_study.py runs the study)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.experiments.study import plan as SP
from analysis.statistics import power as P


def test_chosen_rung_rule_on_hand_built_curves():
    # 250: below +10 %; 500: mean 0.21 ≥ 0.10 but 0.21 − 2·0.127 < 0; 1000: 0.155 − 2·0.007 > 0
    curve = {250: [0.02, 0.03], 500: [0.12, 0.30], 1000: [0.15, 0.16], 2000: [0.5, 0.6]}
    assert SP.chosen_rung(curve, 0.10, 2.0) == (1000, True)
    assert SP.chosen_rung({250: [0.01], 500: [0.05, 0.07]}, 0.10, 2.0) == (500, False)
    assert SP.chosen_rung({100: [0.11]}, 0.10, 2.0) == (100, True)  # one seed: threshold only
    assert SP.chosen_rung({100: [0.11, float("nan")]}, 0.10, 2.0) == (100, True)
    assert not SP.rung_degrades([], 0.1, 2.0)
    with pytest.raises(ValueError, match="empty"):
        SP.chosen_rung({})
    assert SP.degradation({1: 100.0, 4: 130.0}, 4) == pytest.approx(0.30)
    assert math.isnan(SP.degradation({1: 100.0}, 4))


def test_seeds_plan_against_power_on_a_hand_sigma():
    stagger, fixed = [100.0, 102.0], [104.0, 106.0]
    sigma = math.sqrt((2.0 + 2.0) / 2)  # pooled: each side's squared deviations sum to 2
    d = 0.025 * 105.0 / sigma
    pl = SP.seeds_plan(stagger, fixed, seeds=2)
    assert pl.sigma == pytest.approx(sigma) and pl.d == pytest.approx(d)
    assert pl.needed == P.seeds_needed(d, 0.8, 0.05)
    assert pl.achieved == pytest.approx(P.power(d, 2, 2, 0.05))
    assert SP.seeds_plan([1.0, 1.0], [2.0, 2.0]) is None  # σ = 0: no plan


def test_sigma_upper_bound_against_a_simulation_and_by_hand():
    """The bound a plan uses: df = 4 (3 seeds a side) widens σ by sqrt(4 / χ²₀.₀₅(4)) =
    sqrt(4 / 0.7107) = 2.372 (χ² table); and in a simulation of normal samples with 4 df the
    true σ lies above the bound in ≈ 5 % of them."""
    assert P.sigma_upper(1.0, 4) == pytest.approx(math.sqrt(4 / 0.710723), rel=1e-5)
    rng = np.random.default_rng(0)
    x = rng.normal(0.0, 1.0, size=(40_000, 5))
    s = x.std(axis=1, ddof=1)
    bounds = np.array([P.sigma_upper(v, 4) for v in s[:4000]])
    assert abs(float(np.mean(bounds < 1.0)) - 0.05) < 0.012
    with pytest.raises(ValueError, match="df=0"):
        P.sigma_upper(1.0, 0)
    # the plan from the bound at the Holm threshold asks for more seeds than the plain one
    stagger, fixed = [100.0, 101.0, 102.0], [103.0, 104.0, 105.0]
    plain = SP.seeds_plan(stagger, fixed)
    strict = SP.seeds_plan(stagger, fixed, alpha=0.05 / 7, level=0.95)
    assert strict.sigma == pytest.approx(plain.sigma * math.sqrt(4 / 0.710723), rel=1e-5)
    assert strict.alpha == pytest.approx(0.05 / 7)
    assert strict.needed == P.seeds_needed(strict.d, 0.8, 0.05 / 7) > plain.needed


def test_extra_seeds_budget_arithmetic():
    assert SP.extra_seeds(needed=6, have=3, most=10, pair_s=100, left_s=1000) == 3
    assert SP.extra_seeds(needed=6, have=3, most=10, pair_s=100, left_s=250) == 2
    assert SP.extra_seeds(needed=6, have=3, most=4, pair_s=100, left_s=1000) == 1
    assert SP.extra_seeds(needed=None, have=3, most=5, pair_s=100, left_s=1000) == 2
    assert SP.extra_seeds(needed=2, have=3, most=10, pair_s=100, left_s=1000) == 0
    assert SP.extra_seeds(needed=6, have=3, most=10, pair_s=100, left_s=-5) == 0


def test_whole_study_estimate_by_hand():
    sc = SP.STUDY_SCALES["study"]
    t = SP.StepTimes(sc.tokens_per_step, 0.5, 10.0)
    est = SP.study_estimate(t, sc)
    top, rungs = max(sc.ladder), len(sc.ladder)
    run = top * 0.5 + 10.0
    assert est["calibration"] == pytest.approx(4 * run + 4 * (rungs - 1) * 10.0)
    assert est["first_batch"] == pytest.approx(2 * (sc.first_seeds - 1) * run)  # seed 1 reused
    # dense: seeds 1 and 2 are the calibration's; learned, coprime and pow2-stagger: 3 each
    assert sc.others == ("dense", "learned", "coprime", "pow2-stagger") and sc.other_seeds == 3
    assert est["others"] == pytest.approx((1 + 3 * 3) * run)
    skipped = SP.study_estimate(t, sc, skip={"coprime"})  # coprime = stagger at L = 4
    assert skipped["others"] == pytest.approx((1 + 3 * 2) * run)
    assert sc.lab == ("search-best",) and est["lab"] == pytest.approx(sc.lab_seeds * run)
    assert est["total"] == pytest.approx(
        sum(est[k] for k in ("calibration", "first_batch", "others", "lab"))
    )
    prior = SP.StepTimes(sc.tokens_per_step, sc.prior_s_per_step, sc.eval_s)
    # the worst case (stage 2 at the top rung) of the paper's part fits 3 h at the EPYC's prior
    # step time; the lab's arm runs only where the budget has room (like stage 3)
    worst = SP.study_estimate(prior, sc, skip={"coprime"})
    assert worst["total"] - worst["lab"] <= sc.budget_s
    t.add("learned", 2.0)
    assert t.s_per_step("learned") == 2.0 and t.s_per_step("dense") == 2.0


def test_search_best_is_the_searchs_linear_ramp():
    assert SP.search_best_alphas(4) == pytest.approx((1.2917, 1.2041, 1.1165, 1.0289), abs=1e-6)
    assert SP.search_best_alphas(2) == SP.SEARCH_BEST and SP.search_best_alphas(1) == (1.2917,)
    # at the study's shape it attends more distinct distances than the stagger (a hand-checkable
    # count through probes.coverage, the search's own objective)
    from probes.coverage import schedule_coverage

    sc = SP.STUDY_SCALES["study"]
    from lab.ladder.offsets import Ladder

    shape = dict(layers=4, ladder=Ladder(sc.window), seq_len=sc.seq_len)
    best = schedule_coverage(list(SP.search_best_alphas(4)), **shape)
    stagger = schedule_coverage("stagger", **shape)
    assert (best["union"], stagger["union"]) == (33, 31)
    # by hand, beyond the window {0..12}: the stagger's rungs 17 28 44 72 116 | 18 28 46 74 120 |
    # 15 24 40 64 104 | 20 32 51 82 give 18 distinct; the ramp's four layers of 5 rungs, 20
    assert (best["union_beyond_window"], stagger["union_beyond_window"]) == (20, 18)


def test_search_best_is_what_the_registered_search_finds():
    """The declared α are the best trial of the registered search (seeded, in memory)."""
    optuna = pytest.importorskip("optuna")
    from analysis.experiments.search.objectives import parse_objectives
    from analysis.experiments.search.search import SearchConfig, run_search
    from analysis.experiments.search.space import parse_space

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = parse_space("linear", layers=4, window=12, seq_len=128, rungs=15)
    cfg = SearchConfig(space, tuple(parse_objectives(["distinct"])), trials=200, seed=0)
    best = run_search(cfg, None, log=lambda *a: None).study.best_trial
    assert best.value == 33
    got = (best.params["alpha_first"], best.params["alpha_last"])
    assert got == pytest.approx(SP.SEARCH_BEST, abs=5e-5)


def test_every_scheme_builds_its_config_at_the_study_scale(tmp_path):
    """Each scheme's TrainConfig at the study's own scale (the smoke scale uses another preset,
    so only this catches a scheme without a preset): the schedule, base and W it must have."""
    from analysis.experiments.study.runner import study_config

    sc = SP.STUDY_SCALES["study"]
    want = {
        "dense": ("dense", None),
        "fixed": ("sparse", "fixed"),
        "stagger": ("sparse", "stagger"),
        "learned": ("sparse", "learned"),
        "coprime": ("sparse", "coprime"),
        "pow2-stagger": ("sparse", "stagger"),
        "pow2-fixed": ("sparse", "fixed"),
        "search-best": ("sparse", SP.search_best_alphas(4)),
    }
    assert set(want) == set(SP.SCHEMES)
    for scheme, (attention, schedule) in want.items():
        m = study_config(sc, "study", scheme, 1, 500, str(tmp_path)).model
        assert m.attention == attention and m.seq_len == sc.seq_len, scheme
        if attention == "sparse":
            if scheme == "search-best":
                assert m.schedule == pytest.approx(schedule)
            else:
                assert m.schedule == schedule, scheme
            assert m.window == sc.window and m.n_layers == 4
            assert m.base == ("pow2" if scheme.startswith("pow2") else "fib"), scheme


def test_a_scale_refuses_a_ladder_or_a_first_batch_it_cannot_run():
    for bad in ((500, 250), (250, 250), ()):
        with pytest.raises(ValueError, match=r"must be increasing step counts"):
            SP.StudyScale(ladder=bad)
    assert SP.StudyScale(ladder=(250,)).ladder == (250,)
    with pytest.raises(ValueError, match=r"first_seeds=1: σ needs at least 2 seeds a side"):
        SP.StudyScale(first_seeds=1)
    assert SP.StudyScale(first_seeds=2).first_seeds == 2


def test_degradation_and_the_rung_rule_at_their_boundaries():
    assert SP.degradation({1: 0.5, 4: 1.0}, 4) == 1.0  # a perplexity below 1 is still one
    for bad in ({1: 0.0, 4: 5.0}, {1: -1.0, 4: 5.0}, {1: 10.0, 4: math.inf}, {1: 10.0}):
        assert math.isnan(SP.degradation(bad, 4)), bad
    assert SP.rung_degrades([0.1], 0.1, 2.0)  # the mean at the threshold counts
    # mean 2, std 2 (by hand: squared deviations 4 + 0 + 4 over 2): mean − 1·std = 0 is not > 0
    assert not SP.rung_degrades([0.0, 2.0, 4.0], 0.1, 1.0)
    assert SP.rung_degrades([0.0, 2.0, 4.0], 0.1, 0.99)
    # the defaults are the study's rule: +10 % and 2 std (mean 0.3, std 0.1414: 2.1 std)
    assert SP.chosen_rung({500: [0.2, 0.4]}) == (500, True)
    assert SP.chosen_rung({500: [0.2, 0.4]}, spread_k=3.0) == (500, False)
    assert SP.chosen_rung({500: [0.105]}) == (500, True)
    with pytest.raises(ValueError, match="^the calibration curve is empty: train at least one"):
        SP.chosen_rung({})


def test_step_times_keep_each_schemes_own_measurements():
    t = SP.StepTimes(4096, prior_s_per_step=0.55, eval_s=5.0)
    assert t.s_per_step("dense") == 0.55 and t.eval_cost() == 5.0  # priors
    for bad in (0.0, -1.0, math.nan, math.inf):
        t.add("dense", bad)
    assert t.measured == {}
    t.add("dense", 0.5)  # below a second a step: measured all the same
    t.add("dense", 0.7)
    t.add("fixed", 0.3)
    assert t.measured == {"dense": [0.5, 0.7], "fixed": [0.3]}
    assert t.s_per_step("dense") == pytest.approx(0.6) and t.s_per_step("fixed") == 0.3
    assert t.s_per_step("learned") == 0.5  # unmeasured: the median of every measurement
    t.evals += [3.0, 4.0, 8.0]
    assert t.eval_cost() == 4.0
    assert t.run_s("fixed", 100) == pytest.approx(100 * 0.3 + 4.0)
    assert t.to_json() == {
        "s_per_step": {"dense": pytest.approx(0.6), "fixed": 0.3},
        "eval_s": 4.0,
        "prior_s_per_step": 0.55,
    }


def test_seeds_plan_pools_both_sides_and_honours_its_level_and_target():
    stagger, fixed = [100.0, 104.0], [104.0, 106.0]  # squared deviations 8 and 2
    sigma = math.sqrt((8.0 + 2.0) / 2)
    pl = SP.seeds_plan(stagger, fixed, seeds=2, target=0.9)
    assert pl.sigma == pytest.approx(sigma)
    assert pl.needed == P.seeds_needed(0.025 * 105.0 / sigma, 0.9, 0.05)
    up = SP.seeds_plan(stagger, fixed, level=0.8)
    assert up.sigma == pytest.approx(P.sigma_upper(sigma, 2, 0.8))


def test_extra_seeds_with_a_fractional_or_zero_pair_cost():
    assert SP.extra_seeds(needed=6, have=3, most=10, pair_s=0.5, left_s=1.0) == 2
    assert SP.extra_seeds(needed=6, have=3, most=10, pair_s=0.0, left_s=1.0) == 3  # free runs


def test_the_estimate_prices_each_scheme_at_its_own_step_time():
    sc = SP.STUDY_SCALES["study"]
    t = SP.StepTimes(sc.tokens_per_step, 0.5, 10.0)
    t.add("dense", 1.0)
    t.add("stagger", 0.5)
    t.add("fixed", 0.5)
    t.add("search-best", 2.0)
    t.add("learned", 0.9)  # the median of all five: 0.9, unlike any calibration line's
    est = SP.study_estimate(t, sc, steps=700)  # not a rung: no calibration run is reused
    top = max(sc.ladder)
    calib = (2 * (top * 1.0 + 10) + 2 * (top * 0.5 + 10)) + 4 * (len(sc.ladder) - 1) * 10
    assert est["calibration"] == pytest.approx(calib)
    assert est["first_batch"] == pytest.approx(2 * sc.first_seeds * (700 * 0.5 + 10))
    assert est["lab"] == pytest.approx(sc.lab_seeds * (700 * 2.0 + 10))
    # others: dense and learned at their own times, the unmeasured ones at the median of all
    assert est["others"] == pytest.approx(3 * (700 * 1.0 + 10) + 9 * (700 * 0.9 + 10))


def test_search_best_is_rounded_to_six_decimals():
    # 12 layers: steps of −0.2628 / 11 = −0.0238909…; the second layer 1.2678090909… → 1.267809
    assert SP.search_best_alphas(12)[1] == 1.267809
    assert SP.search_best_alphas(12)[-1] == 1.0289


def test_the_study_pins_fp32_whatever_auto_would_pick(monkeypatch):
    """The CPU study's runs must match its committed fp32 results on any machine: its config says
    fp32 even where `auto` would pick bf16 (a CPU that measured bf16 faster, issue 41)."""
    from analysis.experiments.study.runner import study_config

    monkeypatch.setattr("lab.machine.precision.default_precision", lambda *a, **k: "bf16")
    cfg = study_config(SP.STUDY_SCALES["study"], "study", "stagger", 1, 500, "runs", "auto")
    assert cfg.precision == "fp32"
