"""The run's summary, printed at the end: the attention and training-step tables, the checks
within tolerance, the error count."""

from __future__ import annotations

from benchmarks.gpu.run import Run


def print_tables(run: Run) -> None:
    rows = [r for r in run.record.get("attn", []) if "ms" in r]
    if rows:
        names = list(dict.fromkeys(r["impl"] for r in rows))
        for mode in ("fwd", "fwd+bwd"):
            print(f"\nattention {mode}, ms (× = dense time / this time; higher is faster)")
            print(f"{'T':>7} " + " ".join(f"{n:>18}" for n in names))
            for T in sorted({r["T"] for r in rows}):
                cells = []
                for n in names:
                    r = next(
                        (x for x in rows if x["impl"] == n and x["T"] == T and x["mode"] == mode),
                        None,
                    )
                    cells.append(
                        f"{r['ms']:9.2f} ×{r.get('x_dense-sdpa', float('nan')):6.1f}"
                        if r
                        else f"{'—':>16}"
                    )
                print(f"{T:>7} " + " ".join(f"{c:>18}" for c in cells))
        print("\npeak memory, fwd+bwd, MiB")
        for T in sorted({r["T"] for r in rows}):
            cells = [
                f"{r['impl']} {r['peak_mb']:.0f}"
                for r in rows
                if r["T"] == T and r["mode"] == "fwd+bwd" and r.get("peak_mb") is not None
            ]
            print(f"{T:>7}  " + ", ".join(cells))
    train = [r for r in run.record.get("train", []) if "step_s" in r]
    if train:
        print(
            f"\ntraining step ({train[0]['preset']}, batch {train[0]['batch']}, "
            f"T={train[0]['seq_len']})"
        )
        for r in train:
            print(
                f"  {r['variant']:<16} {r['step_s'] * 1e3:8.1f} ms  "
                f"{r['tokens_per_s']:10.0f} tok/s  time/dense {r.get('x_dense_time', 0):.2f}"
            )
        for k, v in run.record.get("train_ratios", {}).items():
            print(f"  {k}: {v:.2f}")
    gate = run.record.get("gate", {})
    for v in gate.get("verdicts", []):
        print(
            f"\ntriton first-use check {v['dtype']}: {'ok' if v['ok'] else 'FAILED: ' + v['reason']}"
        )
    if "flex_vs_triton" in gate:
        f = gate["flex_vs_triton"]
        print(f"flex vs triton (T={f['T']}): {'ok' if f['ok'] else 'DIFFER'} {f['errors']}")
    checks = run.record.get("check", [])
    if checks:
        bad = [c for c in checks if not c.get("ok")]
        print(
            f"\nchecks: {len(checks) - len(bad)}/{len(checks)} within tolerance"
            + (
                ""
                if not bad
                else "; failing: "
                + ", ".join(f"shape {c['shape']} {c['impl']}/{c['mode']}/{c['dtype']}" for c in bad)
            )
        )
    if run.record["errors"]:
        print(f"errors: {len(run.record['errors'])} (details in the JSON)")
