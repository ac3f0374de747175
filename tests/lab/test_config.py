"""The typed config layer: every field type parses from override text and from JSON, bad input is
one line naming the key, the value and what is allowed (exit code 2 from the CLI, no traceback),
and a run's config.json re-runs (or varies) the run."""

import dataclasses
import enum
import json
import os
import re
from dataclasses import dataclass, field
from typing import Literal, Union

import pytest

from fiblab.cli import main
from lab.data.prepared import prepare
from lab.lm.modelconfig import ModelConfig, config_for
from lab.lm.typedconfig import (
    apply_overrides,
    config_from_dict,
    format_value,
    read_config,
    split_overrides,
    typed_overrides,
)
from lab.store import Store
from lab.training.train import train
from lab.training.trainconfig import TrainConfig, config_from_file, make_config


# ------------------------------------------------------------------ every field type, generic
class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Inner:
    k: int = 3
    mode: Literal["a", "b"] = "a"


@dataclass
class Demo:
    n: int = 1
    x: float = 0.5
    flag: bool = False
    text: str = "hi"
    maybe: int | None = None
    pair: tuple[float, float] = (0.9, 0.95)
    many: tuple[float, ...] = ()
    ids: list[int] = field(default_factory=list)
    colour: Colour = Colour.RED
    either: Union[str, tuple] = "fib"
    pick: str = field(default="p", metadata={"choices": ("p", "q")})
    inner: Inner = field(default_factory=Inner)


def test_every_field_type_parses_from_text():
    got = apply_overrides(
        Demo(),
        [
            "n=12",
            "x=3e-4",
            "flag=yes",
            "text=a b, c",
            "maybe=7",
            "pair=0.8, 0.99",
            "many=1.5,2,2.5",
            "ids=4,5,6",
            "colour=blue",
            "either=1,3,9",
            "pick=q",
            "inner.k=9",
            "inner.mode=b",
        ],
    )
    want = Demo(
        n=12,
        x=0.0003,
        flag=True,
        text="a b, c",
        maybe=7,
        pair=(0.8, 0.99),
        many=(1.5, 2.0, 2.5),
        ids=[4, 5, 6],
        colour=Colour.BLUE,
        either=(1, 3, 9),
        pick="q",
        inner=Inner(k=9, mode="b"),
    )
    assert got == want
    assert type(got.many[1]) is float and type(got.either[0]) is int and type(got.x) is float
    # None, a name in a str | tuple field, false, an empty list, integral scientific notation
    got = apply_overrides(
        Demo(maybe=3), "maybe=none\neither=pow2\n# one per line\nflag=0\nids=\nn=1e3"
    )
    assert (got.maybe, got.either, got.flag, got.ids, got.n) == (None, "pow2", False, [], 1000)
    assert apply_overrides(Demo(), {"maybe": "NULL", "inner": {"k": "4"}}).inner == Inner(k=4)


def test_values_from_python_and_json_are_checked_and_typed():
    got = apply_overrides(Demo(), {"n": 5, "x": 2, "pair": [0.1, 0.2], "many": [1, 2]})
    assert (got.n, got.x, got.pair, got.many) == (5, 2.0, (0.1, 0.2), (1.0, 2.0))
    assert type(got.x) is float and type(got.pair) is tuple
    for bad, needle in [
        ({"n": 1.5}, "n must be an integer"),
        ({"flag": 1}, "flag must be true or false"),
        ({"pair": [1.0, 2.0, 3.0]}, "pair must be 2 comma-separated numbers, got 3"),
        ({"colour": "green"}, "colour must be one of red, blue"),
        ({"inner.mode": "c"}, "mode must be one of a, b"),
        ({"pick": "r"}, "pick must be one of p, q"),
        ({"x": "fast"}, "x must be a number (e.g. x=0.5)"),
        ({"maybe": "many"}, "maybe must be an integer or none"),
    ]:
        with pytest.raises(ValueError, match="^--override .*: " + re.escape(needle)):
            apply_overrides(Demo(), bad)


def test_format_value_round_trips_every_type():
    d = Demo(
        n=-3,
        x=1e-8,
        flag=True,
        maybe=None,
        pair=(0.9, 0.95),
        many=(0.1, 0.2),
        ids=[1],
        colour=Colour.BLUE,
        either=(1.5, 3),
        inner=Inner(7, "b"),
    )
    flat = {f.name: getattr(d, f.name) for f in dataclasses.fields(d) if f.name != "inner"}
    flat.update({"inner.k": 7, "inner.mode": "b"})
    text = [f"{k}={format_value(v)}" for k, v in flat.items()]
    assert apply_overrides(Demo(), text) == d
    assert format_value((0.9, 0.95)) == "0.9,0.95" and format_value(None) == "none"


def test_split_overrides():
    assert split_overrides("lr=1e-3\n# a comment\n\n model.window = 4 ") == {
        "lr": "1e-3",
        "model.window": "4",
    }
    assert split_overrides(["a=b=c"]) == {"a": "b=c"} and split_overrides(None) == {}
    with pytest.raises(ValueError, match="'lr 3': write key=value"):
        split_overrides(["lr 3"])


# ------------------------------------------------------------------ the lab's configs
def test_train_and_model_fields_parse_by_their_declared_types():
    cfg = make_config(
        "cpu-fixed",
        [
            "betas=0.85,0.99",
            "lr=5e-4",
            "steps=1e3",
            "vocab_size=null",
            "val_tokens=2000",
            "model.schedule=0.6,1.4,0.8,1.2",
            "model.base=1,3,9",
            "model.rounding=floor",
            "model.coprime_stride=none",
            "model.train_seq_len=128",
            "model.rung_policy=freeze",
            "model.ffn_ratio=2",
        ],
    )
    assert (cfg.betas, cfg.lr, cfg.steps, cfg.vocab_size, cfg.val_tokens) == (
        (0.85, 0.99),
        0.0005,
        1000,
        None,
        2000,
    )
    m = cfg.model
    assert m.schedule == (0.6, 1.4, 0.8, 1.2) and m.layer_alphas() == [0.6, 1.4, 0.8, 1.2]
    assert m.base == (1, 3, 9) and (m.rounding, m.rung_policy, m.train_seq_len) == (
        "floor",
        "freeze",
        128,
    )
    assert m.coprime_stride is None and m.ffn_ratio == 2.0 and m.n_layers == 4
    # a custom schedule fits the depth set in the same overrides
    two = make_config("cpu-fixed", {"model.n_layers": "2", "model.schedule": "0.6,1.4"})
    assert two.model.layer_alphas() == [0.6, 1.4]
    assert make_config("cpu-fixed", ["model.attention=dense"]).model.attention == "dense"
    assert make_config("tiny", ["model.learned_init=stagger"]).model.learned_init == "stagger"


def test_typed_overrides_of_model_fields():
    over = typed_overrides(ModelConfig, ["window=3", "schedule=stagger", "base=0.5,2"])
    assert over == {"window": 3, "schedule": "stagger", "base": (0.5, 2)}
    assert apply_overrides(config_for("tiny"), over) == config_for(
        "tiny", window=3, schedule="stagger", base=(0.5, 2)
    )


def test_config_from_dict_round_trips_json():
    cfg = make_config(
        "tiny", ["betas=0.8,0.9", "model.schedule=0.7,1.3", "model.base=1,2,5", "val_tokens=none"]
    )
    raw = json.loads(json.dumps(cfg.to_dict()))  # tuples come back as lists
    assert isinstance(raw["betas"], list) and isinstance(raw["model"]["schedule"], list)
    back = config_from_dict(raw, TrainConfig)
    assert isinstance(back, TrainConfig) and back == cfg
    assert back.betas == (0.8, 0.9) and back.model.base == (1, 2, 5)
    m = json.loads(json.dumps(dataclasses.asdict(cfg.model)))  # efficiency's child spec
    assert config_from_dict(m, ModelConfig) == cfg.model
    # older files lack newer fields: those keep their defaults
    del raw["keep_ckpts"], raw["model"]["alpha_span"]
    assert config_from_dict(raw, TrainConfig) == cfg
    with pytest.raises(ValueError, match=r"\['model.colour'\] that ModelConfig does not know"):
        config_from_dict(
            {**raw, "model": {**raw["model"], "colour": "red"}}, TrainConfig, source="c.json"
        )
    with pytest.raises(ValueError, match=r"^c.json: model.window=abc: window must be an integer"):
        config_from_dict(
            {**raw, "model": {**raw["model"], "window": "abc"}}, TrainConfig, source="c.json"
        )
    with pytest.raises(ValueError, match=r"^c.json: betas=0.9: betas must be 2 comma"):
        config_from_dict({**raw, "betas": [0.9]}, TrainConfig, source="c.json")


def test_read_config_errors(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        read_config(str(tmp_path / "nope.json"), TrainConfig)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="unreadable"):
        read_config(str(tmp_path / "bad.json"), TrainConfig)


# ------------------------------------------------------------------ the CLI: exit 2, one line
BAD = [
    (
        ["--override", "betas=0.9"],
        "--override betas=0.9: betas must be 2 comma-separated "
        "numbers, got 1 (e.g. betas=0.9,0.95)",
    ),
    (
        ["--override", "model.window=abc"],
        "--override model.window=abc: window must be an integer (e.g. model.window=8)",
    ),
    (
        ["--override", "model.rounding=up"],
        "--override model.rounding=up: rounding must be one of round, floor, ceil",
    ),
    (["--override", "model.attention=full"], "attention must be one of sparse, dense"),
    (["--override", "model.path=fast"], "path must be one of auto, shift, mask, interp, blur"),
    (["--override", "model.rung_policy=x"], "rung_policy must be one of recompute, freeze"),
    (
        ["--override", "model.schedule=zigzag"],
        "--override model.schedule=zigzag: schedule must "
        "be one of fixed, stagger, coprime, learned or a comma list of numbers",
    ),
    (
        ["--override", "model.schedule=0.6,1.4"],
        "--override model.schedule=0.6,1.4: a custom "
        "schedule has 2 values but the model has 4 layers",
    ),
    (["--override", "model.base=fibonacci"], "base must be one of fib, pow2 or a comma list"),
    (
        ["--override", "model.windw=4"],
        "--override model.windw=4: 'windw' names no model field; did you mean model.window?",
    ),
    (["--override", "stpes=4"], "'stpes' names no training field; did you mean steps?"),
    (["--override", "colour=red"], "'colour' names no training field; use one of steps,"),
    (["--override", "lr=fast"], "--override lr=fast: lr must be a number (e.g. lr=0.0003)"),
    (["--override", "val_tokens=lots"], "val_tokens must be an integer or none"),
    (["--override", "model=3"], "model is a section; set its fields as model.<field>=value"),
    (["--override", "lr", "3e-4"], "override 'lr': write key=value"),
    (["--override", "model.n_kv_heads=3"], "model.n_kv_heads=3: n_heads=4 must be a multiple"),
]


@pytest.mark.parametrize("args, needle", BAD, ids=[b[0][-1] for b in BAD])
def test_bad_train_override_is_one_line_and_exit_2(args, needle, capsys, tmp_path):
    argv = ["train", "--preset", "cpu-fixed", "--store", "", "--quiet", "--override"]
    assert main([*argv, f"run_dir={tmp_path}", "steps=1", *args]) == 2  # --override adds up
    out, err = capsys.readouterr()
    assert needle in err and err.startswith("fiblab: error: ")
    assert err.count("\n") == 1 and "Traceback" not in err and out == ""
    assert not os.listdir(tmp_path)  # nothing was started


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["train"], "needs --preset NAME (e.g. cpu-stagger) or --config"),
        (["train", "--preset", "tiny", "--config", "c.json"], "give one"),
        (["train", "--config", "no/such/config.json"], "'no/such/config.json' does not exist"),
        (["efficiency", "--override", "windw=3"], "'windw' names no model field; did you mean"),
        (["efficiency", "--override", "rounding=up"], "rounding must be one of round, floor"),
        (["efficiency", "--override", "model.window=x"], "window must be an integer"),
    ],
)
def test_bad_cli_config_is_one_line_and_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    _, err = capsys.readouterr()
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_efficiency_takes_typed_overrides(capsys):
    argv = ["efficiency", "--preset", "tiny", "--lengths", "64", "--schedules", "fixed"]
    assert main(argv + ["--override", "model.window=3", "base=1,2,5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["attrs"]["override"] == {"window": 3, "base": [1, 2, 5]}


# ------------------------------------------------------------------ --config: re-run, vary
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A runs folder whose data cache holds the embedded corpus at the tiny preset's vocab
    (tokenised once per test session, the folder tests/fiblab/test_launch.py uses)."""
    shared = tmp_path_factory.getbasetemp() / "fiblab-tiny-data"
    prepare("bible", vocab_size=512, cache_dir=str(shared))
    d = tmp_path_factory.mktemp("configruns")
    os.symlink(shared, d / "data")
    return d


def _losses(store, name):
    with Store(store) as st:
        m = st.metrics(name, names=["loss"])
    return dict(zip(m["step"].tolist(), m["value"].tolist()))


def test_config_json_reruns_and_varies_a_run(runs, capsys):
    store = str(runs / "store.db")
    cfg = make_config(
        "tiny",
        {
            "steps": 3,
            "run_dir": str(runs),
            "name": "orig",
            "eval_every": 0,
            "betas": "0.85,0.97",
            "model.learned_init": "0.7,1.3",
            "val_tokens": "none",
        },
    )
    train(cfg, store_path=store, quiet=True)
    path = os.path.join(runs, "orig", "config.json")
    assert read_config(path, TrainConfig) == cfg == config_from_file(path)

    common = ["train", "--config", path, "--store", store, "--quiet"]
    assert main(common) == 2  # same name: the run's checkpoints are not overwritten
    assert "already has checkpoints" in capsys.readouterr().err
    assert main([*common, "--name", "again"]) == 0
    again = read_config(os.path.join(runs, "again", "config.json"), TrainConfig)
    assert again == dataclasses.replace(cfg, name="again")
    assert _losses(store, "again") == _losses(store, "orig")  # the same run, step for step

    vary = ["--name", "varied", "--steps", "2", "--seed", "7", "--override", "lr=1e-3"]
    assert main([*common, *vary, "model.window=3", "betas=0.9,0.99"]) == 0
    varied = read_config(os.path.join(runs, "varied", "config.json"), TrainConfig)
    assert varied == dataclasses.replace(
        cfg,
        name="varied",
        steps=2,
        seed=7,
        lr=1e-3,
        betas=(0.9, 0.99),
        model=dataclasses.replace(cfg.model, window=3),
    )
    assert sorted(_losses(store, "varied")) == [1, 2]


def test_a_preset_of_the_other_kind_is_named_as_such():
    """`--preset` is a training preset for `fiblab train` and a model preset elsewhere: a name
    of the other kind says which kind it is."""
    from lab.lm.modelconfig import config_for
    from lab.training.trainconfig import make_config

    with pytest.raises(ValueError, match=r"'paper-60m' is a model preset"):
        make_config("paper-60m")
    with pytest.raises(ValueError, match=r"unknown: use one of \[.*\] \(model presets; training"):
        config_for("cpu-stagger")
    with pytest.raises(ValueError) as e:
        make_config("no-such")
    assert "model preset" not in str(e.value)
