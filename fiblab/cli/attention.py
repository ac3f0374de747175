"""Subcommands on the attention rule itself: selfcheck, offsets, schedule, params, coverage,
receptive-field.

torch and the lab's models are imported inside the ``cmd_*`` functions, so ``fiblab --help``
stays fast."""

from __future__ import annotations

import time

from fiblab.cli.argtypes import (
    add_model_preset,
    base_arg,
    positive_float,
    positive_int,
    schedule_arg,
)
from lab.ladder.offsets import Ladder


# --------------------------------------------------------------------------------------------
def add_attention(sub) -> None:
    """`fiblab selfcheck`, `offsets`, `schedule`, `coverage` and `receptive-field`: the
    attended set and its coverage from the command line."""
    s = sub.add_parser("selfcheck", help="build a model, forward/backward through every path")
    add_model_preset(s, "paper-60m")
    s.add_argument(
        "--seq-len", type=positive_int, default=None, help="input length (default: preset's)"
    )
    s.set_defaults(fn=cmd_selfcheck)

    def set_args(sp):
        sp.add_argument("--window", "-W", type=int, default=8, help="local window W")
        sp.add_argument("--seq-len", "-T", type=int, default=1024, help="sequence length T")
        sp.add_argument(
            "--base", type=base_arg, default="fib", help="fib, pow2 or a comma list like 1,3,9"
        )
        sp.add_argument("--rungs", "-K", type=int, default=15, help="rungs K of the base")
        sp.add_argument(
            "--rounding",
            choices=["round", "floor", "ceil"],
            default="round",
            help="how α·f becomes an integer distance (round: half to even)",
        )

    s = sub.add_parser("offsets", help="the attended distances of one layer")
    s.add_argument("--alpha", type=positive_float, default=1.0, help="the layer's scale α")
    s.add_argument(
        "--reach", type=int, default=None, help="freeze rungs at this length (default: never)"
    )
    s.add_argument("--interp", action="store_true", help="show interpolated columns instead")
    set_args(s)
    s.set_defaults(fn=cmd_offsets)

    s = sub.add_parser("schedule", help="per-layer alpha and attended sets of a schedule")
    s.add_argument("schedule", type=schedule_arg, help="fixed|stagger|coprime|a,comma,list")
    s.add_argument("--layers", "-L", type=int, default=16, help="layers L")
    s.add_argument(
        "--stride", type=int, default=None, help="coprime stride S (default: the schedule's)"
    )
    s.add_argument("--sets", action="store_true", help="print each layer's rungs")
    set_args(s)
    s.set_defaults(fn=cmd_schedule)

    s = sub.add_parser("coverage", help="distinct-distance and band coverage of a schedule")
    s.add_argument("--schedule", default="stagger", help="fixed|stagger|coprime")
    s.add_argument(
        "--alphas",
        type=schedule_arg,
        default=None,
        help="custom a,b,c per layer (default: the schedule's)",
    )
    s.add_argument("--layers", "-L", type=int, default=16, help="layers L")
    s.add_argument(
        "--stride", type=int, default=None, help="coprime stride S (default: the schedule's)"
    )
    s.add_argument("--band", type=int, default=None, help="soft band half-width (default W)")
    s.add_argument("--json", action="store_true", help="one JSON object")
    s.add_argument("--full", action="store_true", help="with --json: include per-distance data")
    set_args(s)
    s.set_defaults(fn=cmd_coverage)

    s = sub.add_parser("receptive-field", help="reachable distances through the stack")
    s.add_argument(
        "--schedule",
        default="stagger",
        help="a scheme: stagger, fixed, coprime, pow2, pow2-stagger, dense (or its long name, "
        "e.g. fib-stagger)",
    )
    s.add_argument(
        "--schemes", nargs="+", default=None, help="compare several schemes (default: --schedule)"
    )
    s.add_argument(
        "--alphas",
        type=schedule_arg,
        default=None,
        help="custom a,b,c per layer (default: the scheme's)",
    )
    s.add_argument("--layers", "-L", type=int, default=16, help="layers L")
    s.add_argument("--residual", type=float, default=0.0, help="weight kept on staying put")
    s.add_argument("--json", action="store_true", help="one JSON object")
    set_args(s)
    s.set_defaults(fn=cmd_receptive_field)


def cmd_selfcheck(args) -> int:
    import torch

    from lab.lm.model import build_model

    if args.seq_len is not None and args.seq_len < 1:
        raise ValueError(f"--seq-len {args.seq_len} must be an integer >= 1 (the input length)")
    torch.manual_seed(0)
    ref = build_model(args.preset)
    cfg = ref.cfg
    T = args.seq_len or cfg.seq_len
    print(
        f"preset {args.preset}: d={cfg.d_model} L={cfg.n_layers} heads={cfg.n_heads}/"
        f"{cfg.n_kv_heads}kv vocab={cfg.vocab_size} seq_len={cfg.seq_len} W={cfg.window}"
    )
    print(
        f"parameters: {ref.num_params():,} (non-embedding {ref.num_params(True):,}); "
        f"learned alpha adds {cfg.n_layers} theta scalars"
    )
    ids = torch.randint(0, cfg.vocab_size, (1, T + 1), generator=torch.Generator().manual_seed(1))
    x, y = ids[:, :-1], ids[:, 1:]
    variants = [
        ("dense", dict(attention="dense")),
        ("fixed / mask", dict(path="mask")),
        ("fixed / shift", dict(path="shift")),
        ("fixed / interp", dict(path="interp")),
        ("stagger / mask", dict(schedule="stagger", path="mask")),
        ("stagger / shift", dict(schedule="stagger", path="shift")),
        ("coprime / shift", dict(schedule="coprime", path="shift")),
        ("pow2 stagger / shift", dict(base="pow2", schedule="stagger", path="shift")),
        ("learned / interp", dict(schedule="learned")),
    ]
    state = ref.state_dict()
    losses = {}
    print(f"\nforward + backward, B=1, T={T}:")
    print(f"{'variant':<22}{'loss':>10}{'grad norm':>12}{'seconds':>10}")
    for name, over in variants:
        model = build_model(args.preset, **over)
        model.load_state_dict(state, strict=False)
        t0 = time.perf_counter()
        _, loss = model(x, y)
        loss.backward()
        dt = time.perf_counter() - t0
        gn = torch.norm(
            torch.stack([p.grad.norm() for p in model.parameters() if p.grad is not None])
        )
        if not (torch.isfinite(loss) and torch.isfinite(gn)):
            print(f"FAILED: {name} gave a non-finite loss or gradient")
            return 1
        losses[name] = loss.item()
        extra = ""
        if model.cfg.learned:
            g = [b.attn.theta.grad.item() for b in model.blocks]
            extra = f"   dL/dtheta layer0={g[0]:+.2e}"
        print(f"{name:<22}{loss.item():>10.5f}{gn.item():>12.4f}{dt:>10.2f}{extra}")
    checks = [
        ("fixed / mask", "fixed / shift"),
        ("fixed / mask", "fixed / interp"),
        ("stagger / mask", "stagger / shift"),
    ]
    for a, b in checks:
        diff = abs(losses[a] - losses[b])
        ok = diff < 1e-4
        print(f"{'OK ' if ok else 'BAD'} {a} vs {b}: |dloss| = {diff:.2e}")
        if not ok:
            return 1
    print("\nselfcheck passed")
    return 0


def _ladder(args, **override) -> Ladder:
    """The rule's settings the command line gave (``--window --base --rungs --rounding
    --reach``), with ``override`` replacing some."""
    given = dict(base=args.base, rungs=args.rungs, rounding=args.rounding)
    given["reach"] = getattr(args, "reach", None)
    return Ladder(args.window, **{**given, **override})


def cmd_offsets(args) -> int:
    from lab.ladder.plan import plan_for

    plan = plan_for(
        args.alpha,
        args.seq_len,
        _ladder(args),
        interpolate=args.interp,
    )
    if args.interp:
        print(
            f"interpolated columns (alpha={args.alpha}, W={args.window}, T={args.seq_len}, "
            f"paper's skip rule): {len(plan)}"
        )
        for lo, frac, interp in zip(plan.lo, plan.fracs, plan.interpolated):
            if interp:
                print(f"  lo={lo:<6} frac={frac:.4f}")
        return 0
    d = plan.distances
    print(
        f"attended distances (alpha={args.alpha}, W={args.window}, T={args.seq_len}, "
        f"base={args.base}, rounding={args.rounding}, window counted): {len(d)}"
    )
    print(" ".join(map(str, d)))
    return 0


def cmd_schedule(args) -> int:
    from lab.ladder.plan import attended_distances
    from lab.ladder.schedules import coprime_stride, layer_alphas

    alphas = layer_alphas(args.schedule, args.layers, stride=args.stride)
    if args.schedule in ("coprime", "hdc"):
        print(f"coprime stride S = {args.stride or coprime_stride(args.layers)}")
    union: set[int] = set()
    for ell, a in enumerate(alphas):
        d = attended_distances(
            a,
            args.seq_len,
            _ladder(args),
        )
        union.update(d)
        line = f"layer {ell:>2}  alpha={a:.4f}  |set|={len(d)}"
        if args.sets:
            line += "  rungs: " + " ".join(str(x) for x in d if x > args.window)
        print(line)
    print(
        f"union over layers: {len(union)} distinct distances (window counted; "
        f"{len([u for u in union if u > args.window])} beyond it), rounding={args.rounding}"
    )
    return 0


def add_params(sub) -> None:
    """`fiblab params`'s arguments."""
    s = sub.add_parser("params", help="parameter count of a preset")
    add_model_preset(s, "paper-60m")
    s.add_argument(
        "--schedule",
        type=schedule_arg,
        default=None,
        help="α schedule, e.g. learned, or one α a layer (default: the preset's)",
    )
    s.set_defaults(fn=cmd_params)


def cmd_params(args) -> int:
    from lab.lm.model import build_model

    over = {"schedule": args.schedule} if args.schedule else {}
    m = build_model(args.preset, **over)
    print(f"{m.num_params():,} parameters ({m.num_params(True):,} non-embedding)")
    return 0


def cmd_coverage(args) -> int:
    from lab.util import jsonio
    from probes.coverage import describe, schedule_coverage

    if args.full and not args.json:  # it was ignored, silently
        raise ValueError("--full adds per-distance data to --json's output: add --json")

    report = schedule_coverage(
        args.alphas or args.schedule,
        args.layers,
        seq_len=args.seq_len,
        ladder=_ladder(args),
        band=args.band,
        stride=args.stride,
    )
    if args.json:
        if not args.full:
            for key in ("layers_per_distance", "per_layer_sets"):
                report.pop(key)
        print(jsonio.dumps(report))
        return 0
    print(describe(report))
    for ell, (a, n, b) in enumerate(
        zip(report["alphas"], report["per_layer"], report["band_coverage_per_layer"])
    ):
        extra = report["beyond_reach"][ell]
        print(
            f"  layer {ell:>2} alpha={a:.4f} |set|={n:>3} band={100 * b:5.1f}%"
            + (f"  untrained at longer T: {extra}" if extra else "")
        )
    g = report["gaps"]
    print(
        f"gaps outside the ±{args.band if args.band is not None else args.window} band: "
        f"{len(g)}" + (f" (first: {g[:5]})" if g else "")
    )
    return 0


def cmd_receptive_field(args) -> int:
    from lab.ladder.plan import layer_sets
    from lab.ladder.schedules import layer_alphas
    from lab.ladder.schemes import scheme
    from lab.util import jsonio
    from probes.receptive_field import receptive_report, scheme_sets

    schemes = args.schemes or [args.schedule]
    out = {}
    for name in schemes:
        s = None if args.alphas else scheme(name)
        if args.alphas:
            sets = layer_sets(
                layer_alphas(args.alphas, args.layers),
                args.seq_len,
                _ladder(args),
            )
        elif args.base == "pow2" and s.base == "fib":  # the scheme's schedule on pow2 rungs
            sets = layer_sets(
                layer_alphas(s.schedule, args.layers),
                args.seq_len,
                _ladder(args, base="pow2"),
            )
        else:
            sets = scheme_sets(
                name, args.layers, args.window, args.seq_len, args.rungs, args.rounding
            )
        out[name] = receptive_report(sets, args.seq_len, args.residual)
    convention = dict(
        layers=args.layers,
        window=args.window,
        rungs=args.rungs,
        seq_len=args.seq_len,
        base=args.base,
        rounding=args.rounding,
        residual=args.residual,
    )
    if args.json:
        if len(out) == 1:
            print(
                jsonio.dumps(
                    {"scheme": schemes[0], "convention": convention, **next(iter(out.values()))}
                )
            )
        else:
            print(jsonio.dumps({"convention": convention, "schemes": out}))
        return 0
    print(f"convention: {convention}")
    print(
        f"{'scheme':<14}"
        + "".join(f"{'l' + str(i + 1):>7}" for i in range(args.layers))
        + f"{'max hops':>10}{'mean dist':>11}"
    )
    for name, r in out.items():
        print(
            f"{name:<14}"
            + "".join(f"{f:>7.3f}" for f in r["reachable_fraction"])
            + f"{r['max_min_hops']:>10}{r['effective_mean_distance']:>11.1f}"
        )
    print("(reachable share of distances 0..T-1 after each layer)")
    return 0
