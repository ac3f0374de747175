"""`fiblab doctor`: this machine, the lab's choices on it and the times to expect
(`fiblab.doctor`)."""

from __future__ import annotations


def add_doctor(sub) -> None:
    """`fiblab doctor`'s arguments."""
    s = sub.add_parser("doctor", help="this machine, the lab's choices on it, expected times")
    s.add_argument("--json", action="store_true", help="the report as one JSON object")
    s.add_argument("--reps", type=int, default=3, help="timed steps of each measurement")
    s.add_argument(
        "--retune", action="store_true", help="forget the cached implementation choices first"
    )
    s.set_defaults(fn=cmd_doctor)


def cmd_doctor(args) -> int:
    from fiblab.doctor import diagnose, format_doctor
    from lab.util import jsonio

    if args.reps < 1:
        raise ValueError(f"--reps {args.reps} must be >= 1 (timed steps of each measurement)")
    report = diagnose(reps=args.reps, retune=args.retune)
    print(jsonio.dumps(report, indent=1) if args.json else format_doctor(report))
    return 0
