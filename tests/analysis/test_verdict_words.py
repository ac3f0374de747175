"""The LM verdicts' words in README and RESULTS follow claims.json (`analysis.ledger.verdict_words`)."""

from __future__ import annotations

import json
import os

import pytest

from analysis.ledger import verdict_words as VW

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _doc():
    def lm(i, verdict, label=None, stats=None, here=""):
        return {
            "id": i,
            "source": "paper",
            "kind": "lm-ppl",
            "verdict": verdict,
            "label": label,
            "stats": stats or {},
            "here": here,
        }

    comp = {
        "a": "fib/stagger",
        "b": "fib/fixed",
        "gap": 0.35,  # ppl: not what the table shows
        "effect": 0.0085,
        "ci": [0.001, 0.016],
        "metric": "log_ppl",
        "p_raw": 0.03,
        "p_adjusted": 0.21,
        "family": "table5",
        "n_a": 5,
        "n_b": 5,
    }
    return {
        "protocol_sha256": "ab" * 32,
        "claims": [
            lm("t5-stagger-beats-fixed", "not shown", stats=comp),
            lm("t5-stagger-beats-learned", "did not hold", "magnitude not reproduced"),
            lm("t1-stagger-beats-fixed", "not tested here"),
            lm("t4-stagger-below-fixed-every-bin", "held", here="+0.004, +0.013 | nats"),
            {"id": "cov-fixed-19", "source": "paper", "kind": "coverage", "verdict": "held"},
        ],
    }


def test_the_block_carries_each_lm_claim_once_with_its_verdict():
    block = VW.lm_block(_doc(), "x/claims.json")
    assert block.startswith(VW.BEGIN.format(form="verdicts", source="x/claims.json"))
    assert block.endswith(VW.END.format(form="verdicts"))
    rows = [line for line in block.splitlines() if line.startswith("| `")]
    assert len(rows) == 4 and "cov-fixed-19" not in block  # LM claims only
    assert (
        "| `t5-stagger-beats-fixed` | **not shown** | fib/stagger vs fib/fixed: gap +0.0085 nats"
        in block
    )
    assert "p 0.03, Holm p 0.21 (table5; n = 5 vs 5)" in block
    assert "**did not hold — magnitude not reproduced**" in block
    assert "+0.004, +0.013 / nats" in block  # a | inside a cell would split the table
    assert "1 not shown, 1 did not hold, 1 not tested here, 1 held" in block
    short = VW.lm_block(_doc(), "x/claims.json", form="summary")
    assert short.splitlines()[1] == block.splitlines()[1]  # the same count line, alone
    assert "t5-stagger-beats-fixed" not in short and "1 not tested here" in short
    assert short.endswith("<!-- lm-summary end -->") and len(short.splitlines()) == 3


def test_a_threshold_rule_reads_in_its_own_unit_with_one_sample():
    """A threshold rule's effect is its distance past the threshold, in the threshold's unit
    (here α), from a one-sample test: "n = 5", never "5 vs 0" or "nats"."""
    inert = {"a": "fib/learned", "b": "0.05", "effect": 0.0335, "ci": [0.0329, 0.034],
             "metric": "-alpha_drift", "p_raw": 4e-9, "p_adjusted": 2e-7, "family": "f",
             "n_a": 5, "n_b": 0}  # fmt: skip
    doc = {"claims": [{"id": "lm-learned-alpha-inert", "source": "paper", "kind": "lm",
                       "verdict": "held", "stats": inert}]}  # fmt: skip
    block = VW.lm_block(doc, "x/claims.json")
    assert "fib/learned vs 0.05: past the threshold +0.0335 α, 95 % CI [+0.0329, +0.0340]" in block
    assert "(f; n = 5)" in block and "nats" not in block


def test_sync_writes_the_block_and_problems_finds_a_stale_one():
    text = "intro\n" + VW.lm_block({"claims": []}, "x/claims.json") + "\nafter\n"
    fresh = VW.sync(text, _doc(), "x/claims.json")
    assert fresh.startswith("intro\n") and fresh.endswith("\nafter\n")
    summary = VW.sync(
        VW.lm_block({"claims": []}, "x/claims.json", "summary"), _doc(), "x/claims.json"
    )
    assert summary == VW.lm_block(_doc(), "x/claims.json", "summary")  # each block keeps its form
    assert VW.problems(summary.replace("1 held", "2 held"), _doc(), "x/claims.json")
    assert VW.problems(fresh, _doc(), "x/claims.json") == []
    assert VW.problems(text, _doc(), "x/claims.json")  # the empty block is stale
    edited = fresh.replace("**not shown**", "**held**")
    assert any("not what" in p for p in VW.problems(edited, _doc(), "x/claims.json"))


@pytest.mark.parametrize(
    "line, bad",
    [
        ("At 500 steps stagger beats fixed: **held** (p = 0.049).", True),
        ("the study's answer to `t5-stagger-beats-fixed` is yes", True),
        ("stagger beats fixed is not shown at this scale", False),
        ("`t5-stagger-beats-learned`: did not hold — magnitude not reproduced", False),
        ("`t5-stagger-beats-learned` held", True),
        ("stagger beats fixed on held-out perplexity by 0.85 %", False),  # no verdict word
        ("`t5-stagger-beats-fixed` held, `t4-stagger-below-fixed-every-bin` held", False),
    ],
)
def test_a_line_outside_the_block_may_not_say_more_than_the_verdict(line, bad):
    text = VW.lm_block(_doc(), "x/claims.json") + "\n" + line + "\n"
    assert bool(VW.problems(text, _doc(), "x/claims.json")) is bad


def test_main_rewrites_and_checks(tmp_path, capsys):
    claims = tmp_path / "claims.json"
    claims.write_text(json.dumps(_doc()))
    doc = tmp_path / "RESULTS.md"
    doc.write_text(VW.lm_block({"claims": []}, str(claims)) + "\nstagger beats fixed: held\n")
    assert VW.main([str(claims), str(doc), "--check"]) == 1
    assert "stale" not in capsys.readouterr().out
    assert VW.main([str(claims), str(doc)]) == 1  # the block is fixed, the stray line is not
    assert "line" in capsys.readouterr().out
    doc.write_text(doc.read_text().replace("stagger beats fixed: held", "see the table"))
    assert VW.main([str(claims), str(doc), "--check"]) == 0


@pytest.mark.parametrize(
    "line, named",
    [
        ("the stagger's gain over fixed at 500 steps: held", "t5-stagger-beats-fixed"),
        ("stagger vs fixed: held", "t5-stagger-beats-fixed"),
        ("pow2-stagger beats fixed: held", "t5-pow2-stagger-beats-fixed"),  # not stagger's
        ("learned beats fixed: held", "t1-learned-beats-fixed"),
    ],
)
def test_the_ways_a_sentence_names_a_comparison(line, named):
    doc = {
        "claims": [
            {"id": named, "source": "paper", "kind": "lm-ppl", "verdict": "not shown"},
            {"id": "t5-stagger-beats-fixed", "source": "paper", "kind": "lm-ppl", "verdict": "held"}
            if named != "t5-stagger-beats-fixed"
            else {"id": "t9-other", "source": "paper", "kind": "lm-ppl", "verdict": "held"},
        ]
    }
    (p,) = VW.problems(line, doc, "c.json")
    assert f"names {named}" in p


def test_readme_and_results_say_what_the_confirmation_decided():
    """The README's count of LM verdicts and RESULTS' table of them are the blocks generated
    from the confirmation's claims.json (claims.toml R7: a claim is held only when fresh seeds
    hold it), and no other line there names an LM claim beside a verdict it does not carry
    (regenerate: python -m analysis.ledger.verdict_words benchmarks/results/confirm/claims.json
    README.md benchmarks/RESULTS.md; the scale study's: the same with its claims.json and
    --blocks-only)."""
    source = "benchmarks/results/confirm/claims.json"
    with open(os.path.join(ROOT, source), encoding="utf-8") as f:
        doc = json.load(f)
    # the scale study's depth claims: their own blocks (RESULTS' table, the README's count),
    # from their own file; a sentence may quote its verdicts too
    scale = "benchmarks/results/scale/claims.json"
    with open(os.path.join(ROOT, scale), encoding="utf-8") as f:
        depth = json.load(f)
    for name, form in (("README.md", "summary"), ("benchmarks/RESULTS.md", "verdicts")):
        with open(os.path.join(ROOT, name), encoding="utf-8") as f:
            text = f.read()
        assert VW.BEGIN.format(form=form, source=source) in text, name
        assert VW.problems(text, doc, source, also=(depth,)) == [], name
    for name, form in (("README.md", "summary"), ("benchmarks/RESULTS.md", "verdicts")):
        with open(os.path.join(ROOT, name), encoding="utf-8") as f:
            text = f.read()
        assert VW.BEGIN.format(form=form, source=scale) in text, name
        assert VW.problems(text, depth, scale, lines=False) == [], name


def test_a_second_sources_block_is_checked_by_its_own_call_and_hides_its_lines():
    """RESULTS holds the confirmation's block and the scale study's (its depth claims): each is
    rewritten and checked against its own file; the prose answers to the first source."""
    scale = {
        "registration": {"protocol_sha256": "cd" * 32},
        "depth": {"t3-pow2-degrades": {"verdict": "did not hold", "label": None, "here": "−1.6 %"},
                  "t1-coprime-ties-stagger": {"verdict": "not tested here", "why": "one W"}},
    }  # fmt: skip
    (deg, tie) = VW.lm_claims(scale)
    assert deg["id"] == "t3-pow2-degrades" and deg["source"] == "paper" and tie["why"] == "one W"
    text = VW.lm_block(_doc(), "c.json") + "\n" + VW.lm_block({"depth": {}}, "s.json") + "\n"
    text = VW.sync(VW.sync(text, _doc(), "c.json"), scale, "s.json")
    assert VW.lm_block(_doc(), "c.json") in text and VW.lm_block(scale, "s.json") in text
    assert "| `t1-coprime-ties-stagger` | **not tested here** | one W |" in text
    assert "2 language-model claims" in text and "`cdcdcdcdcdcd…`" in text
    at = VW.lm_block({**scale, "depth_cell": [8, 128]}, "s.json", "summary")
    assert "The paper's 2 claims that only depth decides, at (L, T) = (8, 128), as `s.json`" in at
    # a decided amendment's verdict counts, and its own hash is named beside the protocol's
    amended = {**scale, "amendments": {"w": {"t1-coprime-ties-stagger": {
        "verdict": "held", "amendment": "w", "sha256": "ef" * 32, "here": "tie"}}}}  # fmt: skip
    line = VW.lm_block(amended, "s.json", "summary")
    assert (
        "1 did not hold, 1 held" in line and "`cdcdcdcdcdcd…`; amendment w `efefefefefef…`" in line
    )
    # the depth block's "did not hold" is no stray line for the confirmation's check
    assert VW.problems(text, _doc(), "c.json") == []
    assert VW.problems(text, scale, "s.json", lines=False) == []
    stale = text.replace("−1.6 %", "+11.3 %")
    assert VW.problems(stale, _doc(), "c.json") == []  # not the confirmation's block
    assert VW.problems(stale, scale, "s.json", lines=False) == [
        "the block from s.json is not what s.json gives today"
    ]
    # a sentence may quote the second source's verdict where the first says "not tested here"
    quoted = text + "`t1-coprime-ties-stagger`: not tested here on W = 12 alone\n"
    assert VW.problems(quoted, _doc(), "c.json", also=(scale,)) == []
    wrong = text + "`t3-pow2-degrades` held at 4×\n"
    assert VW.problems(wrong, _doc(), "c.json", also=(scale,))  # neither source says held
    stray = text + "`t5-stagger-beats-learned` held\n"
    assert VW.problems(stray, scale, "s.json", lines=False) == []  # prose: not this source's
    assert VW.problems(stray, _doc(), "c.json")


def test_the_pairs_a_sentence_or_the_study_names_are_claims_tomls_own():
    """`scheme_pairs`: the paper's beats / ties claims between two schemes by short name, the
    one over seeds where there is one; the study's declared comparisons and the sentences'
    aliases both read it, so a claim renamed or re-paired in claims.toml moves them too."""
    from analysis.experiments.study.report import PAPER
    from analysis.ledger.ledger import load_claims, scheme_pairs

    claims = [
        {"id": "grid", "compare": ["fib/stagger", "fib/fixed", "beats", "grid"]},
        {"id": "seeds", "compare": ["fib/stagger", "fib/fixed", "beats", "seeds"]},
        {"id": "later", "compare": ["fib/stagger", "fib/fixed", "beats", "grid"]},
        {"id": "tie", "compare": ["fib/coprime", "pow2/stagger", "ties", "every"]},
        {"id": "best", "compare": ["fib/stagger", "", "best", "any"]},
        {"id": "bases", "compare": ["fib", "pow2", "additive", "seeds"]},
        {"id": "none"},
    ]
    got = {pair: c["id"] for pair, c in scheme_pairs(claims).items()}
    assert got == {("stagger", "fixed"): "seeds", ("coprime", "pow2-stagger"): "tie"}
    assert {pair: c["id"] for pair, c in scheme_pairs(claims[:1] + claims[2:3]).items()} == {
        ("stagger", "fixed"): "grid"  # no claim over seeds: the first
    }
    toml = {c["id"]: c["compare"] for c in load_claims()[0] if "compare" in c}
    for claim, a, b, measure, _, cid in PAPER:
        if cid is not None:
            la, lb, test, scope = toml[cid]
            assert claim == f"{a} {test} {b}" and measure == "ppl"
            assert (
                scope == "seeds" or cid == "t1-learned-beats-fixed"
            )  # Table 5 lacks learned/fixed
    assert VW.ALIASES and all(cid in toml for cid in VW._PAIRS.values())
