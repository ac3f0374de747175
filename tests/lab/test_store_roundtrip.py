"""Store round trips (hypothesis): whatever sequence of runs, metrics, evaluations (every kind the
tables read: final, extrapolation, position-matched blocks, position bins), α, probe records and
events is written, the readers return what a plain-dict model of the writes says — the last
write of a key wins, events only append, rows come back in the readers' documented order."""

import json
import math

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.store import Store

NAMES = ["a", "b", "c"]
KINDS = ["recompute", "freeze", "recompute:block1", "freeze:block0", "bin3", "light"]
finite = st.floats(-50, 50, allow_nan=False)
maybe_nan = st.one_of(finite, st.just(math.nan))
json_value = st.one_of(
    st.integers(-5, 5), st.text("xyz", max_size=3), st.booleans(), st.none(), finite
)
config = st.dictionaries(st.text("kmn", min_size=1, max_size=2), json_value, max_size=3)

ops = st.lists(
    st.one_of(
        st.tuples(st.just("metric"), st.sampled_from(NAMES), st.integers(0, 1),
                  st.dictionaries(st.sampled_from(["lr", "loss", "g"]), maybe_nan, max_size=2)),
        st.tuples(st.just("eval"), st.sampled_from(NAMES), st.integers(0, 1),
                  st.sampled_from(["bible", "fineweb_edu"]), st.sampled_from([64, 256]),
                  finite, st.integers(0, 10**6), st.sampled_from(KINDS)),
        st.tuples(st.just("alpha"), st.sampled_from(NAMES), st.integers(0, 1),
                  st.lists(maybe_nan, min_size=1, max_size=3)),
        st.tuples(st.just("event"), st.sampled_from(NAMES + [None]), st.sampled_from(["x", "y"]),
                  st.one_of(st.none(), st.text("pq", max_size=3))),
        st.tuples(st.just("status"), st.sampled_from(NAMES),
                  st.sampled_from(["running", "done", "failed", "stopped", "pending"])),
    ),
    min_size=10,
    max_size=30,
)  # fmt: skip


def _same(a, b) -> bool:
    return (a is None or (isinstance(a, float) and math.isnan(a))) == (
        b is None or (isinstance(b, float) and math.isnan(b))
    ) and (a is None or (isinstance(a, float) and math.isnan(a)) or a == b)


@settings(max_examples=25, deadline=None)
@given(
    runs=st.lists(
        st.tuples(st.sampled_from(NAMES), config, st.sampled_from(["lm", "x"]),
                  st.one_of(st.none(), st.text("pr", min_size=1, max_size=3)),
                  st.one_of(st.none(), st.integers(0, 9))),
        min_size=3, max_size=5,
    ),
    writes=ops,
)  # fmt: skip
def test_every_write_reads_back_as_the_model_says(runs, writes):
    s = Store(":memory:")
    order, model_runs = [], {}
    for name, cfg, kind, preset, seed in runs + [(n, {}, "lm", None, None) for n in NAMES]:
        if name in model_runs and not cfg and preset is None:
            continue  # the padding only makes sure every name exists
        s.start_run(name, cfg, kind=kind, preset=preset, seed=seed, git_rev="r" + name)
        order += [] if name in order else [name]
        model_runs[name] = dict(
            config=cfg, kind=kind, preset=preset, seed=seed, status="running", finished=False
        )
    metrics, evals, alphas, events = {}, {}, {}, []
    for op in writes:
        if op[0] == "metric":
            _, run, step, values = op
            s.log_metrics(run, step, values)
            metrics.update({(run, step, k): v for k, v in values.items()})
        elif op[0] == "eval":
            _, run, step, ds, ctx, loss, tokens, kind = op
            assert s.log_eval(run, step, ds, ctx, loss, tokens, kind=kind) == math.exp(loss)
            evals[(run, step, ds, ctx, kind)] = (loss, math.exp(loss), tokens)
        elif op[0] == "alpha":
            _, run, step, values = op
            s.log_alphas(run, step, values)
            alphas.update({(run, step, i): a for i, a in enumerate(values)})
        elif op[0] == "event":
            _, run, kind, message = op
            events.append((s.log_event(run, kind, message), run, kind, message))
        else:
            _, run, status = op
            s.set_status(run, status)
            model_runs[run]["status"] = status
            if status in ("done", "failed", "running"):  # others keep the finish stamp
                model_runs[run]["finished"] = status != "running"
    rank = {n: i for i, n in enumerate(order)}

    got = s.runs()
    assert list(got["name"]) == order
    for r in got.itertuples(index=False):
        want = model_runs[r.name]
        assert json.loads(r.config_json) == want["config"] == s.config(r.name)
        assert (r.kind, r.status, r.git_rev) == (want["kind"], want["status"], "r" + r.name)
        assert _same(None if pd.isna(r.preset) else r.preset, want["preset"])
        assert _same(None if pd.isna(r.seed) else int(r.seed), want["seed"])
        assert pd.isna(r.finished_at) != want["finished"]
    for kind in ("lm", "x"):
        assert list(s.runs(kind=kind)["name"]) == [
            n for n in order if model_runs[n]["kind"] == kind
        ]

    m = s.metrics()
    keys = sorted(metrics, key=lambda k: (rank[k[0]], k[1], k[2]))
    assert list(zip(m["run"], m["step"], m["name"])) == keys
    assert all(_same(v, metrics[k]) for k, v in zip(keys, m["value"]))
    one = s.metrics("b", names="lr")
    assert list(one["step"]) == [k[1] for k in keys if k[0] == "b" and k[2] == "lr"]

    ev = s.evals()
    keys = sorted(evals, key=lambda k: (rank[k[0]], *k[1:]))
    assert list(zip(ev["run"], ev["step"], ev["dataset"], ev["context_len"], ev["kind"])) == keys
    assert list(zip(ev["loss"], ev["perplexity"], ev["tokens"])) == [evals[k] for k in keys]
    assert list(s.evals(["c", "a"])["run"]) == [k[0] for k in keys if k[0] in ("a", "c")]

    al = s.alphas()
    keys = sorted(alphas, key=lambda k: (rank[k[0]], k[1], k[2]))
    assert list(zip(al["run"], al["step"], al["layer"])) == keys
    assert all(_same(v, alphas[k]) for k, v in zip(keys, al["alpha"]))

    e = s.events()
    assert [
        (i, None if pd.isna(r) else r, k, None if pd.isna(msg) else msg)
        for i, r, k, msg in zip(e["id"], e["run"], e["kind"], e["message"])
    ] == events
    assert list(s.events("a")["id"]) == [x[0] for x in events if x[1] == "a"]
    s.close()


probe_record = st.fixed_dictionaries(
    {
        "task": st.sampled_from(["marked", "copy"]),
        "mechanism": st.just("blur"),
        "depth": st.integers(1, 2),
        "init": st.just("uniform"),
        "seed": st.integers(0, 1),
        "steps": st.just(10),
        "acc": st.dictionaries(st.integers(1, 6), st.floats(0, 1), min_size=1, max_size=3),
        "trajectory": st.lists(
            st.fixed_dictionaries(
                {"step": st.integers(0, 9), "alphas": st.lists(finite, min_size=1, max_size=2)}
            ),
            max_size=2,
            unique_by=lambda t: t["step"],
        ),
        "loss": st.lists(
            st.fixed_dictionaries({"step": st.integers(0, 9), "loss": finite}),
            max_size=2,
            unique_by=lambda p: p["step"],
        ),
        "seconds": finite,
    }
)


@settings(max_examples=25, deadline=None)
@given(records=st.lists(probe_record, min_size=1, max_size=4))
def test_probe_records_read_back_the_last_written_per_cell(records):
    s = Store(":memory:")
    last = {}
    for rec in records:
        name = s.log_probe(rec)
        want = f"{rec['task']}/{rec['mechanism']}/d{rec['depth']}/{rec['init']}/s{rec['seed']}"
        assert name == want + f"/n{rec['steps']}"
        last[name] = rec
    p = s.probes()
    rows = sorted(
        (r["task"], r["mechanism"], r["depth"], r["init"], r["seed"], r["steps"], d, a, n)
        for n, r in last.items()
        for d, a in r["acc"].items()
    )
    assert list(
        zip(*(p[c] for c in ("task", "mechanism", "depth", "init", "seed", "steps")),
            p["distance"], p["accuracy"], p["run"])
    ) == rows  # fmt: skip
    for n, r in last.items():
        extra = json.loads(p.loc[p["run"] == n, "extra_json"].iloc[0])
        assert extra == {"seconds": r["seconds"]}
        assert s.runs().set_index("name").loc[n, "kind"] == "probe"
        a = s.alphas(n)
        want = sorted((t["step"], i, x) for t in r["trajectory"] for i, x in enumerate(t["alphas"]))
        assert list(zip(a["step"], a["layer"], a["alpha"])) == want
        m = s.metrics(n)
        assert list(zip(m["step"], m["name"], m["value"])) == sorted(
            (q["step"], "loss", q["loss"]) for q in r["loss"]
        )
    assert set(s.probes(task="copy")["run"]) == {n for n, r in last.items() if r["task"] == "copy"}
    s.close()
