"""One definition each: the scheme registry, the evaluation kind, the probe record, α drift and
the paper's Table 2 — checked against hand-written copies of what each replaced."""

import json
import re
from pathlib import Path

import pytest

from lab.ladder.schemes import SCHEMES, paper_label, scheme, scheme_names, scheme_of
from lab.lm.modelconfig import config_for
from lab.store.evalkind import KIND_PATTERNS, EvalKind, Family

ROOT = Path(__file__).resolve().parents[1]

# ------------------------------------------------------------------------------------- schemes
# the vocabularies the registry replaced, copied from the code before it
OLD_EFFICIENCY = {
    "dense": dict(attention="dense", path="auto"),
    "fixed": dict(attention="sparse", schedule="fixed", base="fib", path="auto"),
    "stagger": dict(attention="sparse", schedule="stagger", base="fib", path="auto"),
    "coprime": dict(attention="sparse", schedule="coprime", base="fib", path="auto"),
    "pow2": dict(attention="sparse", schedule="fixed", base="pow2", path="auto"),
    "pow2-stagger": dict(attention="sparse", schedule="stagger", base="pow2", path="auto"),
    "learned": dict(attention="sparse", schedule="learned", base="fib", path="auto"),
}
OLD_MECHANISMS = {
    "dense": dict(attention="dense"),
    "fib-fixed": dict(schedule="fixed"),
    "pow2": dict(base="pow2", schedule="fixed"),
    "fib-stagger": dict(schedule="stagger"),
    "learned": dict(schedule="learned"),
    "blur": dict(schedule="learned", path="blur"),
}
OLD_BODIES = {
    "fib_fixed": ("fib", "fixed"),
    "fib_learned": ("fib", "learned"),
    "fib_stagger": ("fib", "stagger"),
    "fib_hdc": ("fib", "coprime"),
    "logsparse": ("pow2", "fixed"),
    "logsparse_stagger": ("pow2", "stagger"),
}
# spelling -> (canonical name, paper label, short name)
SPELLINGS = {
    "fib-stagger": ("fib-stagger", "fib/stagger", "stagger"),
    "stagger": ("fib-stagger", "fib/stagger", "stagger"),
    "fib/stagger": ("fib-stagger", "fib/stagger", "stagger"),
    "linear": ("fib-stagger", "fib/stagger", "stagger"),
    "fib_stagger": ("fib-stagger", "fib/stagger", "stagger"),
    "fixed": ("fib-fixed", "fib/fixed", "fixed"),
    "fib/fixed": ("fib-fixed", "fib/fixed", "fixed"),
    "coprime": ("fib-coprime", "fib/coprime", "coprime"),
    "hdc": ("fib-coprime", "fib/coprime", "coprime"),
    "pow2": ("pow2", "pow2/fixed", "pow2"),
    "logsparse": ("pow2", "pow2/fixed", "pow2"),
    "pow2/stagger": ("pow2-stagger", "pow2/stagger", "pow2-stagger"),
    "learned": ("learned", "fib/learned", "learned"),
    "fib-learned": ("learned", "fib/learned", "learned"),
    "blur": ("blur", "fib/blur", "blur"),
    "dense": ("dense", "dense", "dense"),
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_every_spelling_resolves_to_one_record(spelling):
    s = scheme(spelling)
    assert (s.name, s.paper, s.short) == SPELLINGS[spelling]
    assert scheme(s.name) is s and scheme(s) is s


def test_names_are_unique_and_errors_list_them():
    spellings = [sp for s in SCHEMES for sp in s.spellings]
    assert len(spellings) == len(set(spellings))
    with pytest.raises(ValueError) as e:
        scheme("fib-gumbel")
    msg = str(e.value)
    assert "'fib-gumbel'" in msg and "\n" not in msg
    assert all(n in msg for n in scheme_names())
    with pytest.raises(ValueError, match=r"mechanism='fib-coprime' is unknown: use one of dense"):
        scheme("fib-coprime", among=("dense", "fib-fixed"), what="mechanism")


@pytest.mark.parametrize("s", SCHEMES, ids=lambda s: s.name)
def test_scheme_of_inverts_the_overrides(s):
    cfg = config_for("tiny", **s.model_overrides())
    assert scheme_of(cfg) is s
    assert scheme_of(cfg.to_dict()) is s
    assert scheme_of({"model": cfg.to_dict(), "seed": 1}) is s  # a TrainConfig.to_dict()
    # the implementation path is not the scheme (except the blur gather)
    if s.attention == "sparse" and not s.learned:
        assert scheme_of(config_for("tiny", **{**s.model_overrides(), "path": "mask"})) is s


def test_scheme_of_custom_configs_is_none():
    assert scheme_of(config_for("tiny", schedule=(0.5, 1.5))) is None
    assert scheme_of(config_for("tiny", base="pow2", schedule="coprime")) is None
    assert scheme_of({"attention": "dense", "schedule": (1.0,)}).name == "dense"


def test_the_registry_builds_the_models_the_old_tables_built():
    for short, over in OLD_EFFICIENCY.items():
        assert config_for("tiny", **scheme(short).model_overrides()) == config_for("tiny", **over)
    for mech, over in OLD_MECHANISMS.items():
        got = config_for("probe-small", **scheme(mech).model_overrides())
        assert got == config_for("probe-small", **over), mech


def test_paper_labels_and_title_bodies():
    from analysis.published.paperdb import parse_title
    from analysis.tables.rows import config_label

    for b, s, want in [
        ("fib", "fixed", "fib/fixed"),
        ("fib", "stagger", "fib/stagger"),
        ("pow2", "stagger", "pow2/stagger"),
        ("pow2", "fixed", "pow2/fixed"),
        ("fib", "learned", "fib/learned"),
        ("pow2", "coprime", "pow2/coprime"),  # not registered: composed
        ((1, 3, 9), "fixed", "custom/fixed"),
        ("fib", (0.5, 1.5), "fib/custom"),
    ]:
        assert config_label(b, s) == paper_label(b, s) == want
    assert config_label(None, None, "dense") == "dense"
    for body, (b, s) in OLD_BODIES.items():
        p = parse_title(f"f01__{body}_w8")
        assert (p["base"], p["schedule"]) == (b, s)
    with pytest.raises(ValueError, match="logsparse_stagger"):
        parse_title("f01__fib_gumbel_w8")


def test_front_ends_accept_any_spelling_and_print_the_old_names():
    from lab.cost.efficiency import MODEL_SCHEMES as EFF
    from lab.cost.efficiency import efficiency_table
    from probes.grid import grid
    from probes.receptive_field import scheme_sets
    from probes.settings import LEARNED, MECHANISMS

    assert EFF == tuple(OLD_EFFICIENCY)
    assert MECHANISMS == tuple(OLD_MECHANISMS) and LEARNED == {"learned", "blur"}
    df = efficiency_table("tiny", [32], ["fib-stagger", "fib/fixed", "dense"])
    assert list(df["scheme"]) == ["stagger", "fixed", "dense"]
    assert scheme_sets("fib/stagger", 4, 2, 64, 6) == scheme_sets("stagger", 4, 2, 64, 6)
    assert scheme_sets("logsparse", 2, 2, 64, 6) == scheme_sets("pow2", 2, 2, 64, 6)
    cells = grid(["stagger", "fib-blur"], [2], ["uniform", "staggered"], [0])
    assert [(c.mechanism, c.init) for c in cells] == [
        ("fib-stagger", "-"),
        ("blur", "uniform"),
        ("blur", "staggered"),
    ]


def test_cli_names_stay_and_aliases_are_accepted(capsys):
    from fiblab.cli import main
    from fiblab.cli.parser import build_parser

    p = build_parser()
    args = p.parse_args(["probe", "marked", "--mechanisms", "fib/stagger", "blur"])
    assert args.mechanisms == ["fib-stagger", "blur"]
    args = p.parse_args(["efficiency", "--schedules", "fib-stagger", "fixed"])
    assert args.schedules == ["fib-stagger", "fib-fixed"]
    assert p.parse_args(["efficiency"]).schedules == list(OLD_EFFICIENCY)
    with pytest.raises(SystemExit) as e:
        p.parse_args(["probe", "marked", "--mechanisms", "gumbel"])
    assert e.value.code == 2
    assert "mechanism='gumbel' is unknown" in capsys.readouterr().err
    assert main(["efficiency", "--preset", "tiny", "--schedules", "fib/stagger", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["scheme"] for r in out["rows"]] == ["stagger"]


# ------------------------------------------------------------------------------ evaluation kinds
HAND_KINDS = {  # text -> (family, block, bin), written out
    "recompute": (Family.RECOMPUTE, None, None),
    "freeze": (Family.FREEZE, None, None),
    "recompute:block0": (Family.RECOMPUTE, 0, None),
    "recompute:block3": (Family.RECOMPUTE, 3, None),
    "freeze:block12": (Family.FREEZE, 12, None),
    "bin0": (Family.BIN, None, 0),
    "bin7": (Family.BIN, None, 7),
    "bin10": (Family.BIN, None, 10),
    "light": (Family.LIGHT, None, None),
}


@pytest.mark.parametrize("text", sorted(HAND_KINDS))
def test_evalkind_parses_hand_written_strings(text):
    k = EvalKind.parse(text)
    assert (k.family, k.block, k.bin) == HAND_KINDS[text]
    assert str(k) == text and EvalKind.parse(str(k)) == k


def test_evalkind_round_trips_every_kind_the_writers_make():
    kinds = [EvalKind.recompute(), EvalKind.freeze(), EvalKind.light()]
    kinds += [EvalKind.of_policy(p, j) for p in ("recompute", "freeze") for j in range(9)]
    kinds += [EvalKind.of_bin(b) for b in range(8)]
    for k in kinds:
        assert EvalKind.parse(str(k)) == k
    texts = {str(k) for k in kinds}
    assert {"recompute", "freeze", "light", "recompute:block8", "freeze:block0", "bin7"} <= texts
    # every pattern the tables document is produced
    shapes = {re.sub(r"block\d+", "block{j}", re.sub(r"^bin\d+", "bin{b}", t)) for t in texts}
    assert shapes == set(KIND_PATTERNS)
    assert str(EvalKind.of_policy("recompute")) == "recompute"
    assert str(EvalKind.of_policy("freeze", 2)) == "freeze:block2"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Full",
        "posmatched",
        "bin",
        "bin01",
        "bin-1",
        "recompute:block",
        "recompute:block01",
        "light:block0",
        "frozen:bin1",
        " full",
        "full",  # the words before schema 4 (`modern_text` reads them)
        "frozen:block0",
        "recompute:block1 ",
    ],
)
def test_evalkind_parse_is_strict(text):
    with pytest.raises(ValueError, match=re.escape(repr(text))):
        EvalKind.parse(text)
    assert EvalKind.read(text) is None


def test_evalkind_rejects_impossible_records():
    with pytest.raises(ValueError, match="no block"):
        EvalKind(Family.LIGHT, block=1)
    with pytest.raises(ValueError, match="bin=None"):
        EvalKind(Family.BIN)
    with pytest.raises(ValueError, match="no bin"):
        EvalKind(Family.RECOMPUTE, bin=1)
    with pytest.raises(ValueError, match="block=-1"):
        EvalKind.recompute(-1)
    with pytest.raises(ValueError, match="policy='shift'"):
        EvalKind.of_policy("shift")


def test_the_store_strings_are_unchanged(tmp_path):
    """What the writers store is byte-identical to the old strings; the tables read them."""
    from lab.evaluation.evalrun import log_extrapolation, log_position_bins
    from lab.evaluation.evaluate import (
        ExtrapolationCell,
        ExtrapolationResult,
        Perplexity,
        PositionBins,
    )
    from lab.store import Store

    p = Perplexity(3.0, 64)
    cells = [
        ExtrapolationCell(1, "recompute", 64, whole=p),
        ExtrapolationCell(2, "freeze", 128, whole=p, blocks=[p, p]),
    ]
    res = ExtrapolationResult("d", 64, 1000, cells)
    bins = PositionBins(64, tuple(range(9)), (1.0,) * 8, (8,) * 8, 1)
    with Store(tmp_path / "s.db") as st:
        st.start_run("r", {}, kind="lm")
        log_extrapolation(st, "r", 10, "d", res)
        log_position_bins(st, "r", 10, "d", bins)
        kinds = sorted(st.evals("r")["kind"])
    assert kinds == sorted(
        ["recompute", "freeze", "freeze:block0", "freeze:block1"] + [f"bin{b}" for b in range(8)]
    )
